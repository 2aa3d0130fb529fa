package edge

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// stallBodies bounds each wait for a request body's next bytes by stall
// on what net/http serves (the lane and the HTTP/2 server bound their own
// bodies): net/http's ReadTimeout would bound the whole request, a long
// upload included, so a read deadline is armed through the response's
// controller before body reads instead, and cleared when the body ends.
// A client that stalls its upload would otherwise hold the handler, and
// the host behind it, for ever.
func stallBodies(next http.Handler, stall time.Duration) http.Handler {
	if stall <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		b := &stallBody{ReadCloser: r.Body, rc: http.NewResponseController(w), stall: stall}
		if r.ProtoMajor == 1 {
			// Armed before the handler runs, not at its first read: a
			// handler that answers without reading the body (412, 401,
			// 413) leaves net/http to read up to 256 KiB of it, to reuse
			// the connection, as the answer's head is written (at the
			// handler's first flush, or after it returns) and in the
			// body's Close (Expect: 100-continue with no 100 sent
			// too), with no deadline of its own (the server has no
			// ReadTimeout): a client that declared a body and sent
			// none held the connection for ever. A client that sends it
			// within the bound keeps its connection. Renewed as the
			// handler returns (finish), unless it hijacked the
			// connection, which Hijack lifted this one from. Not over
			// HTTP/2, whose server reads no body after its handler,
			// and whose stream read deadline would end the body while
			// the handler still runs.
			b.arm()
		}
		// A copy carries the wrapper: net/http reads its own request's
		// Body after the handler, and only as its own type does it see a
		// body closed before its end and close the connection (golang
		// issue 12027). Replaced, net/http drained it with no deadline
		// (a stalled upload held the connection for ever) or read the
		// bytes after a broken chunk as the next request (smuggling).
		r2 := *r
		r2.Body = b
		next.ServeHTTP(w, &r2)
		if r.ProtoMajor == 1 {
			b.finish(w, r)
		}
		b.mu.Lock()
		b.returned = true // net/http sets the next request's deadlines
		b.mu.Unlock()
	})
}

// stallBody is a request body whose reads arm a read deadline. Read and
// Close may come from a transport's goroutine, after the handler
// returned: from then on the deadlines are left to net/http.
type stallBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration

	mu       sync.Mutex
	until    time.Time // the deadline armed last; zero: none
	returned bool      // the handler returned
	expired  bool      // a read hit the deadline
	ended    bool      // a read returned an error, io.EOF included
	broken   bool      // a read or the Close returned an error other than io.EOF
	closed   bool      // Close was called
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.arm()
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.clear(err)
	}
	return n, err
}

// Close keeps the deadline over the body's own Close, which reads up to
// 256 KiB of a body not read to its end (net/http's, to reuse the
// connection), and lifts it after.
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

// finish deals with what is left of the body as the handler returns.
//
// Neither read to its end nor closed, it is closed here, which reads up
// to 256 KiB of it (net/http's body Close) to reuse the connection, under
// a renewed deadline: the one armed as the handler started may have
// passed while it worked, failing that read on bytes the client sent at
// once and closing a connection it would have kept. Not left to net/http
// after the handler: for a handler in full duplex (the proxy, which
// sends the upload on as its host answers), whose answer's head went out
// with the body unread, net/http then read it after it had stopped its
// watch for the client leaving, and the watch the body's end started
// was left running: the next request on the connection panicked
// (golang/go#68560), unanswered. An Expect: 100-continue body is left to
// net/http, which answers first and then closes the connection.
//
// A body that failed (a stall, a broken chunk) or could not be read to
// its end has net/http close the connection after the answer: where the
// next request starts is unknown. net/http decides so as the head goes
// out, never for a full-duplex handler's.
//
// A zero-byte Write is how net/http tells a hijacked connection
// (ErrHijacked, nothing else done), which Hijack cleared of deadlines and
// the handler now owns; otherwise it writes the head net/http would write
// as the handler returns (200 if none was), and no byte.
func (b *stallBody) finish(w http.ResponseWriter, r *http.Request) {
	if _, err := w.Write(nil); errors.Is(err, http.ErrHijacked) {
		return
	}
	b.mu.Lock()
	done := b.ended || b.closed || b.expired
	b.mu.Unlock()
	if !done {
		if _, ok := r.Header["Expect"]; ok {
			b.arm()
			return
		}
		_ = b.Close()
	}
	b.mu.Lock()
	broken := b.broken || b.expired
	b.mu.Unlock()
	if broken {
		closeAfterAnswer(w)
	}
}

// closeAfterAnswer has net/http close the connection after the answer,
// even one whose head went out: a read past http.MaxBytesReader's limit
// tells its ResponseWriter so (net/http's own, which stallBodies gets).
func closeAfterAnswer(w http.ResponseWriter) {
	var p [1]byte
	_, _ = http.MaxBytesReader(w, io.NopCloser(strings.NewReader("x")), 0).Read(p[:])
}

// arm sets the deadline a stall from now when less than half of one is
// left: a timer update per read would cost more than the bound is worth.
func (b *stallBody) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.returned {
		return
	}
	if now := time.Now(); b.until.Sub(now) < b.stall/2 {
		b.until = now.Add(b.stall)
		_ = b.rc.SetReadDeadline(b.until)
	}
}

// clear lifts the deadline once the body is done with: a read that waits
// after it (net/http's watch for the client leaving, an event stream's
// long response) is not the body's.
// A deadline that fired stays: the client stalled, and nothing more is
// to be read from it (net/http closes the connection after the answer).
func (b *stallBody) clear(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.expired = true
	}
	if err != nil {
		b.ended = true
		// A read after a Close (a transport's goroutine, late) says
		// nothing of the body: the Close's own error does.
		b.broken = b.broken || (err != io.EOF && !errors.Is(err, http.ErrBodyReadAfterClose))
	}
	if b.returned || b.until.IsZero() || b.expired {
		return
	}
	b.until = time.Time{}
	_ = b.rc.SetReadDeadline(time.Time{})
}
