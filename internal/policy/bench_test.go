package policy

import "testing"

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
