package edge

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestClientThatStopsReadingIsClosed: a client that asks for a large
// response and then reads nothing is closed once a write has waited for
// it about IdleTimeout (DESIGN §3: "a client that cannot keep up is
// closed"), on the http listener (lane and net/http) and on https, and
// the handler's write fails rather than waiting for as long as the client
// likes. A client that reads slowly but steadily gets the whole response.
func TestClientThatStopsReadingIsClosed(t *testing.T) {
	// A reader pausing 100 ms between reads must never look stalled, even
	// on a loaded machine: the bound is ten of its pauses.
	const idle = time.Second
	chunk := []byte(strings.Repeat("x", 64<<10))
	cases := []struct {
		name    string
		lane    bool
		tls     bool
		reading bool
	}{
		{"http lane", true, false, false},
		{"http net/http", false, false, false},
		{"https lane", true, true, false},
		{"https net/http", false, true, false},
		{"http slow reader", true, false, true},
		{"https slow reader", false, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			size := 256 // 16 MiB: far more than the sockets hold
			if tc.reading {
				size = 32 // 2 MiB in about 3.2 s, longer than the stall bound
			}
			wrote := make(chan error, 1)
			big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for range size {
					if _, err := w.Write(chunk); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			})
			e := start(t, Options{HTTPMode: ModeServe, Handler: big, DisableLane: !tc.lane, IdleTimeout: idle})
			var c net.Conn
			var err error
			if tc.tls {
				c, err = dialTLS(t, e.https, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			} else {
				c, err = net.Dial("tcp", e.http)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: w\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if tc.reading {
				buf := make([]byte, 64<<10)
				n := 0
				for n < size*len(chunk) {
					time.Sleep(100 * time.Millisecond)
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					k, err := io.ReadFull(c, buf)
					n += k
					if err != nil {
						t.Fatalf("slow reader cut after %d bytes: %v", n, err)
					}
				}
				if err := <-wrote; err != nil {
					t.Fatalf("handler: %v", err)
				}
				return
			}
			select {
			case err := <-wrote:
				if err == nil {
					t.Fatal("16 MiB written to a client that reads nothing")
				}
			case <-time.After(10 * idle):
				t.Fatalf("a client that reads nothing still held after %v (IdleTimeout %v)", 10*idle, idle)
			}
			// Closing a TLS connection first tries a close_notify, which
			// crypto/tls bounds to 5 s: the client still reads nothing.
			testutil.WaitFor(t, 10*time.Second, func() bool { return e.ActiveConnections() == 0 }, "stalled connection still counted")
		})
	}
}

// TestHTTP2StreamThatStopsReadingIsReset: over HTTP/2 the connection can
// keep moving (PINGs, other streams) while one stream's window stays shut,
// which the connection's write bound never sees. Such a stream is reset
// once a write has waited for it about IdleTimeout, so the handler's write
// fails instead of holding it (and its upstream connection) for as long
// as the client likes, while the connection and its other streams go on.
// A slow but steady reader gets the whole response, and so does a client
// whose handler pauses between writes for longer than IdleTimeout: only a
// write that cannot go through is bounded, never a quiet stream.
func TestHTTP2StreamThatStopsReadingIsReset(t *testing.T) {
	const idle = time.Second // as TestClientThatStopsReadingIsClosed
	chunk := []byte(strings.Repeat("x", 64<<10))
	cases := []struct {
		name   string
		path   string
		chunks int    // the response is chunks*64 KiB
		window uint32 // the client's INITIAL_WINDOW_SIZE
		grant  uint32 // stream window the client opens every 100 ms; 0: none
		reset  bool   // the stream must be reset and the handler's write fail
	}{
		{"stream that reads nothing", "/stall", 256, 16, 0, true},
		{"slow but steady reader", "/steady", 32, 16, 64 << 10, false}, // 2 MiB in about 3.2 s
		{"handler that pauses", "/pause", 2, 1 << 30, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wrote := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/small" {
					_, _ = io.WriteString(w, "ok")
					return
				}
				for i := range tc.chunks {
					if r.URL.Path == "/pause" && i == 1 {
						// Quiet for three IdleTimeouts, everything sent.
						_ = http.NewResponseController(w).Flush()
						select {
						case <-time.After(3 * idle):
						case <-r.Context().Done():
						}
					}
					if _, err := w.Write(chunk); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			})
			e := start(t, Options{Handler: h, IdleTimeout: idle})
			cl := dialH2(t, e.https, tc.window)
			cl.get(t, 1, tc.path)
			ping := time.NewTicker(idle / 4)
			defer ping.Stop()
			grant := time.NewTicker(100 * time.Millisecond)
			defer grant.Stop()
			bound := 10 * idle
			if !tc.reset {
				bound = 20 * idle // the reader takes its time
			}
			begun := time.Now()
			expired := time.After(bound)
			var (
				got, acks       int
				ended, wasReset bool
				werr            error
				handled         bool
			)
			for !handled || (tc.reset && !wasReset) || (!tc.reset && !ended) {
				select {
				case f, ok := <-cl.frames:
					if !ok {
						t.Fatalf("the connection closed (got %d bytes): only the stream should end", got)
					}
					switch {
					case f.typ == http2.FramePing && f.ack:
						acks++
					case f.typ == http2.FrameRSTStream && f.stream == 1:
						wasReset = true
					case f.typ == http2.FrameData && f.stream == 1:
						got += f.n
						ended = f.end
						if f.n > 0 {
							_ = cl.open(0, uint32(f.n)) // the connection's window never binds
						}
					}
				case werr = <-wrote:
					handled = true
				case <-ping.C:
					if err := cl.ping(); err != nil {
						t.Fatalf("ping: %v", err)
					}
				case <-grant.C:
					if tc.grant > 0 {
						_ = cl.open(1, tc.grant)
					}
				case <-expired:
					t.Fatalf("after %v: handler done %v (err %v), stream reset %v, ended %v, %d bytes (IdleTimeout %v)",
						bound, handled, werr, wasReset, ended, got, idle)
				}
			}
			if !tc.reset {
				if werr != nil || wasReset || got != tc.chunks*len(chunk) {
					t.Fatalf("handler err %v, reset %v, got %d of %d bytes", werr, wasReset, got, tc.chunks*len(chunk))
				}
				return
			}
			if werr == nil {
				t.Fatal("16 MiB written to a stream whose window never opened")
			}
			t.Logf("stalled stream reset after %v: %v", time.Since(begun).Round(time.Millisecond), werr)
			if acks == 0 {
				t.Fatal("no PING answered: the connection was not kept moving")
			}
			// The connection is still served: a new stream gets its answer.
			cl.get(t, 3, "/small")
			var status string
			for done := false; !done; {
				select {
				case f, ok := <-cl.frames:
					if !ok {
						t.Fatal("the connection closed after the stream's reset")
					}
					if f.stream == 3 && f.typ == http2.FrameHeaders {
						status = f.status
					}
					done = f.stream == 3 && f.end
				case <-time.After(5 * time.Second):
					t.Fatal("no answer on a new stream after the reset")
				}
			}
			if status != "200" {
				t.Fatalf("new stream answered %q", status)
			}
		})
	}
}

// TestManagementClientThatStopsReadingIsClosed: DESIGN §3's "a client
// that cannot keep up is closed" holds on every HTTP listener, the
// management one too (a scrape of /metrics, a long API list): a client
// that asks and then reads nothing is closed once a write has waited for
// it about IdleTimeout, and the handler's write fails. The management
// listener's connections are still not counted in active_connections.
func TestManagementClientThatStopsReadingIsClosed(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state

	const idle = time.Second // as TestClientThatStopsReadingIsClosed
	chunk := []byte(strings.Repeat("x", 64<<10))
	wrote := make(chan error, 1)
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 256 { // 16 MiB: far more than the sockets hold
			if _, err := w.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	})
	e := start(t, Options{Management: big, IdleTimeout: idle})
	c, err := net.Dial("tcp", e.mgmt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("16 MiB written to a client that reads nothing")
		}
	case <-time.After(10 * idle):
		t.Fatalf("a management client that reads nothing still held after %v (IdleTimeout %v)", 10*idle, idle)
	}
	if n := e.ActiveConnections(); n != 0 {
		t.Errorf("active_connections %d: the management listener's connections are apart", n)
	}
}
