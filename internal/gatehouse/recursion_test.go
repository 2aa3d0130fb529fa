package gatehouse

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestRecursionEndToEnd is DESIGN §8's recursion through the assembly,
// configured the way an operator does: the gateway's DNS listener
// forwards off-zone names to a real upstream on loopback for the allowed
// source (127.0.0.2) only, over UDP and TCP, and the HTTP resolve API for
// the control token only.
func TestRecursionEndToEnd(t *testing.T) {
	priv, keys := issuerKey(t)
	up := testutil.StartResolver(t, map[string]string{"wikipedia.org.": "198.51.100.9"})
	cfg := testConfig(t)
	cfg.Auth.Issuers = []config.Issuer{{Issuer: "idp", KeysFile: keys}}
	cfg.DNS.Recursion = config.Recursion{Upstreams: []string{up.Addr}, Allow: []string{"127.0.0.2/32"}}
	r := start(t, cfg)
	dnsAddr := r.g.Addrs().DNS

	ask := func(network, from, name string) *mdns.Msg {
		t.Helper()
		d := &net.Dialer{Timeout: 10 * time.Second}
		if network == "udp" {
			d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(from)}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		m := new(mdns.Msg)
		m.SetQuestion(name, mdns.TypeA)
		resp, _, err := (&mdns.Client{Net: network, Dialer: d}).Exchange(m, dnsAddr)
		if err != nil {
			t.Fatalf("%s from %s: %v", network, from, err)
		}
		return resp
	}
	for _, network := range []string{"udp", "tcp"} {
		before := up.Queries()
		if m := ask(network, "127.0.0.1", "wikipedia.org."); m.Rcode != mdns.RcodeRefused || m.RecursionAvailable {
			t.Errorf("%s from a source not allowed: %s RA %v, want REFUSED", network, mdns.RcodeToString[m.Rcode], m.RecursionAvailable)
		}
		m := ask(network, "127.0.0.2", "wikipedia.org.")
		if m.Rcode != mdns.RcodeSuccess || !m.RecursionAvailable || len(m.Answer) != 1 || !strings.HasSuffix(m.Answer[0].String(), "198.51.100.9") {
			t.Errorf("%s from the allowed source: %v", network, m)
		}
		if m := ask(network, "127.0.0.2", "hello.test.local."); m.Rcode != mdns.RcodeSuccess || !m.Authoritative || len(m.Answer) != 1 {
			t.Errorf("%s in-zone from the allowed source: %v", network, m)
		}
		if got := up.Queries() - before; got != 1 {
			t.Errorf("%s: the upstream got %d queries, want 1 (the allowed off-zone one)", network, got)
		}
	}

	session, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": "idp", "sub": "alice", "aud": []string{"shop"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(tok string) (status int, ra bool, data string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().HTTP+"/api/v3/dns/resolve?name=wikipedia.org", nil)
		req.Host = "api.test.local"
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var d struct {
			Status int
			RA     bool
			Answer []struct {
				Data string `json:"data"`
			}
		}
		if res.StatusCode != 200 || json.Unmarshal(b, &d) != nil {
			t.Fatalf("resolve: %d %s", res.StatusCode, b)
		}
		if len(d.Answer) > 0 {
			data = d.Answer[0].Data
		}
		return d.Status, d.RA, data
	}
	if st, ra, _ := resolve(session); st != 5 || ra {
		t.Errorf("a session off-zone: Status %d RA %v, want 5 and false", st, ra)
	}
	if st, ra, data := resolve(cfg.Control.Token); st != 0 || !ra || data != "198.51.100.9" {
		t.Errorf("the control token off-zone: Status %d RA %v %q, want the upstream's answer", st, ra, data)
	}
}
