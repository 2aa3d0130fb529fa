package gatehouse

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// The on-demand hook orders a certificate only for a verified custom
// domain of an app whose TLS the gateway terminates: never for a
// passthrough app's domain, whose host alone holds the key (DESIGN §3),
// even when the edge terminates a hello for it (a gateway's challenge, a
// suspended app, a classical client under pq_only).
func TestCertificateOnlyForTerminatedApps(t *testing.T) {
	g := &Gatehouse{}
	b := route.NewBuilder(&g.live)
	b.PutApp(&route.App{ID: "web", Mode: route.ModeHTTP, Status: route.StatusActive})
	b.PutApp(&route.App{ID: "pt", Mode: route.ModePassthrough, Status: route.StatusActive})
	b.PutDomain(&route.Domain{Domain: "shop.example", App: "web", Verified: true})
	b.PutDomain(&route.Domain{Domain: "pt.example", App: "pt", Verified: true})
	b.PutDomain(&route.Domain{Domain: "new.example", App: "web"})
	b.PutDomain(&route.Domain{Domain: "gone.example", App: "nope", Verified: true})
	for name, ok := range map[string]bool{
		"shop.example": true,
		"pt.example":   false,
		"new.example":  false,
		"gone.example": false,
		"nope.example": false,
	} {
		if err := g.allowCert(t.Context(), name); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", name, err, ok)
		}
	}
}
