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
		if clean(h) != cleanBytes(h) {
			t.Fatalf("clean(%q) = %v, the bytewise check says %v", h, clean(h), cleanBytes(h))
		}
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
