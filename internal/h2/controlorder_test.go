package h2

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"golang.org/x/net/http2"
)

// TestGoAwayLeftToTheHolderMidFlush: a drain's GOAWAY queued while a
// handler's flush holds the write lock, after that holder took the
// control queue, is left to it (pushControl does not wait): the holder,
// letting go, finds the queue filled since and writes it. The handler
// then waits without writing, so nothing else would carry the GOAWAY,
// and the client, which has a stream open, must still be told to go.
func TestGoAwayLeftToTheHolderMidFlush(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("x"))
		w.(http.Flusher).Flush() // waits at the valve, the write lock held
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	accepted := make(chan *valveConn, 1)
	s, addr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
		vc := newValve(c)
		accepted <- vc
		return vc
	})
	rc := dialRaw(t, addr)
	rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})
	vc := <-accepted
	t.Cleanup(func() { _ = vc.Close() })
	var cn *conn
	s.mu.Lock()
	for c := range s.conns {
		cn = c
	}
	s.mu.Unlock()
	vc.shut.Store(true)
	rc.headers(1, true, reqFields("GET", "/")...)
	vc.waitWrite(t, "the response") // the flush, past the queue's take
	ctx, cancel := context.WithCancel(context.Background())
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	t.Cleanup(func() { cancel(); <-shut })
	testutil.WaitFor(t, 10*time.Second, func() bool {
		cn.cmu.Lock()
		defer cn.cmu.Unlock()
		return cn.cbuf.Len() > 0
	}, "Shutdown queued no GOAWAY")
	vc.shut.Store(false)
	vc.passes <- struct{}{}
	rc.until("the drain's GOAWAY", func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		return ok && g.LastStreamID == 1 && g.ErrCode == http2.ErrCodeNo
	})
}
