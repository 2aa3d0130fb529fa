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
// refusals: a stream opened on another connection once Shutdown is
// writing is refused (REFUSED_STREAM) and reaches no handler. Writing
// GOAWAY to each connection in turn as it was marked left the connections
// after a stuck one serving new streams until that write ended; the
// server's map order picks which comes first, so the test takes several
// rounds.
func TestShutdownRefusesEverywhereFirst(t *testing.T) {
	for round := range 8 {
		var reached atomic.Int32
		s, err := New(Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.WriteString(w, "served")
		})})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan *stuckConn, 2)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				sc := &stuckConn{Conn: c, gate: make(chan struct{}), entered: make(chan struct{})}
				accepted <- sc
				wg.Add(1)
				go func() { defer wg.Done(); s.ServeConn(sc) }()
			}
		}()
		// Once the server has acknowledged the client's SETTINGS it has
		// nothing more to write until asked.
		settled := func(rc *rawClient) {
			rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
				sf, ok := f.(*http2.SettingsFrame)
				return ok && sf.IsAck()
			})
		}
		open := dialRaw(t, ln.Addr().String())
		settled(open)
		<-accepted
		stuck := dialRaw(t, ln.Addr().String())
		settled(stuck)
		sc := <-accepted
		sc.stick()

		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		select {
		case <-sc.entered: // a GOAWAY waits on the stuck connection
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Shutdown wrote nothing to the stuck connection", round)
		}
		open.headers(1, true, reqFields("GET", "/")...)
		var code http2.ErrCode = 0xff
		open.until("stream 1's end", func(f http2.Frame) bool {
			if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
				code = r.ErrCode
			}
			return endOf(1)(f)
		})
		if code != http2.ErrCodeRefusedStream || reached.Load() != 0 {
			t.Errorf("round %d: a stream opened while Shutdown writes: RST_STREAM %v (0xff: none), %d handler(s) reached; want REFUSED_STREAM and none",
				round, code, reached.Load())
		}
		sc.free()
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		ln.Close()
		s.Close()
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}
