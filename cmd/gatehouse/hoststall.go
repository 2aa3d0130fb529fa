package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The sidecar's bounds on a client that stalls an exchange under way: an
// upload whose next bytes do not come, an answer the client does not
// take. Neither is a bound on the whole exchange (a long upload, an event
// stream, an h2c stream and an upgraded connection go on for as long as
// bytes move), only on one wait: a read of the body, a write of the
// answer, that waited a stall with nothing moving. The gateway bounds its
// own clients so (internal/edge: bodystall.go, track.go, h2stall.go, at
// listeners.idle_timeout), and this is a small copy of that, which the
// binary may not import (STYLE §6.1), with one difference: every wait
// here has at least a stall (at most a stall and a half), where the
// gateway's HTTP/1 body read may have only half of one, so that the
// sidecar behind a gateway never cuts what the gateway let through.

// stallListener wraps each connection it accepts in a stallConn.
type stallListener struct {
	net.Listener
	stall time.Duration
}

// sidecarListener is ln with t's write stall bound on each connection;
// ln itself with none.
func sidecarListener(ln net.Listener, t sidecarTimeouts) net.Listener {
	if t.stall <= 0 {
		return ln
	}
	return stallListener{ln, t.stall}
}

func (l stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, stall: l.stall}, nil
}

// stallConn is a client connection whose writes are bounded by stall: a
// client that stops reading (an answer, an h2c connection's frames, an
// upgraded connection's bytes) fails the write, and the server closes
// the connection, instead of the handler and its connection to the app
// waiting on it for as long as the client likes. It has no ReadFrom: one
// call of it could copy a whole long answer under one deadline.
type stallConn struct {
	net.Conn
	stall time.Duration

	// wdl is the write deadline Write last set (zero: none). theirs
	// says someone else set one (a handler through
	// http.ResponseController): Write leaves it alone until it is
	// cleared, as net/http does after each request and Hijack does.
	mu     sync.Mutex
	wdl    time.Time
	theirs bool
}

// Write arms the stall deadline, then writes. It is re-armed only when
// less than a stall is left, for a stall and a half: every write has at
// least a stall to go through, at the cost of a timer update per stall
// rather than per write.
func (c *stallConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if now := time.Now(); !c.theirs && c.wdl.Sub(now) < c.stall {
		if d := now.Add(c.stall + c.stall/2); c.Conn.SetWriteDeadline(d) == nil {
			c.wdl = d
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *stallConn) SetDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetDeadline(t)
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetWriteDeadline(t)
}

// note records a write deadline set from outside: a zero one hands the
// stall bound back to Write.
func (c *stallConn) note(t time.Time) {
	c.mu.Lock()
	c.theirs, c.wdl = !t.IsZero(), time.Time{}
	c.mu.Unlock()
}

// CloseWrite half-closes the TCP connection: net/http's server does
// before closing a connection whose body it did not read (so that its
// last answer is not lost to a reset), and ReverseProxy for a tunnel's
// (a 101's) client side when the app's side ends.
func (c *stallConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// stallBodies bounds each wait for a request body's next bytes by stall
// (zero: no bound), and over HTTP/2 each wait of a response write for
// the stream's flow-control window (HTTP/1's are the connection's,
// stallConn's). net/http's ReadTimeout would bound the whole request, a
// long upload included.
func stallBodies(next http.Handler, stall time.Duration) http.Handler {
	if stall <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor >= 2 {
			serveWatched(next, w, r, stall)
			return
		}
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		b := &stallBody{ReadCloser: r.Body, rc: http.NewResponseController(w), stall: stall}
		// Armed before the handler runs, not at its first read: a
		// handler that answers without reading the body (a 405 of the
		// challenge, a 508) leaves net/http to read up to 256 KiB of it
		// after, to reuse the connection, with no deadline of its own.
		b.arm()
		// A copy carries the wrapper: net/http reads its own request's
		// Body after the handler (golang issue 12027), the original,
		// with the deadline rearm leaves.
		r2 := r.WithContext(context.WithValue(r.Context(), stallKey{}, b))
		r2.Body = b
		next.ServeHTTP(stallWriter{w, b}, r2)
		b.rearm(w)
		b.mu.Lock()
		b.returned = true // net/http sets the next request's deadlines
		b.mu.Unlock()
	})
}

// stallKey is the context key of a request's body watch: ReverseProxy
// hands its error handler the request it sent, its body wrapped.
type stallKey struct{}

// stalled reports whether r's body failed because its client stopped
// sending it for the stall bound: the client's 408, not the app's
// failure.
func stalled(r *http.Request) bool {
	s, ok := r.Context().Value(stallKey{}).(interface{ stalled() bool })
	return ok && s.stalled()
}

// stallBody is an HTTP/1 request body whose reads arm a read deadline on
// the connection. Read and Close may come from the transport's goroutine
// after the handler returned: from then on the deadlines are net/http's.
type stallBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
	reads atomic.Int32 // reads under way

	mu       sync.Mutex
	until    time.Time // the deadline armed last; zero: none
	returned bool      // the handler returned
	expired  bool      // a read hit the deadline
	ended    bool      // a read returned an error, io.EOF included
	closed   bool      // Close was called
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.arm()
	b.reads.Add(1)
	n, err := b.ReadCloser.Read(p)
	b.reads.Add(-1)
	if err != nil {
		b.clear(err)
	}
	return n, err
}

// Close keeps the deadline over the body's own Close, which reads up to
// 256 KiB of a body not read to its end, and lifts it after.
func (b *stallBody) Close() error {
	b.mu.Lock()
	ended := b.ended
	b.closed = true
	b.mu.Unlock()
	if !ended {
		b.arm()
	}
	err := b.ReadCloser.Close()
	b.clear(err)
	return err
}

// stalled reports whether the deadline fired on a read of the body: one
// may not have returned yet, as net/http cancels the request's context
// (and the transport gives up) when the connection's read fails, before
// the error reaches the body. A deadline passed with no read waiting (the
// app slow to take the upload) is not the client's.
func (b *stallBody) stalled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.expired || b.reads.Load() > 0 && !b.until.IsZero() && !time.Now().Before(b.until)
}

// rearm renews the deadline as the handler returns with its body neither
// read to its end nor closed: net/http reads what is left of it next,
// and the deadline armed as the handler started may have passed while it
// worked. A zero-byte Write is how net/http tells a hijacked connection
// (ErrHijacked), which the handler now owns; otherwise it writes the
// head net/http would write as the handler returns, and no byte.
func (b *stallBody) rearm(w http.ResponseWriter) {
	b.mu.Lock()
	done := b.ended || b.closed || b.expired
	b.mu.Unlock()
	if done {
		return
	}
	if _, err := w.Write(nil); errors.Is(err, http.ErrHijacked) {
		return
	}
	b.arm()
}

// arm sets the deadline a stall and a half from now when less than a
// stall is left.
func (b *stallBody) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armLocked()
}

func (b *stallBody) armLocked() {
	if b.returned {
		return
	}
	if now := time.Now(); b.until.Sub(now) < b.stall {
		b.until = now.Add(b.stall + b.stall/2)
		_ = b.rc.SetReadDeadline(b.until)
	}
}

// answering renews the deadline as the handler writes or flushes its
// answer, which may send the answer's head: net/http then reads what is
// left of the body (up to 256 KiB, all of a chunked one's), with the
// deadline the last read armed, which may have passed while the app,
// taking no more of the upload, worked. The head goes out at the answer's
// first bytes (at once only for one of unknown length, which ReverseProxy
// flushes), and an app may send its head and its body far apart: renewed
// at the app's head, the deadline passed before its body. That read
// failing cancelled the request, and an honest client got a head and a
// cut body. Not while a read of the body waits: its deadline is for the
// client's stall, which writes of the answer must not put off. Checked
// and armed under one lock: a body that ended has its deadline lifted,
// and one armed after would fall on net/http's read that watches for the
// client leaving. The proxy now works in full duplex (hostproxy.go), and
// net/http reads none of its upload as the head goes out: this keeps a
// handler that does not (the host's challenge, a 508) from the same cut.
func (b *stallBody) answering() {
	if b.reads.Load() > 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ended && !b.closed && !b.expired {
		b.armLocked()
	}
}

// stallWriter is the ResponseWriter of an HTTP/1 request with a body
// (stallBodies). Unwrap keeps the rest of http.ResponseController (a
// 101's Hijack) reaching net/http's.
type stallWriter struct {
	http.ResponseWriter
	b *stallBody
}

func (w stallWriter) Write(p []byte) (int, error) {
	w.b.answering()
	return w.ResponseWriter.Write(p)
}

func (w stallWriter) FlushError() error {
	w.b.answering()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w stallWriter) Flush() { _ = w.FlushError() }

func (w stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clear lifts the deadline once the body is done with: a read that waits
// after it (net/http's watch for the client leaving during a long
// answer) is not the body's. One that fired stays: the client stalled,
// and net/http closes the connection after the answer.
func (b *stallBody) clear(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.expired = true
	}
	if err != nil {
		b.ended = true
	}
	if b.returned || b.until.IsZero() || b.expired {
		return
	}
	b.until = time.Time{}
	_ = b.rc.SetReadDeadline(time.Time{})
}

// serveWatched serves an HTTP/2 (h2c) request with its body's reads and
// its answer's writes watched. A stream deadline set ahead, as over
// HTTP/1, would not do: net/http's HTTP/2 server fails a stream's body
// or resets the stream when its deadline passes whether or not a read
// or a write is waiting, so it would cut a handler that paused (an app
// slow to take the upload) or a quiet event stream. A timer looks every
// half stall at counts of the reads and writes begun and ended, and sets
// a deadline in the past, which acts at once, only when it has seen the
// same one waiting three times: for at least a stall, at most a stall
// and a half.
func serveWatched(next http.Handler, w http.ResponseWriter, r *http.Request, stall time.Duration) {
	wa := &watch{rc: http.NewResponseController(w), stall: stall}
	ww := &watchedWriter{ResponseWriter: w, wa: wa}
	r2 := r
	if r.Body != nil && r.Body != http.NoBody {
		b := &watchedBody{ReadCloser: r.Body, wa: wa}
		r2 = r.WithContext(context.WithValue(r.Context(), stallKey{}, b))
		r2.Body = b
	}
	wa.mu.Lock()
	wa.timer = time.AfterFunc(stall/2, wa.check)
	wa.mu.Unlock()
	defer wa.stop()
	next.ServeHTTP(ww, r2)
}

// watch is one HTTP/2 request's watch (serveWatched).
type watch struct {
	rc    *http.ResponseController
	stall time.Duration
	// reads and writes are incremented when a body Read (a response
	// Write or Flush) begins and when it ends: odd while one waits.
	reads, writes atomic.Uint64
	expired       atomic.Bool // the body's deadline was set: it stalled

	mu           sync.Mutex
	timer        *time.Timer
	done         bool
	seenR, seenW uint64
	sameR, sameW int
}

func (wa *watch) stop() {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	wa.done = true
	wa.timer.Stop()
}

// waiting counts a check that finds n: same is how many checks in a row
// saw the one wait n tells (odd) still going.
func waiting(n uint64, seen *uint64, same *int) bool {
	if n&1 == 1 && n == *seen {
		*same++
	} else {
		*seen, *same = n, 0
	}
	return *same >= 2
}

// check runs on the timer's goroutine; a past deadline set from there
// acts as net/http's own stream deadline does when it fires.
func (wa *watch) check() {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	if wa.done {
		return
	}
	if !wa.expired.Load() && waiting(wa.reads.Load(), &wa.seenR, &wa.sameR) {
		wa.expired.Store(true)
		_ = wa.rc.SetReadDeadline(time.Unix(1, 0))
	}
	if waiting(wa.writes.Load(), &wa.seenW, &wa.sameW) {
		_ = wa.rc.SetWriteDeadline(time.Unix(1, 0))
		return // the stream is reset: nothing more to watch
	}
	wa.timer.Reset(wa.stall / 2)
}

type watchedBody struct {
	io.ReadCloser
	wa *watch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.wa.reads.Add(1)
	defer b.wa.reads.Add(1)
	return b.ReadCloser.Read(p)
}

func (b *watchedBody) stalled() bool { return b.wa.expired.Load() }

// watchedWriter is the ResponseWriter of a watched request. Unwrap keeps
// the rest of http.ResponseController reaching the stream.
type watchedWriter struct {
	http.ResponseWriter
	wa *watch
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.wa.writes.Add(1)
	defer w.wa.writes.Add(1)
	return w.ResponseWriter.Write(p)
}

// FlushError is counted like Write: a flush waits on the window too.
func (w *watchedWriter) FlushError() error {
	w.wa.writes.Add(1)
	defer w.wa.writes.Add(1)
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *watchedWriter) Flush() { _ = w.FlushError() }

func (w *watchedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
