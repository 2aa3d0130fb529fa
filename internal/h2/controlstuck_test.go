package h2

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// valveConn is the server's side of a TCP connection whose writes, once
// shut, wait one by one to be let through (pass): a client that takes
// what the server sends a buffer at a time, or not at all. Close lets
// every write on to the closed socket, which fails it.
type valveConn struct {
	net.Conn
	shut    atomic.Bool
	waiting chan struct{} // told each time a write starts to wait
	passes  chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func newValve(c net.Conn) *valveConn {
	return &valveConn{Conn: c, waiting: make(chan struct{}, 16), passes: make(chan struct{}), closed: make(chan struct{})}
}

func (c *valveConn) Write(p []byte) (int, error) {
	if c.shut.Load() {
		c.waiting <- struct{}{}
		select {
		case <-c.passes:
		case <-c.closed:
		}
	}
	return c.Conn.Write(p)
}

func (c *valveConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// waitWrite waits until a write waits at the valve.
func (c *valveConn) waitWrite(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not written", what)
	}
}

// TestReaderGoesOnWhileControlFramesWait: the control frames queued while
// a handler held the write lock are written with the queue's lock let
// go, so that a client slow to read them (its socket full) does not stop
// the connection from reading: the reader queues its answers, up to the
// queue's bound, and serves the next stream. The queue was written with
// its lock held: a write stuck there held the reader at its next control
// frame (a PING's ACK), and every later frame of the client went unread,
// and the GOAWAY senders (gmu held) waited with it.
func TestReaderGoesOnWhileControlFramesWait(t *testing.T) {
	entered := make(chan string, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(strings.Repeat("x", 20000)))
			return
		}
		entered <- r.URL.Path
		<-r.Context().Done()
	})
	accepted := make(chan *valveConn, 1)
	_, addr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
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
	vc.shut.Store(true)
	// The response fills the write buffer, which waits to go out with the
	// write lock held: what the reader answers now is queued.
	rc.headers(1, true, reqFields("GET", "/big")...)
	vc.waitWrite(t, "the response")
	// More answers than the write buffer takes (a PING's ACK is 17
	// bytes), fewer than the queue's bound or a flood.
	for i := range 1000 {
		if err := rc.fr.WritePing(false, [8]byte{byte(i >> 8), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	rc.headers(3, true, reqFields("GET", "/3")...)
	waitPath(t, entered, "/3") // every PING before it is answered (queued)
	// The response's first buffer goes; the queued answers, written
	// behind the rest of it, wait.
	vc.passes <- struct{}{}
	vc.waitWrite(t, "the queued control frames")
	if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	rc.headers(5, true, reqFields("GET", "/5")...)
	waitPath(t, entered, "/5")
}

func waitPath(t *testing.T, entered <-chan string, path string) {
	t.Helper()
	select {
	case p := <-entered:
		if p != path {
			t.Fatalf("the handler of %s ran, want %s", p, path)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the handler of %s never ran: the connection is not read", path)
	}
}

// TestGoAwayNeverWaitsForAFullControlQueue: a GOAWAY's sender queues it
// past the control queue's bound rather than wait for the write lock as
// the reader does there: it holds gmu, and waiting for a write stuck on a
// client that reads nothing held every other GOAWAY's sender with it. A
// handler answering Connection: close stayed in WriteHeader. The client
// here floods the queue with PINGs within its allowance (two for each
// DATA frame it was sent, a hundred more) and reads nothing.
func TestGoAwayNeverWaitsForAFullControlQueue(t *testing.T) {
	const chunks = 2200 // DATA frames: an allowance of 4500 PINGs
	entered, answer, answered := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/many":
			for range chunks {
				_, _ = w.Write([]byte("x"))
				w.(http.Flusher).Flush()
			}
		case "/big":
			_, _ = w.Write([]byte("held")) // waits for the client, the write lock held
		case "/close":
			entered <- struct{}{}
			<-answer
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusNoContent)
			close(answered)
		}
	})
	rc, sc := serveStuck(t, h)
	rc.headers(1, true, reqFields("GET", "/many")...)
	rc.until("stream 1's end", endOf(1))
	rc.headers(3, true, reqFields("GET", "/close")...)
	waitEntered(t, entered)
	sc.stick()
	rc.headers(5, true, reqFields("GET", "/big")...)
	select {
	case <-sc.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler wrote nothing")
	}
	// 4000 ACKs of 17 bytes: past the queue's 64 KiB, the reader waits.
	for i := range 4000 {
		if err := rc.fr.WritePing(false, [8]byte{byte(i >> 8), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitGoroutine(t, "(*conn).sendControl", "[sync.Mutex.Lock")
	close(answer)
	waitAnswered(t, answered)
}

// TestStuckGoAwayHoldsBackNoOtherGoAway: a drain's GOAWAY whose write is
// stuck on a client that reads nothing (its socket full, the write lock
// free as the GOAWAY was queued) holds back no other GOAWAY's sender: a
// handler answering Connection: close goes on. Its sender wrote it
// holding gmu, which that answer (goAwayGracefully) waited for.
func TestStuckGoAwayHoldsBackNoOtherGoAway(t *testing.T) {
	entered, answer, answered := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-answer
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusNoContent)
		close(answered)
	})
	accepted := make(chan *heldConn, 1)
	s, addr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
		hc := &heldConn{Conn: c, waiting: make(chan struct{}), closed: make(chan struct{})}
		accepted <- hc
		return hc
	})
	rc := dialRaw(t, addr)
	rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})
	hc := <-accepted
	rc.headers(1, true, reqFields("GET", "/")...)
	waitEntered(t, entered)
	hc.held.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	defer func() { cancel(); <-shut }()
	select {
	case <-hc.waiting: // the GOAWAY's write waits for the client
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown wrote no GOAWAY")
	}
	close(answer)
	waitAnswered(t, answered)
}
