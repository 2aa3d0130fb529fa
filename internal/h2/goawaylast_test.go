package h2

import (
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestNothingAfterConnectionErrorGoAway: a connection error's GOAWAY is
// the last frame the server writes; the connection's end follows. A
// handler whose write waited for the write lock while the GOAWAY went
// out (a client slow to take it) wrote its response after it, before
// the connection's end reached the handler.
func TestNothingAfterConnectionErrorGoAway(t *testing.T) {
	entered, write := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-write
		_, _ = io.WriteString(w, "late")
		w.(http.Flusher).Flush()
	})
	rc, sc := serveStuck(t, h)
	t.Cleanup(func() { close(write) })
	rc.headers(1, true, reqFields("GET", "/")...)
	waitEntered(t, entered)
	sc.stick()
	rc.headers(2, true, reqFields("GET", "/")...) // an even id: a connection error
	select {
	case <-sc.entered: // the GOAWAY's write waits for the client
	case <-time.After(10 * time.Second):
		t.Fatal("no GOAWAY was written")
	}
	write <- struct{}{}
	waitGoroutine(t, "(*responseWriter).send", "[sync.Mutex.Lock")
	sc.free()
	f, err := rc.next()
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := f.(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("got %v, want GOAWAY PROTOCOL_ERROR", f)
	}
	_ = rc.c.(*net.TCPConn).CloseWrite() // the server's linger ends at once
	for {
		f, err := rc.next()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "reset") {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("after the connection error's GOAWAY, %v", f)
	}
}

// waitGoroutine waits until a goroutine whose stack holds fn is in the
// state state (its header's "[sync.Mutex.Lock", say).
func waitGoroutine(t *testing.T, fn, state string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(head, state) && strings.Contains(g, fn) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine in %s waits in %s", fn, state)
		}
	}
}

// TestNothingAfterConnectionErrorGoAwayMidWrite: a handler that holds the
// write lock when the connection error comes (its write waits on a client
// slow to take it), and writes on once it has, sends nothing after the
// GOAWAY either. Queued while that write waited, the GOAWAY went out with
// its end, and the handler's next writes, taking the lock again before
// the connection's error did, went out after it.
func TestNothingAfterConnectionErrorGoAwayMidWrite(t *testing.T) {
	entered, write := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-write
		for range 1000 { // within the stream's window: no wait for it
			if _, err := io.WriteString(w, "x"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	rc, sc := serveStuck(t, h)
	rc.headers(1, true, reqFields("GET", "/")...)
	waitEntered(t, entered)
	sc.stick()
	close(write)
	select {
	case <-sc.entered: // the handler's write waits for the client, the lock held
	case <-time.After(10 * time.Second):
		t.Fatal("the handler wrote nothing")
	}
	rc.headers(2, true, reqFields("GET", "/")...) // an even id: a connection error
	waitGoroutine(t, "(*conn).fail", "[sync.Mutex.Lock")
	sc.free()
	for {
		f, err := rc.next()
		if err != nil {
			t.Fatalf("before the GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("got %v, want GOAWAY PROTOCOL_ERROR", f)
			}
			break
		}
	}
	_ = rc.c.(*net.TCPConn).CloseWrite() // the server's linger ends at once
	for {
		f, err := rc.next()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "reset") {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("after the connection error's GOAWAY, %v", f)
	}
}
