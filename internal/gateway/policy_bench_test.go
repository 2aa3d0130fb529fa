package gateway

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// hostilePolicyPath is a path of n bytes (n > 64) that makes the policy
// layer read it in every way it can: every lenient reading, four layers
// of encoding, and a '#' that each round of decoding brings out.
func hostilePolicyPath(n int) string {
	const cuts = "%25252523%252523%2523%23"
	unit := `/A;b.\%2525252e`
	body := strings.Repeat(unit, (n-len(cuts))/len(unit)+1)[:n-len(cuts)]
	return body + cuts
}

// BenchmarkPolicyHostile is the policy layer's cost of the costliest
// request the default limits let through to an app whose rules name a
// few methods: an 8 KiB path read every way, and a 60 KiB header block
// of X-Original-URL values (four, as many as a request may name) read so
// too, with a method override naming every method the rules name.
func BenchmarkPolicyHostile(b *testing.B) {
	rules := []route.PolicyRule{
		{Action: "allow", Path: "/admin/health"},
		{Action: "deny", Path: "/admin/*"},
		{Action: "deny", Methods: []string{"POST", "PUT", "PATCH", "DELETE"}, Path: "/items/*"},
	}
	for _, c := range []struct {
		name     string
		path     string
		fields   int // X-Original-URL fields
		fieldLen int
		methods  string
	}{
		{"path", hostilePolicyPath(8<<10 - 32), 0, 0, ""},
		{"fields", "/", 4, 15 << 10, ""},
		{"fieldsMethods", "/", 4, 15 << 10, "POST, PUT, PATCH, DELETE"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "http://shop.apps.test"+c.path, nil)
			for range c.fields {
				r.Header.Add("X-Original-URL", hostilePolicyPath(c.fieldLen))
			}
			if c.methods != "" {
				r.Header.Set("X-HTTP-Method-Override", c.methods)
			}
			b.ReportAllocs()
			for b.Loop() {
				deniedByPolicy(rules, r)
			}
		})
	}
}

// BenchmarkPolicyLegit is the policy layer's cost of ordinary requests
// to an app with rules: a short path, a 2 KiB one, and one X-Original-URL.
func BenchmarkPolicyLegit(b *testing.B) {
	rules := []route.PolicyRule{
		{Action: "allow", Path: "/admin/health"},
		{Action: "deny", Path: "/admin/*"},
		{Action: "deny", Methods: []string{"POST", "DELETE"}, Path: "/items/*"},
	}
	long := "/static/" + strings.Repeat("Abc%20def/", 200)
	for _, c := range []struct{ name, path, override string }{
		{"short", "/items/1", ""},
		{"long", long, ""},
		{"override", "/", "/items/1?x=1"},
		{"methodOverride", "/items/1", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "http://shop.apps.test"+c.path, nil)
			if c.override != "" {
				r.Header.Set("X-Original-URL", c.override)
			}
			if c.name == "methodOverride" {
				r.Header.Set("X-HTTP-Method-Override", "PUT")
			}
			b.ReportAllocs()
			for b.Loop() {
				if deniedByPolicy(rules, r) != policyAllows {
					b.Fatal("denied")
				}
			}
		})
	}
}

// BenchmarkPolicyHostileRules is the costliest request to an app of a
// hundred rules naming ten methods each: a short path read every way,
// four times over in X-Original-URL, decided for four override methods.
func BenchmarkPolicyHostileRules(b *testing.B) {
	var rules []route.PolicyRule
	for i := range 100 {
		var ms []string
		for j := range 10 {
			ms = append(ms, "M"+strconv.Itoa(i*10+j))
		}
		rules = append(rules, route.PolicyRule{Action: "deny", Methods: ms, Path: "/x" + strconv.Itoa(i) + "/*"})
	}
	cuts := `/A;b.\.` + "%25252523%252523%2523%23"
	r := httptest.NewRequest("GET", "http://shop.apps.test"+cuts, nil)
	r.Header.Set("X-HTTP-Method-Override", "M1, M2, M3, M4")
	for range 4 {
		r.Header.Add("X-Original-URL", cuts)
	}
	b.ReportAllocs()
	for b.Loop() {
		deniedByPolicy(rules, r)
	}
}
