package edge

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestStalledBodyIsBounded: a client that sends a request's head and part
// of its body, then nothing, does not hold the handler (and, behind it, a
// host's connection and handler) for ever: a body read that waits
// IdleTimeout for the next byte fails with a timeout, on every server a
// body can reach — the fast path's HTTP/1.1 (plain and TLS), net/http
// (a chunked body, which the fast path hands over), and HTTP/2. A body
// that keeps coming, each gap shorter than the bound, is read whole.
func TestStalledBodyIsBounded(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	// The bound is re-armed only once less than half of it is left, so a
	// live body must keep each gap under idle/2; the trickle below sends
	// every idle/5, which leaves room for a scheduler that stalls the
	// test a few hundred milliseconds.
	const idle = time.Second
	type result struct {
		n   int
		err error
	}
	// Each subtest has an edge of its own, so that a handler still
	// waiting from one cannot answer for another; they run in parallel,
	// as each mostly waits out the bound or its trickle.
	fresh := func(t *testing.T) (*running, chan result) {
		t.Parallel()
		got := make(chan result, 1)
		e := start(t, Options{HTTPMode: ModeServe, IdleTimeout: idle, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := io.Copy(io.Discard, r.Body)
			got <- result{int(n), err}
			if err != nil {
				w.WriteHeader(http.StatusRequestTimeout)
				return
			}
			io.WriteString(w, "read")
		})})
		return e, got
	}
	wait := func(t *testing.T, got chan result, want int, stalls bool) {
		t.Helper()
		start := time.Now()
		select {
		case r := <-got:
			if stalls {
				var ne net.Error
				if !errors.As(r.err, &ne) || !ne.Timeout() {
					t.Fatalf("a stalled body read %d bytes, then %v; want a timeout", r.n, r.err)
				}
			} else if r.err != nil || r.n != want {
				t.Fatalf("a slow but live body: %d bytes, %v; want %d, no error", r.n, r.err, want)
			}
		case <-time.After(10 * idle):
			t.Fatalf("the handler's body read still waits %v after the client stalled (bound %v)", time.Since(start), idle)
		}
	}
	head := "POST / HTTP/1.1\r\nHost: web." + zone + "\r\n"
	raw := func(t *testing.T, got chan result, c net.Conn, msg, piece, tail string, stalls bool, want int) {
		t.Helper()
		defer c.Close()
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		if !stalls { // trickle the rest, a byte every idle/5
			for range want - 2 {
				time.Sleep(idle / 5)
				if _, err := io.WriteString(c, piece); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := io.WriteString(c, tail); err != nil {
				t.Fatal(err)
			}
		}
		wait(t, got, want, stalls)
	}
	plain := func(t *testing.T, e *running) net.Conn {
		c, err := net.Dial("tcp", e.http)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	secure := func(t *testing.T, e *running) net.Conn {
		c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, stalls := range []bool{true, false} {
		name := map[bool]string{true: "stalled", false: "trickled"}[stalls]
		t.Run(name+"/lane", func(t *testing.T) {
			e, got := fresh(t)
			raw(t, got, plain(t, e), head+"Content-Length: 6\r\n\r\nxx", "x", "", stalls, 6)
		})
		t.Run(name+"/lane over TLS", func(t *testing.T) {
			e, got := fresh(t)
			raw(t, got, secure(t, e), head+"Content-Length: 6\r\n\r\nxx", "x", "", stalls, 6)
		})
		t.Run(name+"/net/http chunked", func(t *testing.T) {
			// Stalled inside a chunk; or trickled a chunk at a time
			// (net/http's chunked reader returns a chunk's bytes only
			// once they are all in, or 32 KiB of them: a Read, which the
			// bound is re-armed at, spans a whole chunk).
			e, got := fresh(t)
			if stalls {
				raw(t, got, plain(t, e), head+"Transfer-Encoding: chunked\r\n\r\n6\r\nxx", "", "", true, 6)
				return
			}
			raw(t, got, plain(t, e), head+"Transfer-Encoding: chunked\r\n\r\n2\r\nxx\r\n", "1\r\nx\r\n", "0\r\n\r\n", false, 6)
		})
	}
	for _, stalls := range []bool{true, false} {
		name := map[bool]string{true: "stalled", false: "trickled"}[stalls]
		t.Run(name+"/h2", func(t *testing.T) {
			e, got := fresh(t)
			r := dialRawH2(t, e.https)
			fields := [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "web." + zone}, {":path", "/"}, {"content-length", "6"}}
			r.headers(1, fields, false)
			r.data(1, []byte("xx"), false)
			if !stalls {
				for i := range 4 {
					time.Sleep(idle / 5)
					r.data(1, []byte("x"), i == 3)
				}
			}
			wait(t, got, 6, stalls)
			if stalls {
				res := r.response(1, true)
				if res.status != "408" && !(res.reset && res.rstCode != http2.ErrCodeNo) {
					t.Errorf("the stalled stream ended %+v; want the handler's 408 or a reset", res)
				}
			}
		})
	}
}
