package policy

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkCheck is the policy layer's cost on one request for paths that
// allow one reading (plain, dot), eight (all but folding), two per
// decoding round (encoded) and two for capitals (upper).
func BenchmarkCheck(b *testing.B) {
	rules := []Rule{
		{Action: Allow, Path: "/admin/health"},
		{Action: Deny, Path: "/admin/*"},
		{Action: Deny, Methods: []string{"POST"}, Path: "/items/*"},
	}
	for _, c := range []struct{ name, path string }{
		{"plain", "/items/1"},
		{"dot", "/static/app.js"},
		{"all", `/static/a;v=1\app.js`},
		{"encoded", "/static/%61pp.js"},
		{"upper", "/Static/App.js"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, _ := Check(rules, "GET", c.path); !ok {
					b.Fatal("denied")
				}
			}
		})
	}
}

// hostilePaths are the costliest paths a client can send within the
// default request line (8 KiB): many layers of encoding, every lenient
// reading at once, dot segments, and a cut ('#', '?', NUL) brought out by
// every round of decoding.
func hostilePaths(n int) []struct{ name, path string } {
	fill := func(unit string) string {
		var b strings.Builder
		for b.Len()+len(unit) <= n {
			b.WriteString(unit)
		}
		return b.String()
	}
	// cuts: "/A%25252523B%252523C%2523D%23E" and so on: each round of
	// decoding brings out a '#' before the last one.
	cuts := func() string {
		var b strings.Builder
		for b.Len() < n-64 {
			for _, enc := range []string{"%25252523", "%252523", "%2523", "%23"} {
				b.WriteString("/A;b.\\" + enc)
			}
		}
		return b.String()
	}
	return []struct{ name, path string }{
		{"pct25", fill("/%2525252e%2525252e")},
		{"dots", fill(`/./A;b.\../`)},
		{"dotdot", fill("/x/..")},
		{"cuts", cuts()},
		{"cutsEach", fill(`/A;b.\%25252523%252523%2523%23`)},
		{"cutsLast", fill(`/A;b.\%2525252e`)[:n-30] + "%25252523%252523%2523%23"},
		{"upper", fill("/AbC")},
		{"nonASCII", fill("/ı%C4%B1")},
		{"spaces", fill(`/%09A;b.%20\%2509.%C2%A0x%a0/../`)},
	}
}

// BenchmarkCheckHostile is Check's cost on the hostile paths, at 1, 2, 4
// and 8 KiB: the cost must grow no faster than the path.
func BenchmarkCheckHostile(b *testing.B) {
	rules := []Rule{
		{Action: Allow, Path: "/admin/health"},
		{Action: Deny, Path: "/admin/*"},
		{Action: Deny, Methods: []string{"POST"}, Path: "/items/*"},
	}
	for _, n := range []int{1024, 2048, 4096, 8192} {
		for _, c := range hostilePaths(n) {
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					Check(rules, "GET", c.path)
				}
			})
		}
	}
}
