package route

import (
	"strings"
	"testing"
)

// TestClean checks the word-at-a-time clean against the bytewise one on
// every byte in every position of names of 8 to 64 bytes, and on names
// around the label and name length limits.
func TestClean(t *testing.T) {
	forms := []string{"abcdefgh", "abcdefg.ij", "abc.efghijklmnop", "a-b.c-d.e-f.g-h", "app-0000123.apps.example.com",
		strings.Repeat("a", 63) + ".b", strings.Repeat("a", 64), strings.Repeat("a", 63) + "b", strings.Repeat("ab.", 21) + "a"}
	for _, f := range forms {
		for i := range len(f) {
			for c := range 256 {
				h := f[:i] + string([]byte{byte(c)}) + f[i+1:]
				if clean(h) != cleanBytes(h) {
					t.Fatalf("clean(%q) = %v, the bytewise check says %v", h, clean(h), cleanBytes(h))
				}
			}
		}
	}
	tests := []struct {
		h    string
		want bool
	}{
		{"app-0000123.apps.example.com", true},
		{"a.b", true},
		{"abcdefgh", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("a", 63) + ".b", true},
		{strings.Repeat("a", 64) + ".b", false},
		{strings.Repeat("a.", 126) + "a", true},
		{strings.Repeat("a.", 126) + "ab", false}, // 254 bytes
		{"abcdefg.", false},
		{".bcdefgh", false},
		{"abcd..gh", false},
		{"abcd-.gh", false},
		{"abcd.-gh", false},
		{"-bcdefgh", false},
		{"abcdefg-", false},
		{"abcdEfgh", false},
		{"abcd/fgh", false},
		{"abcd\x80fgh", false},
	}
	for _, tt := range tests {
		if got := clean(tt.h); got != tt.want {
			t.Errorf("clean(%q) = %v, want %v", tt.h, got, tt.want)
		}
	}
}

// FuzzNormalizeHost checks host parsing (Host header and SNI) on any
// input: it never panics, a Host with a bad port is refused, an accepted
// name is clean (lower case, no port, no trailing dot, labels of
// [a-z0-9-], at most 253 bytes), normalizing it again changes nothing,
// and a table lookup of anything answers as normalizing first and
// reading plain maps does.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"shop.apps.test", "SHOP.apps.test.:8443", "[::1]:443", "bücher.example", "xn--bcher-kva.example",
		"a..b", "-a.b", "a:b:c", "", ".", "api.apps.test", "x.apps.test:", "\x00", strings.Repeat("a.", 130),
		"Shop.Apps.Test", "a_b.apps.test", "WWW.shop.test", "www.shop.test:443", "shop.x_y.test", "xn--bcher-kva.apps.test", "shop.apps.test:abc", "shop.apps.test:-1", "[::1]:x"} {
		f.Add(s)
	}
	// Stored names clean and not (which no host may reach), for Lookup to
	// agree with normalizing first and then reading plain maps.
	ref := &refNames{zones: map[string]*Zone{}, apps: map[string]*App{}, domains: map[string]*Domain{}}
	var s State
	for _, z := range []string{"apps.test", "Apps.Test", "x_y.test"} {
		ref.zones[z] = &Zone{Name: z}
		s.Zones = append(s.Zones, ref.zones[z])
	}
	for _, id := range []string{"shop", "Shop", "a_b", "xn--bcher-kva"} {
		ref.apps[id] = &App{ID: id}
		s.Apps = append(s.Apps, ref.apps[id])
	}
	for _, d := range []string{"www.shop.test", "WWW.shop.test", "www.shop.test:443", "www.shop.test.", "bücher.example"} {
		ref.domains[d] = &Domain{Domain: d, App: "shop", Verified: true}
		s.Domains = append(s.Domains, ref.domains[d])
	}
	b := NewBuilder(new(Live))
	b.Replace(s)
	tbl := b.Live().Load()
	f.Fuzz(func(t *testing.T, h string) {
		if clean(h) != cleanBytes(h) {
			t.Fatalf("clean(%q) = %v, the bytewise check says %v", h, clean(h), cleanBytes(h))
		}
		n, ok := NormalizeHost(h)
		if got, want := tbl.Lookup(h), ref.lookup(h); got != want {
			t.Fatalf("Lookup(%q) = %+v, want %+v", h, got, want)
		}
		if ok && BadPort(h) {
			t.Fatalf("NormalizeHost(%q) = %q, true for a bad port", h, n)
		}
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
