package gatehouse

import (
	"errors"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
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

// A suspended app's custom domain keeps the certificate it has but gets
// no order (tlsmgr.ErrNoNewOrder); a retired app's gets nothing.
func TestCertificateNotOrderedForClosedApps(t *testing.T) {
	g := &Gatehouse{}
	b := route.NewBuilder(&g.live)
	for id, st := range map[string]route.Status{"on": route.StatusActive, "legacy": "", "paused": route.StatusSuspended, "gone": route.StatusRetired} {
		b.PutApp(&route.App{ID: id, Mode: route.ModeHTTP, Status: st})
		b.PutDomain(&route.Domain{Domain: id + ".example", App: id, Verified: true})
	}
	for name, want := range map[string]string{
		"on.example":     "order",
		"legacy.example": "order",
		"paused.example": "keep",
		"gone.example":   "refuse",
	} {
		err := g.allowCert(t.Context(), name)
		got := "refuse"
		switch {
		case err == nil:
			got = "order"
		case errors.Is(err, tlsmgr.ErrNoNewOrder):
			got = "keep"
		}
		if got != want {
			t.Errorf("%s: %s (%v), want %s", name, got, err, want)
		}
	}
}
