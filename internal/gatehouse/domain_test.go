package gatehouse

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A custom domain routes only once proven: the platform maps it, the
// customer publishes the token as TXT in their own DNS (here the
// project's DNS server on another port), the platform asks for
// verification, and from then on the domain reaches the app. The
// gateway's own DNS cannot host that record: a zone over a mapped domain
// is refused (TestZoneOverMappedDomain in internal/api), checked here too.
func TestCustomDomainProvenByTXT(t *testing.T) {
	var proof atomic.Pointer[string]
	customer := startCustomerDNS(t, func() []dns.Zone {
		z := dns.Zone{Name: "shop.example", Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, TTL: 1}
		if tok := proof.Load(); tok != nil {
			z.Records = []dns.Record{{Name: "_gatehouse-challenge.www.shop.example", Type: "TXT", Values: []string{*tok}}}
		}
		return []dns.Zone{z}
	})
	r := startWith(t, testConfig(t), func(g *Gatehouse) {
		g.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, customer)
		}}
	})
	if code, body := r.control(t, "PUT", "/api/v3/apps/shop", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	startHost(t, r, "shop-1", "shop", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "shop") }))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("shop")) == 1 }, "host not routable")

	code, body := r.control(t, "PUT", "/api/v3/domains/www.shop.example", `{"app":"shop"}`)
	var d struct {
		Token    string
		Verified bool
	}
	if code != 200 || json.Unmarshal([]byte(body), &d) != nil || d.Token == "" || d.Verified {
		t.Fatalf("map domain: %d %s", code, body)
	}
	if resp, _ := r.get(t, "www.shop.example", "/", nil); resp.StatusCode != 404 {
		t.Fatalf("unverified domain answered %d, want 404", resp.StatusCode)
	}
	// Not proven yet: no TXT record anywhere.
	if code, body := r.control(t, "POST", "/api/v3/domains/www.shop.example/verify", `{"method":"txt"}`); code < 400 {
		t.Fatalf("verify without a record: %d %s", code, body)
	}
	// The gateway will not serve the customer's zone over the mapping.
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/shop.example", `{"gateways":["127.0.0.1"],"ttl":5}`); code != 409 {
		t.Fatalf("put a zone over the mapped domain: %d %s, want 409", code, body)
	}
	proof.Store(&d.Token)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		code, _ := r.control(t, "POST", "/api/v3/domains/www.shop.example/verify", `{"method":"txt"}`)
		return code == 200
	}, "txt proof never passed")
	testutil.WaitFor(t, 5*time.Second, func() bool {
		resp, body := r.get(t, "www.shop.example", "/", nil)
		return resp.StatusCode == 200 && body == "shop"
	}, "verified domain does not route")
}

// startCustomerDNS serves zones with the project's own authoritative DNS
// server on a loopback port, as a customer's DNS would, and returns its
// address.
func startCustomerDNS(t *testing.T, zones func() []dns.Zone) string {
	t.Helper()
	s, err := dns.New(dns.Options{Addr: "127.0.0.1:0", Zones: zones})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "customer dns", func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	return pc.LocalAddr().String()
}
