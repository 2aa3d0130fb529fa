package lane

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// maxPostHandlerReadBytes is net/http's: an unread request body up to
// this size is read and dropped so the connection can carry the next
// request; a larger one closes the connection after the response.
const maxPostHandlerReadBytes = 256 << 10

// body is a request body of known length: first the bytes read with the
// head, then the connection, never past the declared length (what
// follows is the next request). It is safe for the concurrent use an
// http.Transport makes of a request body (read on one goroutine, closed
// on another, perhaps after the handler returned).
type body struct {
	mu      sync.Mutex
	cn      *conn
	pre     []byte // body bytes that came with the head
	left    int64  // bytes still to read from the connection
	err     error  // the connection's read error, sticky
	closed  bool
	tooBig  bool      // closed or answered with more than maxPostHandlerReadBytes unread
	sawDone bool      // every byte of the body was read
	until   time.Time // the read deadline the last read armed
	// watch: the handler runs, so reading the body's last byte starts
	// the connection's watch (conn.arm), which may read the connection
	// only from then on; watched: it did. See conn.exchange.
	watch, watched bool
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (int, error) {
	if len(b.pre) > 0 {
		n := copy(p, b.pre)
		b.pre = b.pre[n:]
		return n, b.eof()
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		b.done()
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	// Each wait for the client's next bytes is bounded by IdleTimeout,
	// re-armed only when less than half of it is left: a timer update
	// per read would cost more than the bound is worth.
	if stall := b.cn.s.opts.IdleTimeout; stall > 0 {
		if now := time.Now(); b.until.Sub(now) < stall/2 {
			b.until = now.Add(stall)
			b.cn.setReadDeadline(b.until, false)
		}
	}
	n, err := b.cn.c.Read(p)
	b.left -= int64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the client promised more
		}
		b.err = err
		return n, err
	}
	return n, b.eof()
}

func (b *body) eof() error {
	if len(b.pre) == 0 && b.left == 0 {
		b.done()
		return io.EOF
	}
	return nil
}

// done marks the body read to its end. While the handler runs, the
// connection's watch starts then, as net/http's background read does at
// a body's EOF: a client that leaves after its body (a POST answered by
// a stream of events) cancels the request instead of holding the host's
// stream until the host writes.
func (b *body) done() {
	b.sawDone = true
	if b.watch && !b.watched {
		b.watched = true
		b.cn.arm()
	}
}

// setWatch starts (on) or ends the time in which the body's end arms the
// watch; ending it reports whether it did, for the caller to disarm. Under
// the body's lock, so that a read on a transport's goroutine after the
// handler returned never arms a watch nobody disarms.
func (b *body) setWatch(on bool) (watched bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watch = on
	return b.watched
}

// Close reads and drops what is left, up to maxPostHandlerReadBytes, so
// that the connection can go on (as net/http's server body does).
func (b *body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.discardLocked()
	return nil
}

// discardLocked reads the rest when it is small enough.
func (b *body) discardLocked() {
	if b.sawDone || b.err != nil {
		return
	}
	if int64(len(b.pre))+b.left > maxPostHandlerReadBytes {
		b.tooBig = true
		return
	}
	var buf [4 << 10]byte
	for {
		if _, err := b.readLocked(buf[:]); err != nil {
			return
		}
	}
}

// beforeResponse is net/http's rule when the response head is written:
// the unread rest of a small body is read and dropped (clients that send
// the whole request before reading could otherwise deadlock), and the
// connection is kept only if the body was read to its end.
func (b *body) beforeResponse() (keep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.discardLocked()
	return b.sawDone && !b.tooBig && b.err == nil
}

// end closes the body for good after the handler returned; any late read
// (a transport's goroutine) gets ErrBodyReadAfterClose and never touches
// the connection again. It reports whether the connection is at the next
// request.
func (b *body) end() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.sawDone && b.err == nil
}
