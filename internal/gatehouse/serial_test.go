package gatehouse

import (
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// soaSerials asks r's DNS listener for the zone's SOA over UDP and then
// over TCP and returns the two serials.
func soaSerials(t *testing.T, r *running, zone string) (udp, tcp uint32) {
	t.Helper()
	var got []uint32
	for _, network := range []string{"udp", "tcp"} {
		m := new(mdns.Msg)
		m.SetQuestion(zone+".", mdns.TypeSOA)
		resp, _, err := (&mdns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(m, r.g.Addrs().DNS)
		if err != nil {
			t.Fatalf("%s SOA %s: %v", network, zone, err)
		}
		if len(resp.Answer) != 1 {
			t.Fatalf("%s SOA %s: %v", network, zone, resp)
		}
		soa, ok := resp.Answer[0].(*mdns.SOA)
		if !ok {
			t.Fatalf("%s SOA %s: answer %v", network, zone, resp.Answer[0])
		}
		got = append(got, soa.Serial)
	}
	return got[0], got[1]
}

// soaSerial is the zone's serial on r, failing t unless UDP and TCP give
// the same one. Only for a gateway whose zone has settled: one still
// applying a change may answer the two questions from either side of it.
func soaSerial(t *testing.T, r *running, zone string) uint32 {
	t.Helper()
	udp, tcp := soaSerials(t, r, zone)
	if udp != tcp {
		t.Fatalf("SOA %s: serial %d over UDP, %d over TCP", zone, udp, tcp)
	}
	return udp
}

// answers is the data of r's answers to name's A question, joined by ",".
func answers(t *testing.T, r *running, name string) string {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name+".", mdns.TypeA)
	resp, _, err := (&mdns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(m, r.g.Addrs().DNS)
	if err != nil {
		t.Fatalf("A %s: %v", name, err)
	}
	var out []string
	for _, rr := range resp.Answer {
		out = append(out, strings.TrimPrefix(rr.String(), rr.Header().String()))
	}
	return strings.Join(out, ",")
}

// serialAfter reports whether serial b follows a in RFC 1982 arithmetic:
// how a secondary decides that the zone changed.
func serialAfter(b, a uint32) bool { return int32(b-a) > 0 }

// TestSOASerialFollowsZone: the zone's SOA serial moves forward (RFC 1982)
// with every change to the zone or its records, a deleted record too, and
// stays put while they do not, over UDP and TCP. Every gateway on the
// store gives the same serial for the same content, a gateway started
// later too, so that a check comparing the serials of a zone's servers,
// or a secondary, sees one zone.
func TestSOASerialFollowsZone(t *testing.T) {
	bus := testutil.StartBus(t)
	gateway := func() *running {
		cfg := testConfig(t)
		cfg.Bus.URL = []string{bus.ClientURL()}
		return start(t, cfg)
	}
	a, b := gateway(), gateway()
	const zone = "test.local"
	agree := func(what string, want uint32, rs ...*running) {
		t.Helper()
		for i, r := range rs {
			// r may be applying the change while it is asked: wait
			// until both transports give want.
			var udp, tcp uint32
			if !testutil.Eventually(5*time.Second, func() bool {
				udp, tcp = soaSerials(t, r, zone)
				return udp == want && tcp == want
			}) {
				t.Fatalf("%s: gateway %d serves serial %d over UDP, %d over TCP, not %d", what, i, udp, tcp, want)
			}
		}
	}
	prev := soaSerial(t, a, zone)
	agree("at start", prev, a, b)

	steps := []struct {
		name         string
		method, path string
		body         string
		// served holds once a has applied the change: the A answers of
		// www.test.local, or the app that now exists.
		www, app string
		bump     bool
	}{
		{name: "add a record", method: "PUT", path: "/api/v3/dns/zones/test.local/records/www/A",
			body: `{"values":["192.0.2.1"]}`, www: "192.0.2.1", bump: true},
		{name: "change it", method: "PUT", path: "/api/v3/dns/zones/test.local/records/www/A",
			body: `{"values":["192.0.2.2"]}`, www: "192.0.2.2", bump: true},
		{name: "an app, not the zone", method: "PUT", path: "/api/v3/apps/shop",
			body: `{}`, www: "192.0.2.2", app: "shop"},
		{name: "delete it", method: "DELETE", path: "/api/v3/dns/zones/test.local/records/www/A",
			www: "127.0.0.1", bump: true}, // the wildcard's gateway again
		{name: "change the zone", method: "PUT", path: "/api/v3/dns/zones/test.local",
			body: `{"gateways":["127.0.0.3"],"ttl":30}`, www: "127.0.0.3", bump: true},
	}
	for _, st := range steps {
		if code, body := a.control(t, st.method, st.path, st.body); code/100 != 2 {
			t.Fatalf("%s: %s %s: %d %s", st.name, st.method, st.path, code, body)
		}
		testutil.WaitFor(t, 5*time.Second, func() bool {
			return answers(t, a, "www."+zone) == st.www && (st.app == "" || a.g.Live().Load().App(st.app) != nil)
		}, st.name+": not applied")
		got := soaSerial(t, a, zone)
		switch {
		case st.bump && !serialAfter(got, prev):
			t.Errorf("%s: serial %d, want one after %d", st.name, got, prev)
		case !st.bump && got != prev:
			t.Errorf("%s: serial %d, want %d unchanged", st.name, got, prev)
		}
		if again := soaSerial(t, a, zone); again != got {
			t.Errorf("%s: serial %d, then %d with nothing changed", st.name, got, again)
		}
		agree(st.name, got, b)
		prev = got
	}
	if prev <= 1 {
		t.Errorf("serial %d after five changes", prev)
	}
	// A gateway that starts now, as one restarting does, takes up the
	// serial where the others stand, not from the start.
	agree("a gateway started later", prev, gateway())
}
