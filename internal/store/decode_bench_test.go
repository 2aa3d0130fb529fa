package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// BenchmarkDecodeApp measures reading one stored app, as every load and
// every change does: an app with CORS, a rate limit and three rules.
func BenchmarkDecodeApp(b *testing.B) {
	a := &route.App{ID: "shop", Mode: route.ModeHTTP, Status: route.StatusActive,
		CORS:      route.CORS{Origins: []string{"https://shop.example", "https://admin.shop.example"}},
		RateLimit: route.RateLimit{Requests: 600, Window: route.Duration(time.Minute)},
		Policy: []route.PolicyRule{{Action: "deny", Path: "/admin/*"}, {Action: "deny", Methods: []string{"DELETE"}, Path: "/api/*"},
			{Action: "allow", Path: "/*"}}}
	val, err := json.Marshal(a)
	if err != nil {
		b.Fatal(err)
	}
	k := appKind(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.decode("shop", val); err != nil {
			b.Fatal(err)
		}
	}
}
