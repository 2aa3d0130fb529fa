package gatehouse

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// TestMetricsCardinalityBoundedOffHTTP: what a client chooses outside an
// HTTP request's Host, path and method (TestMetricsCardinalityBounded)
// makes no series either: a TLS ClientHello's server name, a DNS query's
// name and type, over UDP and TCP, and the control API's paths, methods
// and bearer tokens. Each round sends its own values of each; the
// gatehouse_* series after the first round are all there are after five.
func TestMetricsCardinalityBoundedOffHTTP(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	cfg := testConfig(t)
	cfg.Limits.UnknownRequests = 100000 // the unknown-host budget's 429s are a series of their own
	cfg.DNS.RateLimit = 0               // as are the limiter's, which the rounds' pace decides
	r := start(t, cfg)
	addrs := r.g.Addrs()
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	plain := &http.Client{Timeout: 5 * time.Second}
	round := func(n int) {
		for i := range 10 {
			id := fmt.Sprintf("r%dx%d", n, i)
			// A ClientHello naming a name of its own, then a request.
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addrs.HTTPS,
				&tls.Config{ServerName: id + ".sni.example", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatalf("handshake %s: %v", id, err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "M%s /%s HTTP/1.1\r\nHost: %s.test.local\r\nConnection: close\r\n\r\n", strings.ToUpper(id), id, id)
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("tls request %s: %v", id, err)
			}
			c.Close()
			req, _ := http.NewRequest("GET", "https://"+addrs.HTTPS+"/"+id, nil)
			req.Host = id + ".test.local"
			if res, err := tlsClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			} else {
				t.Fatalf("https %s: %v", id, err)
			}
			// DNS: a name and type of its own, in the zone and off it.
			for _, q := range []struct {
				name  string
				qtype uint16
				net   string
			}{
				{id + ".test.local.", uint16(1000 + n*10 + i), "udp"},
				{id + ".elsewhere.example.", mdns.TypeTXT, "udp"},
				{id + ".test.local.", uint16(2000 + n*10 + i), "tcp"},
			} {
				m := new(mdns.Msg)
				m.SetQuestion(q.name, q.qtype)
				if _, _, err := (&mdns.Client{Net: q.net, Timeout: 5 * time.Second}).Exchange(m, addrs.DNS); err != nil {
					t.Fatalf("dns %s %s: %v", q.net, q.name, err)
				}
			}
			// The control API: paths, methods and tokens of its own.
			for _, p := range []string{"/api/v3/apps/" + id, "/api/v3/" + id, "/" + id, "/api/v3/dns/resolve?name=" + id + ".test.local&type=A"} {
				req, _ := http.NewRequest("X"+strings.ToUpper(id), "http://"+addrs.Management+p, nil)
				req.Header.Set("Authorization", "Bearer "+id+"-0123456789abcdef")
				res, err := plain.Do(req)
				if err != nil {
					t.Fatalf("control %s: %v", p, err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
	}
	names := func() []string {
		var ks []string
		for k := range seriesValues(scrape(t, addrs.Management)) {
			if !background(k) {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		return ks
	}
	round(0)
	first := names()
	if !slices.ContainsFunc(first, func(k string) bool { return strings.HasPrefix(k, "gatehouse_http_requests_total{") }) {
		t.Fatalf("the rounds' requests were not counted: %v", first)
	}
	for n := 1; n < 5; n++ {
		round(n)
	}
	if last := names(); !slices.Equal(first, last) {
		var grown []string
		for _, k := range last {
			if !slices.Contains(first, k) {
				grown = append(grown, k)
			}
		}
		t.Fatalf("series grew from %d to %d with the clients' choices; new: %v", len(first), len(last), grown)
	}
}
