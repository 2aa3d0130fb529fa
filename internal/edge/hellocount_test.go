package edge

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// helloCounts reads gatehouse_tls_hellos_total from reg, by outcome.
func helloCounts(t *testing.T, reg prometheus.Gatherer) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "gatehouse_tls_hellos_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// rawHello connects to addr, writes b, then (half) closes its side when
// closeWrite, and reads until the gateway closes.
func rawHello(t *testing.T, addr string, b []byte, closeWrite bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.Copy(io.Discard, c)
}

// TestHelloOutcomesCounted: every https connection's ClientHello is
// counted once in gatehouse_tls_hellos_total, by how it ended, on the
// registry the gateway's /metrics serves: a hello that is handed on
// (terminated or piped), one that does not come in time, one that is no
// hello, a plain HTTP request, a client that leaves mid-hello, a hello
// below the TLS floor, and a passthrough name with no host to reach.
func TestHelloOutcomesCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	live := RoutePassthrough(table(host.ln.Addr().String()), nil)
	dead := RoutePassthrough(table(testutil.RefusedAddr(t)), nil)
	e := start(t, Options{
		ReadHeaderTimeout: time.Second,
		Passthrough: func(name string) (Dial, bool) {
			if strings.HasPrefix(name, "gone.") {
				return dead("secure." + zone) // a passthrough app whose host is down
			}
			return live(name)
		},
		Hello: func(outcome string) { set.TLSHellos.WithLabelValues(outcome).Inc() },
	})

	handshake := func(cfg *tls.Config) error {
		c, err := dialTLS(t, e.https, cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	want := map[string]int{}
	for _, step := range []struct {
		outcome string
		do      func(t *testing.T)
	}{
		{HelloOK, func(t *testing.T) {
			if err := handshake(&tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true}); err != nil {
				t.Fatal(err)
			}
		}},
		{HelloOK, func(t *testing.T) {
			if err := handshake(&tls.Config{InsecureSkipVerify: true}); err != nil { // no SNI
				t.Fatal(err)
			}
		}},
		{HelloOK, func(t *testing.T) {
			if err := handshake(&tls.Config{ServerName: "secure." + zone, RootCAs: pool}); err != nil {
				t.Fatal(err)
			}
		}},
		{HelloTimeout, func(t *testing.T) { rawHello(t, e.https, []byte{22, 3, 1}, false) }},
		{HelloMalformed, func(t *testing.T) { rawHello(t, e.https, []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, false) }}, // a ServerHello
		{HelloPlainHTTP, func(t *testing.T) {
			rawHello(t, e.https, []byte("GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n"), false)
		}},
		{HelloClosed, func(t *testing.T) { rawHello(t, e.https, []byte{22, 3, 1, 0, 200, 1}, true) }},
		{HelloRefusedPosture, func(t *testing.T) {
			cfg := &tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
			if err := handshake(cfg); err == nil {
				t.Fatal("a TLS 1.1 handshake succeeded")
			}
		}},
		{HelloNoRoute, func(t *testing.T) {
			if err := handshake(&tls.Config{ServerName: "gone." + zone, InsecureSkipVerify: true}); err == nil {
				t.Fatal("handshake succeeded with no host")
			}
		}},
	} {
		step.do(t)
		want[step.outcome]++
		testutil.WaitFor(t, 5*time.Second, func() bool { return helloCounts(t, reg)[step.outcome] == want[step.outcome] },
			"gatehouse_tls_hellos_total{outcome="+step.outcome+"} not counted")
	}
	if got := helloCounts(t, reg); len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	} else {
		for o, n := range want {
			if got[o] != n {
				t.Fatalf("counts %v, want %v", got, want)
			}
		}
	}
}
