package edge

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestH2HeldUploadLeavesOthersRoom: on one HTTP/2 connection (a browser
// puts all its requests to the gateway on one), a request whose handler
// takes none of its upload and stays open (a host that does not read it)
// does not stop another upload on the same connection, with either
// server. net/http's at its defaults gave a connection no more window
// than a stream (1 MiB): the held stream's unread bytes filled it, the
// client could send no byte of the other upload, and idle_timeout failed
// it (408).
func TestH2HeldUploadLeavesOthersRoom(t *testing.T) {
	t.Parallel()
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		t.Parallel()
		hu := testutil.NewHeldUpload()
		// The client takes the next part of a body only once it has sent
		// the last: past a stream's window (1 MiB with either server), the
		// held stream has taken all the window it will ever get.
		hu.Stopped = func(_ *http.Request, taken int64) bool { return taken > 1<<20 }
		// The stall bound: long enough that a loaded machine does not
		// make an upload that moves look stalled.
		e := impl.start(t, Options{Handler: hu, IdleTimeout: time.Second})
		var (
			dials  atomic.Int32
			mu     sync.Mutex
			dialed []net.Conn
		)
		d := &net.Dialer{Timeout: 5 * time.Second}
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}},
			ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				c, err := d.DialContext(ctx, network, addr)
				if err == nil {
					mu.Lock()
					dialed = append(dialed, c)
					mu.Unlock()
				}
				return c, err
			},
		}
		// Closed before the edge drains: net/http's HTTP/2 server waits a
		// second after its GOAWAY for a client that keeps its connection.
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range dialed {
				c.Close()
			}
		})
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		do := func(req *http.Request) (*http.Response, error) {
			req.Host = "api." + zone
			return c.Do(req)
		}

		res := hu.Run(t, do, "https://"+e.https)
		if res.Proto != "HTTP/2.0" || dials.Load() != 1 {
			t.Fatalf("the uploads went over %s on %d connections, want HTTP/2 on one", res.Proto, dials.Load())
		}
		// The held upload's error once released, if any, is the
		// connection's end at cleanup.
		if res.HeldEnded {
			t.Fatalf("the held upload ended before the other was answered: %v", res.HeldErr)
		}
	})
}

// TestH2WindowsAgree: both HTTP/2 servers advertise the same receive
// windows, a stream's (SETTINGS_INITIAL_WINDOW_SIZE) and the
// connection's, and give a connection more than a stream (see the test
// above): turning listeners.fast_path off changes neither how fast one
// upload goes nor what a connection may make the gateway hold.
func TestH2WindowsAgree(t *testing.T) {
	t.Parallel()
	type windows struct{ stream, conn int64 }
	got := map[string]windows{}
	for _, impl := range h2Impls {
		e := impl.start(t, Options{})
		c, err := dialTLS(t, e.https, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("%s: ALPN chose %q, want h2", impl.name, p)
		}
		var w windows
		w.stream, w.conn = testutil.H2Windows(t, c)
		got[impl.name] = w
	}
	own, std := got[h2Impls[0].name], got[h2Impls[1].name]
	if own != std || own.conn < 2*own.stream {
		t.Fatalf("windows (a stream's, the connection's): %v; want the same with each server, the connection's at least two streams'", got)
	}
}
