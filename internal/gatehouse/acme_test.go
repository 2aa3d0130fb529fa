package gatehouse

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libdns/libdns"
	mdns "github.com/miekg/dns"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// DESIGN §9 end to end, with a real Pebble whose VA asks only the
// gateway's own DNS server, the embedded NATS store and the gateway's
// listeners on loopback: the gateway orders *.{zone} by DNS-01, writing
// the challenge into the store's records that its DNS server answers; an
// app's name and api.{zone} are then served from the wildcard, with no
// order of their own, and the challenge records are gone.
func TestWildcardCertificateByDNS01(t *testing.T) {
	t.Parallel() // mostly waiting on issuance and its own Pebble
	r, p, dnsAddr := startACME(t)
	// An app made right away: with one order per app, its own order
	// would be placed within manageNames' first ticks.
	if code, body := r.control(t, "PUT", "/api/v3/apps/someapp", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	handshake := func(name string) (*x509.Certificate, error) { return r.handshake(name, p.Roots) }
	var leaf *x509.Certificate
	var lastErr error
	testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
		leaf, lastErr = handshake("someapp.test.local")
		return lastErr == nil
	}, "someapp.test.local never served a certificate from Pebble's CA")
	// The handshake verified the chain against Pebble's issuance root.
	if !slices.Contains(leaf.DNSNames, "*.test.local") {
		t.Fatalf("someapp.test.local served %v, want the wildcard *.test.local", leaf.DNSNames)
	}
	if slices.Contains(leaf.DNSNames, "someapp.test.local") {
		t.Fatalf("someapp.test.local has a certificate of its own: %v", leaf.DNSNames)
	}
	// api.{zone} is served from the wildcard too: the handshake verified
	// the chain and the name against the certificate's SANs.
	api, err := handshake("api.test.local")
	if err != nil {
		t.Fatalf("api.test.local: %v", err)
	}
	if !slices.Equal(api.DNSNames, []string{"*.test.local"}) {
		t.Fatalf("api.test.local served %v, want the wildcard *.test.local", api.DNSNames)
	}
	// A client that sends no SNI (it dials the IP address) gets the same
	// wildcard, the gateway's default certificate, not the bootstrap one.
	def, err := r.handshake("", nil)
	if err != nil {
		t.Fatalf("no SNI: %v", err)
	}
	if !def.Equal(api) {
		t.Fatalf("no SNI: served %v issued by %q, want the wildcard", def.DNSNames, def.Issuer.CommonName)
	}
	// Past several of manageNames' 2 s rounds since the app was made, and
	// long after an order placed beside the wildcard's at Run.
	time.Sleep(5 * time.Second)
	if n := p.Orders(); n != 1 {
		t.Fatalf("pebble saw %d orders, want 1 (*.test.local alone)", n)
	}
	if log := p.Log(); strings.Contains(log, "someapp") || strings.Contains(log, "api.test.local") {
		t.Fatalf("pebble was asked about someapp or api.test.local:\n%s", log)
	}

	// The challenge records are gone, from the store and from the DNS
	// server's answers (certmagic cleans up just after validation).
	txt := func(name string) []mdns.RR {
		q := new(mdns.Msg)
		q.SetQuestion(name, mdns.TypeTXT)
		resp, _, err := (&mdns.Client{Timeout: 2 * time.Second}).Exchange(q, dnsAddr)
		if err != nil {
			t.Fatalf("%s TXT: %v", name, err)
		}
		if resp.Rcode != mdns.RcodeSuccess {
			t.Fatalf("%s TXT: %s", name, mdns.RcodeToString[resp.Rcode])
		}
		return resp.Answer
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		_, body := r.control(t, "GET", "/api/v3/dns/zones/test.local/records", "")
		return !strings.Contains(body, "_acme-challenge") &&
			len(txt("_acme-challenge.test.local.")) == 0 && len(txt("_acme-challenge.api.test.local.")) == 0
	}, "challenge records left behind")
}

// startACME runs a gateway for zone test.local whose certificates come
// from a real Pebble that validates DNS-01 against the gateway's own DNS
// server, and returns both and that server's address.
func startACME(t *testing.T) (*running, *tlsmgrtest.Pebble, string) {
	t.Helper()
	// The gateway's DNS port is picked before the gateway starts, since
	// Pebble is told it at launch (-dnsserver).
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	// No HTTP-01 or TLS-ALPN-01 should be tried: Pebble's VA gets ports
	// nothing listens on, so such a challenge could only fail.
	p := tlsmgrtest.StartWithDNS(t, testutil.FreePort(t), testutil.FreePort(t), dnsAddr)
	cfg := testConfig(t)
	cfg.DNS.Addr = dnsAddr
	cfg.TLS.ACME.Directory = p.Directory
	cfg.TLS.ACME.CARoot = p.CARoot
	cfg.TLS.ACME.Email = "ops@test.local"
	return start(t, cfg), p, dnsAddr
}

// handshake completes a TLS handshake with the https listener for SNI
// name and returns the leaf the gateway served; with roots, the chain and
// name are verified against them, else nothing is.
func (r *running) handshake(name string, roots *x509.CertPool) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.g.Addrs().HTTPS,
		&tls.Config{ServerName: name, RootCAs: roots, InsecureSkipVerify: roots == nil})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// A zone deleted through the control API takes its certificate with it:
// the gateway stops managing *.{zone} (no renewal, which DNS-01 could no
// longer answer for a zone the gateway does not serve) and no longer
// presents that certificate for names under it.
func TestDeletedZoneUnmanaged(t *testing.T) {
	t.Parallel() // mostly waiting on issuance and its own Pebble
	r, p, _ := startACME(t)
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/other.local", `{"gateways":["127.0.0.1"]}`); code != 200 {
		t.Fatalf("put zone: %d %s", code, body)
	}
	var lastErr error
	testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
		var leaf *x509.Certificate
		leaf, lastErr = r.handshake("shop.other.local", p.Roots)
		return lastErr == nil && slices.Contains(leaf.DNSNames, "*.other.local")
	}, "*.other.local never served from Pebble's CA")

	if code, body := r.control(t, "DELETE", "/api/v3/dns/zones/other.local", ""); code != 204 {
		t.Fatalf("delete zone: %d %s", code, body)
	}
	var sans []string
	ok := testutil.Eventually(10*time.Second, func() bool {
		leaf, err := r.handshake("shop.other.local", nil)
		if err != nil {
			t.Fatalf("shop.other.local: %v", err)
		}
		sans = leaf.DNSNames
		return !slices.Contains(sans, "*.other.local")
	})
	if !ok {
		t.Fatalf("10s after the zone was deleted, shop.other.local still gets %v", sans)
	}
	// The zone that stays keeps its certificate.
	testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
		leaf, err := r.handshake("shop.test.local", p.Roots)
		return err == nil && slices.Contains(leaf.DNSNames, "*.test.local")
	}, "*.test.local not served after other.local went")
}

// A DNS listener bound to every address is reached on loopback.
func TestSelfAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:53":       "127.0.0.1:53",
		"[::]:5353":        "[::1]:5353",
		"127.0.0.1:5353":   "127.0.0.1:5353",
		"10.1.2.3:53":      "10.1.2.3:53",
		"[2001:db8::1]:53": "[2001:db8::1]:53",
	} {
		a, err := net.ResolveUDPAddr("udp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := selfAddr(a); got != want {
			t.Errorf("selfAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

// The DNS-01 provider as the gateway wires it, on a real store on
// embedded NATS: a challenge value whose removal never came (its gateway
// crashed) leaves the zone's records at the sweep once it is older than
// dns.StaleChallengeAge, through the same record sets the control API
// and every DNS server read, and its note in the certificate storage
// goes with it. A younger value stays.
func TestStaleChallengeSwept(t *testing.T) {
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutZone(ctx, &route.Zone{Name: "test.local", Gateways: []string{"127.0.0.1"}, TTL: 60}); err != nil {
		t.Fatal(err)
	}
	p, err := dns.NewACMEZones(func() []string { return []string{"test.local"} }, dnsRecords{st}, st.Certs())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendRecords(ctx, "test.local.", []libdns.Record{libdns.TXT{Name: "_acme-challenge", Text: "left-behind"}}); err != nil {
		t.Fatal(err)
	}
	values := func() []string {
		recs, err := st.ListRecords(ctx, "test.local")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Values...)
		}
		return out
	}
	if err := p.Sweep(ctx, time.Now().Add(-dns.StaleChallengeAge)); err != nil {
		t.Fatal(err)
	}
	if v := values(); !slices.Equal(v, []string{"left-behind"}) {
		t.Fatalf("a young value was swept: %v", v)
	}
	if keys, err := st.Certs().List(ctx, "", true); err != nil || len(keys) == 0 {
		t.Fatalf("no note of the value in the certificate storage: %v, %v", keys, err)
	}
	// An hour on, as the gateway's sweep sees it.
	if err := p.Sweep(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if v := values(); len(v) != 0 {
		t.Fatalf("the stale value is still stored: %v", v)
	}
	if keys, err := st.Certs().List(ctx, "", true); err != nil || len(keys) != 0 {
		t.Fatalf("certificate storage after the sweep: %v, %v", keys, err)
	}
}

// TestRandomSNIOrdersNothing: with custom domains on demand, an internet
// client choosing the SNI cannot make the gateway place an ACME order:
// names that are no verified mapping of an app the gateway terminates
// (unknown names, names under the zone, an unverified mapping, case
// variants, wildcards, the apex) get the bootstrap or zone certificate,
// and Pebble sees the wildcard's order alone.
func TestRandomSNIOrdersNothing(t *testing.T) {
	t.Parallel() // mostly waiting on issuance and its own Pebble
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := tlsmgrtest.StartWithDNS(t, testutil.FreePort(t), testutil.FreePort(t), dnsAddr)
	cfg := testConfig(t)
	cfg.DNS.Addr = dnsAddr
	cfg.TLS.ACME.Directory = p.Directory
	cfg.TLS.ACME.CARoot = p.CARoot
	cfg.TLS.CustomDomains = "auto"
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/shop", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	if code, body := r.control(t, "PUT", "/api/v3/domains/www.unverified.test", `{"app":"shop"}`); code != 200 {
		t.Fatalf("map domain: %d %s", code, body)
	}
	testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
		_, err := r.handshake("shop.test.local", p.Roots)
		return err == nil
	}, "*.test.local never served from Pebble's CA")
	orders := p.Orders()
	for _, sni := range []string{
		"nosuch.customer.test", "NOSUCH.Customer.Test",
		"www.unverified.test", "WWW.Unverified.TEST",
		"ghost.test.local", "a.b.test.local", "A.B.TEST.LOCAL",
		"test.local", "TEST.LOCAL", "*.test.local", "*.customer.test",
		"localhost", "single", "xn--bcher-kva.example",
	} {
		// Each handshake is bounded: the client gives up after 10 s.
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second, Deadline: time.Now().Add(10 * time.Second)}, "tcp",
			r.g.Addrs().HTTPS, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err == nil {
			c.Close()
		}
	}
	if n := p.Orders(); n != orders {
		t.Fatalf("random SNI made pebble see %d more orders:\n%s", n-orders, p.Log())
	}
	if log := strings.ToLower(p.Log()); strings.Contains(log, "customer.test") || strings.Contains(log, "unverified.test") ||
		strings.Contains(log, "a.b.test.local") || strings.Contains(log, "bcher") {
		t.Fatalf("pebble was asked about a client's SNI:\n%s", p.Log())
	}
}
