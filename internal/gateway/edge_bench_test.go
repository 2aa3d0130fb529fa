package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// BenchmarkEdgeLayers is the cost of steps 5-8 (cors, limit, auth, policy)
// on one request, without the network: an app with an origin list, path
// rules and auth.required, a request from an allowed origin with a valid
// token. The sub-benchmark "open" is an app with none of them (limit only).
func BenchmarkEdgeLayers(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	g := &Gateway{}
	if err := g.initEdge(EdgeOptions{RateLimit: 1 << 30, Auth: auth.Options{Issuers: []auth.Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}}}); err != nil {
		b.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	h := g.cors(g.limit(g.auth(g.policy(ok))))
	full := &route.App{ID: "shop", CORS: route.CORS{Origins: []string{"https://a.example"}}, Auth: route.Auth{Required: true},
		Policy: []route.PolicyRule{{Action: "deny", Path: "/admin/*"}, {Action: "deny", Methods: []string{"POST"}, Path: "/items/*"}}}
	tok := edgeSign(&testing.T{}, priv, nil)
	for _, c := range []struct {
		name string
		app  *route.App
		hdr  http.Header
	}{
		{"full", full, http.Header{"Origin": {"https://a.example"}, "Authorization": {"Bearer " + tok}}},
		{"open", &route.App{ID: "open"}, http.Header{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			base := httptest.NewRequest("GET", "http://x/items/1", nil)
			base.Header = c.hdr
			ip := netip.MustParseAddr("192.0.2.1")
			b.ReportAllocs()
			for b.Loop() {
				rq := &route.Request{Match: route.Match{Kind: route.KindApp, App: c.app}, ClientIP: ip}
				r := base.WithContext(route.WithRequest(base.Context(), rq))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
