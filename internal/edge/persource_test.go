package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestMaxConnectionsPerSource: with MaxConnectionsPerSource open from one
// address on the http and https listeners together (a passthrough pipe
// included), one more from it on either is closed unread and counted,
// while another address and an exempt one are served; every way a
// counted connection ends (a pipe, a TLS connection, a hello that was
// plain HTTP) gives its source's slot back.
func TestMaxConnectionsPerSource(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "lane", false: "net/http"}[fast], func(t *testing.T) {
			cert, pool := testutil.SelfSigned(t, "secure."+zone)
			host := startTLSHost(t, cert, echo)
			refused := &countingCounter{}
			e := start(t, Options{
				HTTPMode: ModeServe, DisableLane: !fast, ConnsRefused: refused,
				MaxConnectionsPerSource: 2,
				SourceExempt:            []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")},
				Passthrough:             RoutePassthrough(table(host.ln.Addr().String()), nil),
			})
			from := func(ip string) *net.Dialer {
				return &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
			}
			get := func(c net.Conn) error {
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n"); err != nil {
					return err
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				return err
			}
			plain := func(ip string) net.Conn {
				t.Helper()
				c, err := from(ip).Dial("tcp", e.http)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			terminated := func(ip string) *tls.Conn {
				t.Helper()
				c, err := tls.DialWithDialer(from(ip), "tcp", e.https, &tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
				if err != nil {
					t.Fatalf("tls from %s: %v", ip, err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			refusedOn := func(ip, addr string) {
				t.Helper()
				c, err := from(ip).Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n")
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if b, err := io.ReadAll(c); len(b) > 0 || isTimeout(err) {
					t.Fatalf("a connection from %s over its cap on %s: read %q, %v; want closed unanswered", ip, addr, b, err)
				}
			}

			// From 127.0.0.1: a kept-alive plain connection and a pipe.
			a := plain("127.0.0.1")
			if err := get(a); err != nil {
				t.Fatal(err)
			}
			pipe, err := tls.DialWithDialer(from("127.0.0.1"), "tcp", e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
			if err != nil {
				t.Fatalf("pipe: %v", err)
			}
			if _, err := io.WriteString(pipe, "ping"); err != nil {
				t.Fatal(err)
			}
			if b := make([]byte, 4); func() error { _, err := io.ReadFull(pipe, b); return err }() != nil || string(b) != "ping" {
				t.Fatalf("pipe echo: %q", b)
			}

			// A third from it, on either listener, is refused; another
			// address and the exempt one are not.
			refusedOn("127.0.0.1", e.http)
			refusedOn("127.0.0.1", e.https)
			testutil.WaitFor(t, 5*time.Second, func() bool { return refused.n.Load() == 2 }, "refused connections not counted")
			if err := get(plain("127.0.0.2")); err != nil {
				t.Fatalf("another source: %v", err)
			}
			for range 3 {
				if err := get(terminated("127.0.0.3")); err != nil {
					t.Fatalf("exempt source: %v", err)
				}
			}
			if err := get(a); err != nil {
				t.Fatalf("the open connection after the refusals: %v", err)
			}

			// The pipe ends: its slot is back, for a terminated connection.
			pipe.Close()
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 5 }, "the ended pipe still counted")
			b := terminated("127.0.0.1")
			if err := get(b); err != nil {
				t.Fatalf("a connection after the pipe ended: %v", err)
			}
			refusedOn("127.0.0.1", e.https)
			// That one ends too, and plain HTTP on the https port (answered
			// 400 by the hello's peek) must give its slot back as well.
			b.Close()
			for range 3 {
				testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 5 }, "ended connections still counted")
				c, err := from("127.0.0.1").Dial("tcp", e.https)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n")
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("plain HTTP on https: %v", err)
				}
				resp.Body.Close()
				c.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("plain HTTP on https: %d, want 400", resp.StatusCode)
				}
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 5 }, "ended connections still counted")
			if err := get(terminated("127.0.0.1")); err != nil {
				t.Fatalf("a connection once the others ended: %v", err)
			}
			if n := refused.n.Load(); n != 3 {
				t.Fatalf("%d refusals counted, want 3", n)
			}
		})
	}
}

// TestSourceOf: the per-source cap counts an IPv4 address (mapped or
// not) on its own and an IPv6 address by its /48; exempt sources and a
// tracker without the cap count nothing.
func TestSourceOf(t *testing.T) {
	tr := &tracker{perSource: 1, exempt: func(ip netip.Addr) bool { return ip == netip.MustParseAddr("10.0.0.9") }}
	src := func(s string) source {
		ap := netip.MustParseAddrPort(s)
		return tr.sourceOf(net.TCPAddrFromAddrPort(ap))
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"192.0.2.1:1", "192.0.2.1:2", true},
		{"192.0.2.1:1", "[::ffff:192.0.2.1]:2", true},
		{"192.0.2.1:1", "192.0.2.2:1", false},
		{"[2001:db8:1:2::3]:1", "[2001:db8:1:ffff::9]:1", true},
		{"[2001:db8:1::3]:1", "[2001:db8:2::3]:1", false},
	} {
		if got := src(c.a) == src(c.b); got != c.same {
			t.Errorf("%s and %s one source: %v, want %v", c.a, c.b, got, c.same)
		}
	}
	if s := src("10.0.0.9:1"); s != (source{}) {
		t.Errorf("exempt address counted as %s", s)
	}
	if s := src("[2001:db8:1:2::3]:1").String(); s != "2001:db8:1::/48" {
		t.Errorf("source formats as %q", s)
	}
	if s := src("192.0.2.1:1").String(); s != "192.0.2.1" {
		t.Errorf("source formats as %q", s)
	}
	tr.perSource = 0
	if s := src("192.0.2.1:1"); s != (source{}) {
		t.Errorf("counted without a cap: %s", s)
	}
}
