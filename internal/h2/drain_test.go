package h2

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// stuckConn is a server-side connection whose writes, once stuck is
// called, wait until free is: a client that has stopped reading, with the
// kernel's buffers full.
type stuckConn struct {
	net.Conn
	once    sync.Once
	gate    chan struct{} // closed: writes go through
	entered chan struct{} // closed when a write first waits
	armed   atomic.Bool
	freed   sync.Once
}

func (c *stuckConn) stick() { c.armed.Store(true) }
func (c *stuckConn) free()  { c.freed.Do(func() { close(c.gate) }) }

func (c *stuckConn) Write(p []byte) (int, error) {
	if c.armed.Load() {
		c.once.Do(func() { close(c.entered) })
		<-c.gate
	}
	return c.Conn.Write(p)
}

// TestShutdownRefusesEverywhereFirst: Shutdown makes every connection
// refuse new streams before it writes any GOAWAY, so a client whose
// connection has stopped taking writes holds back no other connection's
// refusals: a stream opened on any other connection once Shutdown is
// writing is refused (REFUSED_STREAM) and reaches no handler. Writing
// GOAWAY to each connection in turn as it was marked left the connections
// after a stuck one serving new streams until that write ended; the
// server's map order picks which come after it, so the stuck one is one
// of several, and the test takes a few rounds.
func TestShutdownRefusesEverywhereFirst(t *testing.T) {
	t.Parallel()
	const others = 6
	for round := range 4 {
		var reached atomic.Int32
		o := Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.WriteString(w, "served")
		})}
		accepted := make(chan *stuckConn, others+1)
		s, addr := serveWrapped(t, o, func(c net.Conn) net.Conn {
			sc := &stuckConn{Conn: c, gate: make(chan struct{}), entered: make(chan struct{})}
			accepted <- sc
			return sc
		})
		// Once the server has acknowledged the client's SETTINGS it has
		// nothing more to write until asked.
		dial := func() (*rawClient, *stuckConn) {
			rc := dialRaw(t, addr)
			rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
				sf, ok := f.(*http2.SettingsFrame)
				return ok && sf.IsAck()
			})
			sc := <-accepted
			t.Cleanup(sc.free) // before the server's cleanup, which waits for its writes
			return rc, sc
		}
		var open []*rawClient
		for range others {
			rc, _ := dial()
			open = append(open, rc)
		}
		_, sc := dial()
		sc.stick()

		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		select {
		case <-sc.entered: // a GOAWAY waits on the stuck connection
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Shutdown wrote nothing to the stuck connection", round)
		}
		// Each stream is refused, or finds its connection closed (an idle
		// one closes soon after its GOAWAY): either way, unanswered.
		for i, rc := range open {
			rc.headers(1, true, reqFields("GET", "/")...)
			for {
				f, err := rc.next()
				if err != nil {
					break // closed after its GOAWAY
				}
				if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 1 {
					t.Errorf("round %d, connection %d: a stream opened while Shutdown writes was answered %s; want REFUSED_STREAM",
						round, i, h.PseudoValue("status"))
					break
				}
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
					if r.ErrCode != http2.ErrCodeRefusedStream {
						t.Errorf("round %d, connection %d: RST_STREAM %v, want REFUSED_STREAM", round, i, r.ErrCode)
					}
					break
				}
			}
		}
		if n := reached.Load(); n != 0 {
			t.Errorf("round %d: %d handler(s) reached after Shutdown began; want none", round, n)
		}
		sc.free()
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
}

// serveStuck serves h on a connection whose writes stick at sc.stick()
// until sc.free() (at the test's end at the latest), and returns a raw
// client of it past the server's SETTINGS ACK.
func serveStuck(t *testing.T, h http.Handler) (*rawClient, *stuckConn) {
	t.Helper()
	accepted := make(chan *stuckConn, 1)
	_, addr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
		sc := &stuckConn{Conn: c, gate: make(chan struct{}), entered: make(chan struct{})}
		accepted <- sc
		return sc
	})
	rc := dialRaw(t, addr)
	rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})
	sc := <-accepted
	t.Cleanup(sc.free)
	return rc, sc
}
