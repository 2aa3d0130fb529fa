package tlsmgr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// TestACMEOnDemandNoNewOrder: a custom domain the decision answers with
// ErrNoNewOrder (a suspended app's, in gatehouse) keeps the certificate
// it has, on the gateway that cached it and on one that finds it in the
// shared storage, and gets no order: a name without one gets the
// bootstrap certificate and the CA sees nothing. A refused name (a
// retired app's) gets the bootstrap certificate even though one is
// stored; allowed again, the stored one is served, still without an
// order.
func TestACMEOnDemandNoNewOrder(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	var status atomic.Value
	status.Store("active")
	allow := func(_ context.Context, name string) error {
		switch s := status.Load().(string); {
		case name != own(t, "shop.customer.test") && name != own(t, "new.customer.test"):
			return errors.New("not a verified mapping")
		case s == "suspended":
			return fmt.Errorf("%w: app suspended", ErrNoNewOrder)
		case s == "retired":
			return errors.New("app retired")
		}
		return nil
	}
	dir := t.TempDir()
	opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = allow
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(opts) // a second gateway on the same storage
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, a, b)
	r.issued(t, p, a, own(t, "api.example.test"))
	r.issued(t, p, b, own(t, "api.example.test"))
	shop := r.issued(t, p, a, own(t, "shop.customer.test")) // cached by a only
	orders := p.Orders()
	addrA, addrB := serveTLS(t, a.TLSConfig()), serveTLS(t, b.TLSConfig())

	for _, step := range []struct {
		name, status string
		m            *Manager
		addr, sni    string
		want         *x509.Certificate // nil: the bootstrap certificate
	}{
		{"suspended, cached", "suspended", a, addrA, own(t, "shop.customer.test"), shop},
		{"suspended, cached, again", "suspended", a, addrA, own(t, "shop.customer.test"), shop},
		{"suspended, stored", "suspended", b, addrB, own(t, "shop.customer.test"), shop},
		{"suspended, none", "suspended", a, addrA, own(t, "new.customer.test"), nil},
		{"suspended, none, again", "suspended", b, addrB, own(t, "new.customer.test"), nil},
		{"retired, cached", "retired", a, addrA, own(t, "shop.customer.test"), nil},
		{"retired, none", "retired", b, addrB, own(t, "new.customer.test"), nil},
		{"active again", "active", a, addrA, own(t, "shop.customer.test"), shop},
	} {
		status.Store(step.status)
		leaf, _, err := handshake(step.addr, &tls.Config{ServerName: step.sni, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want := step.want
		if want == nil {
			want = step.m.boot.Load().Leaf
		}
		if !leaf.Equal(want) {
			t.Errorf("%s: %s served %v issued by %q, want %v issued by %q",
				step.name, step.sni, leaf.DNSNames, leaf.Issuer.CommonName, want.DNSNames, want.Issuer.CommonName)
		}
		if run := step.m.orders.running(step.sni); run != nil {
			t.Errorf("%s: an order runs for %s", step.name, step.sni)
		}
		if n := p.Orders(); n != orders {
			t.Fatalf("%s: pebble saw %d orders, want %d", step.name, n, orders)
		}
	}
}

// TestACMEOnDemandNoNewOrderNoRenewal: a stored certificate due for
// renewal of a name kept without orders is served, loaded from storage
// and then from the cache, and not renewed: no order starts for it.
func TestACMEOnDemandNoNewOrderNoRenewal(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	name := own(t, "held.customer.test")
	seeded := seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
	opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return fmt.Errorf("%w: app suspended", ErrNoNewOrder)
		}
		return errors.New("not a verified mapping")
	}
	m, _ := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test"))
	orders := p.Orders()
	addr := serveTLS(t, m.TLSConfig())
	for i := range 3 {
		leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		if !leaf.Equal(seeded) {
			t.Fatalf("handshake %d served %v (the bootstrap: %v), want the stored certificate", i+1, leaf.DNSNames, leaf.Equal(m.boot.Load().Leaf))
		}
		if m.orders.running(name) != nil {
			t.Fatalf("handshake %d started a renewal", i+1)
		}
	}
	if n := p.Orders(); n != orders {
		t.Fatalf("pebble saw %d orders, want %d", n, orders)
	}
}
