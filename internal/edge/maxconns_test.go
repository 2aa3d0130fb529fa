package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

type countingCounter struct{ n atomic.Int64 }

func (c *countingCounter) Inc() { c.n.Add(1) }

// TestMaxConnections: with MaxConnections open on the http and https
// listeners together, one more connection on either is closed unread and
// counted; the open ones are served on; once one closes, a new one is
// served again; the management listener is not capped.
func TestMaxConnections(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "lane", false: "net/http"}[fast], func(t *testing.T) {
			refused := &countingCounter{}
			e := start(t, Options{HTTPMode: ModeServe, MaxConnections: 2, ConnsRefused: refused, DisableLane: !fast})

			get := func(c net.Conn, br *bufio.Reader) error {
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n"); err != nil {
					return err
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return err
			}
			// Two keep-alive connections, one per listener, each served once.
			plain, err := net.Dial("tcp", e.http)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			plainBR := bufio.NewReader(plain)
			if err := get(plain, plainBR); err != nil {
				t.Fatalf("first connection: %v", err)
			}
			secure, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatalf("second connection: %v", err)
			}
			defer secure.Close()
			secureBR := bufio.NewReader(secure)
			if err := get(secure, secureBR); err != nil {
				t.Fatalf("second connection: %v", err)
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 2 }, "two connections not counted")

			// A third, on either listener, is closed without an answer.
			for _, addr := range []string{e.http, e.https} {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n")
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, err := io.ReadAll(c)
				c.Close()
				if len(b) > 0 || isTimeout(err) {
					t.Fatalf("a connection over the cap on %s: read %q, %v; want closed unanswered", addr, b, err)
				}
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return refused.n.Load() == 2 }, "refused connections not counted")
			if n := e.ActiveConnections(); n != 2 {
				t.Fatalf("%d connections counted after the refusals, want 2", n)
			}
			// The open ones go on; the management listener is apart.
			if err := get(plain, plainBR); err != nil {
				t.Fatalf("open connection after the refusals: %v", err)
			}
			if err := get(secure, secureBR); err != nil {
				t.Fatalf("open tls connection after the refusals: %v", err)
			}
			resp, err := http.Get("http://" + e.mgmt + "/healthz")
			if err != nil {
				t.Fatalf("management at the cap: %v", err)
			}
			resp.Body.Close()

			// One closes: a new connection is served.
			plain.Close()
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 1 }, "closed connection still counted")
			again, err := net.Dial("tcp", e.http)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if err := get(again, bufio.NewReader(again)); err != nil {
				t.Fatalf("a new connection under the cap: %v", err)
			}
			if n := refused.n.Load(); n != 2 {
				t.Fatalf("%d refusals counted, want 2", n)
			}
		})
	}
}
