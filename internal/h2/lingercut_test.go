package h2

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// wakeRace is the server's side of a connection whose reader, the first
// time it clears its read deadline, waits until another goroutine has set
// a deadline already passed (wakeToEnd's): the clearing comes after it,
// as it may when the drain wakes the reader just as it clears its own.
type wakeRace struct {
	*net.TCPConn
	first    sync.Once
	atZero   chan struct{} // closed when the reader first clears its deadline
	woke     chan struct{} // closed once a passed deadline is set
	wokeOnce sync.Once
}

func (c *wakeRace) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.first.Do(func() {
			close(c.atZero)
			<-c.woke
		})
		return c.TCPConn.SetReadDeadline(t)
	}
	err := c.TCPConn.SetReadDeadline(t)
	if t.Before(time.Now()) {
		c.wokeOnce.Do(func() { close(c.woke) })
	}
	return err
}

// TestDrainWakesAReaderClearingItsDeadline: a drained connection with no
// stream left is ended by its reader, woken by a read deadline already
// passed (wakeToEnd). A reader that clears its own deadline just after
// (here the one after the client's first SETTINGS) must not undo that:
// it would wait for the client's next frame for ever, and the drain with
// it, the client never told by the connection's end.
func TestDrainWakesAReaderClearingItsDeadline(t *testing.T) {
	t.Parallel()
	accepted := make(chan *wakeRace, 1)
	s, addr := serveWrapped(t, Options{Handler: http.NotFoundHandler()}, func(c net.Conn) net.Conn {
		wc := &wakeRace{TCPConn: c.(*net.TCPConn), atZero: make(chan struct{}), woke: make(chan struct{})}
		accepted <- wc
		return wc
	})
	rc := dialRaw(t, addr)
	wc := <-accepted
	select {
	case <-wc.atZero:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never cleared its deadline")
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The server's end of the connection (its FIN, after the GOAWAY)
	// ends the client's reading; nothing the client does ends it.
	seen := readToClose(t, rc, false)
	if len(seen.goaways) != 1 || seen.goaways[0].ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAYs %+v, want one NO_ERROR", seen.goaways)
	}
	rc.c.Close()
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// lingerOn is the server's side of a connection whose linger has no
// bound of its own: once the server ends its writing, its read deadline
// is cleared (the one that woke the reader too) and no other is set. Only
// the client, or a cut, ends it.
type lingerOn struct {
	*net.TCPConn
	once      sync.Once
	lingering chan struct{} // closed when the server ends its writing
	closeOnce sync.Once
	closed    chan struct{} // closed when the server closes it
}

func newLingerOn(c net.Conn) *lingerOn {
	return &lingerOn{TCPConn: c.(*net.TCPConn), lingering: make(chan struct{}), closed: make(chan struct{})}
}

func (c *lingerOn) Close() error {
	err := c.TCPConn.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	return err
}

func (c *lingerOn) CloseWrite() error {
	err := c.TCPConn.CloseWrite()
	c.once.Do(func() {
		_ = c.TCPConn.SetReadDeadline(time.Time{})
		close(c.lingering)
	})
	return err
}

func (c *lingerOn) SetReadDeadline(t time.Time) error {
	select {
	case <-c.lingering:
		return nil
	default:
		return c.TCPConn.SetReadDeadline(t)
	}
}

// TestCloseCutsALinger: Server.Close closes a connection that lingers
// (reading out the client's bytes after a GOAWAY) at once, as it closes
// every other: it does not wait for the linger's end, which a client that
// keeps its side open puts off to the linger's bound.
func TestCloseCutsALinger(t *testing.T) {
	t.Parallel()
	accepted := make(chan *lingerOn, 1)
	s, addr := serveWrapped(t, Options{Handler: http.NotFoundHandler()}, func(c net.Conn) net.Conn {
		lc := newLingerOn(c)
		accepted <- lc
		return lc
	})
	rc := dialRaw(t, addr)
	lc := <-accepted
	rc.headers(2, true, reqFields("GET", "/")...) // an even id: a connection error
	seen := readToClose(t, rc, false)             // the GOAWAY, then the server's FIN
	if len(seen.goaways) != 1 || seen.goaways[0].ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAYs %+v, want one PROTOCOL_ERROR", seen.goaways)
	}
	<-lc.lingering
	closed := make(chan struct{})
	go func() { defer close(closed); s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the linger to end")
	}
}

// TestShutdownDeadlineEndsALinger: a connection that lingers when
// Shutdown's context ends (its streams all answered, the client's bytes
// read out after the GOAWAY) is closed before Shutdown returns, as Close
// would: what is still open then is only what has something unanswered,
// which is what the edge logs as cut by drain_timeout. It was left open,
// and the edge logged a drain that had answered every request as one
// that cut connections.
func TestShutdownDeadlineEndsALinger(t *testing.T) {
	t.Parallel()
	accepted := make(chan *lingerOn, 1)
	s, addr := serveWrapped(t, Options{Handler: http.NotFoundHandler()}, func(c net.Conn) net.Conn {
		lc := newLingerOn(c)
		accepted <- lc
		return lc
	})
	rc := dialRaw(t, addr)
	lc := <-accepted
	rc.headers(1, true, reqFields("GET", "/")...)
	rc.until("stream 1's end", endOf(1))
	waitHandlers(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	select {
	case <-lc.lingering:
	case <-time.After(10 * time.Second):
		t.Fatal("the drained connection did not linger")
	}
	cancel()
	if err := <-shut; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v, want %v", err, context.Canceled)
	}
	select {
	case <-lc.closed:
	default:
		t.Fatal("Shutdown returned at its context's end with a lingering connection open")
	}
}
