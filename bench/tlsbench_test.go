//go:build linux

package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunNewConnections: every request the new-connection test counts
// came on a connection of its own, for appHost, and an answer of the
// wrong size or status is an error, not a connection counted.
func TestRunNewConnections(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		size   int
		ok     bool
		errHas string // the error wanted, or the key exchange for a good run
	}{
		{"whole answer", 200, 1024, true, "X25519MLKEM768"},
		{"x25519 only", 200, 1024, true, "X25519"},
		{"short body", 200, 1000, false, "1000 bytes"},
		{"not found", 404, 1024, false, "status 404"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var conns, served, wrongHost atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				if r.Host != appHost || r.URL.Path != "/body/1024" || !r.Close {
					wrongHost.Add(1)
				}
				w.WriteHeader(tt.status)
				w.Write(make([]byte, tt.size))
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.StartTLS()
			defer srv.Close()
			r := runNewConnections(context.Background(), srv.Listener.Addr().String(), "/body/1024", 1024, 2, time.Second, tt.name == "x25519 only", nil)
			if wrongHost.Load() != 0 {
				t.Fatalf("%d requests not GET /body/1024 for %s with Connection: close", wrongHost.Load(), appHost)
			}
			if !tt.ok {
				if r.handshakes != 0 || r.errors == 0 || !strings.Contains(r.firstErr, tt.errHas) {
					t.Fatalf("counted %d, %d errors, first %q; want 0 counted and errors with %q", r.handshakes, r.errors, r.firstErr, tt.errHas)
				}
				return
			}
			// Two connections show the loop goes on; how many fit in the
			// second depends on the machine's load (a -race run beside
			// other packages), which this test does not measure.
			if r.handshakes < 2 || r.errors != 0 || r.version != "TLS 1.3, "+tt.errHas {
				t.Fatalf("counted %d, %d errors (first %q), version %q; want >= 2, none, TLS 1.3, %s", r.handshakes, r.errors, r.firstErr, r.version, tt.errHas)
			}
			// A request in flight when the run ended is served but not counted.
			if s, c := served.Load(), conns.Load(); r.handshakes > s || s > c || c > r.handshakes+2 {
				t.Fatalf("counted %d, server saw %d requests on %d connections: want one request per connection", r.handshakes, s, c)
			}
		})
	}
}
