package edge

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
