package route

import (
	"strings"
	"testing"
)

// FuzzNormalizeHost checks host parsing (Host header and SNI) on any
// input: it never panics, an accepted name is clean (lower case, no port,
// no trailing dot, labels of [a-z0-9-], at most 253 bytes), normalizing it
// again changes nothing, and a table lookup of anything is safe.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"shop.apps.test", "SHOP.apps.test.:8443", "[::1]:443", "bücher.example", "xn--bcher-kva.example",
		"a..b", "-a.b", "a:b:c", "", ".", "api.apps.test", "x.apps.test:", "\x00", strings.Repeat("a.", 130)} {
		f.Add(s)
	}
	b := NewBuilder(new(Live))
	b.Replace(State{Zones: []*Zone{{Name: "apps.test"}}, Apps: []*App{{ID: "shop"}}})
	tbl := b.Live().Load()
	f.Fuzz(func(t *testing.T, h string) {
		n, ok := NormalizeHost(h)
		_ = tbl.Lookup(h)
		if !ok {
			return
		}
		if !clean(n) || n != strings.ToLower(n) || strings.HasSuffix(n, ".") || strings.Contains(n, ":") || len(n) > 253 {
			t.Fatalf("NormalizeHost(%q) = %q: not a clean name", h, n)
		}
		if n2, ok2 := NormalizeHost(n); !ok2 || n2 != n {
			t.Fatalf("NormalizeHost not idempotent: %q -> %q -> %q, %v", h, n, n2, ok2)
		}
	})
}
