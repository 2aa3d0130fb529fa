package limit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/time/rate"
)

// NewRate returns a byte-rate limiter of bps bytes per second. Its burst is
// a tenth of a second's worth (at least 1 KiB, at most 64 KiB), so a stream
// runs at its rate from the first bytes instead of after a second-long burst.
func NewRate(bps int64) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(bps), burstFor(bps))
}

func burstFor(bps int64) int {
	b := bps / 10
	if b < 1024 {
		b = 1024
	}
	if b > 64<<10 {
		b = 64 << 10
	}
	return int(b)
}

// wait blocks until n bytes may pass, in slices no larger than the burst.
func wait(ctx context.Context, l *rate.Limiter, n int) error {
	for n > 0 {
		c, err := waitSlice(ctx, l, n)
		if err != nil {
			return err
		}
		n -= c
	}
	return nil
}

// waitSlice waits for the budget of the next slice of n bytes, at most a
// burst, and returns its size. A subject's requests share its limiter,
// and one whose claim changed the rate may lower the burst between the
// read of it and the reservation: the slice is then cut to the new
// burst, where WaitN would fail the transfer (its burst check and its
// reservation each read the burst anew).
func waitSlice(ctx context.Context, l *rate.Limiter, n int) (int, error) {
	for {
		c := min(n, l.Burst())
		r := l.ReserveN(time.Now(), c)
		if !r.OK() {
			continue // only c past the burst, lowered since it was read
		}
		d := r.Delay()
		if d == 0 {
			return c, nil
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
			return c, nil
		case <-ctx.Done():
			t.Stop()
			r.Cancel() // give the budget back to the subject's other requests
			return 0, ctx.Err()
		}
	}
}

// Reader slows reads from r to l's rate: each Read returns at most a burst
// of bytes and waits for them first. It never fails a read for being over
// the rate; it fails only when ctx ends.
type Reader struct {
	ctx context.Context
	r   io.ReadCloser
	l   *rate.Limiter
}

// NewReader returns r read at l's rate; ctx bounds the waiting.
func NewReader(ctx context.Context, r io.ReadCloser, l *rate.Limiter) *Reader {
	return &Reader{ctx: ctx, r: r, l: l}
}

func (r *Reader) Read(p []byte) (int, error) {
	if len(p) > r.l.Burst() {
		p = p[:r.l.Burst()]
	}
	n, err := r.r.Read(p)
	if n > 0 {
		if werr := wait(r.ctx, r.l, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

// Close closes the underlying reader.
func (r *Reader) Close() error { return r.r.Close() }

// Writer slows writes to w to l's rate, flushing each slice so the client
// receives a steady stream rather than bursts held in a buffer. It waits
// for the budget before writing, so a slow budget is backpressure on the
// producer, never a dropped byte.
type Writer struct {
	http.ResponseWriter
	ctx context.Context
	l   *rate.Limiter
	rc  *http.ResponseController
}

// NewWriter returns w written at l's rate; ctx bounds the waiting.
func NewWriter(ctx context.Context, w http.ResponseWriter, l *rate.Limiter) *Writer {
	return &Writer{ResponseWriter: w, ctx: ctx, l: l, rc: http.NewResponseController(w)}
}

func (w *Writer) Write(p []byte) (int, error) {
	return paced(w.ctx, w.l, p, w.ResponseWriter.Write, w.Flush)
}

// paced writes p through write at l's rate: in slices of at most a burst,
// each once its budget is there, then flush (nil: none).
func paced(ctx context.Context, l *rate.Limiter, p []byte, write func([]byte) (int, error), flush func()) (int, error) {
	done := 0
	for len(p) > 0 {
		c, err := waitSlice(ctx, l, len(p))
		if err != nil {
			return done, err
		}
		n, err := write(p[:c])
		done += n
		if err != nil {
			return done, err
		}
		if flush != nil {
			flush()
		}
		p = p[c:]
	}
	return done, nil
}

// Flush flushes the underlying writer.
func (w *Writer) Flush() { _ = w.rc.Flush() }

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijacker passes w through, except that a connection hijacked through it
// (the proxy hijacks for a protocol switch such as a WebSocket) comes back
// as a [Conn] at read's and write's rates: after the 101 the bytes no
// longer pass the limited request body and response writer, and the
// subject's budget must follow them.
type Hijacker struct {
	http.ResponseWriter
	ctx         context.Context
	read, write *rate.Limiter
}

// NewHijacker returns w whose hijacked connection reads at read's rate and
// writes at write's (nil: that direction is not limited); ctx bounds the
// waiting.
func NewHijacker(ctx context.Context, w http.ResponseWriter, read, write *rate.Limiter) *Hijacker {
	return &Hijacker{ResponseWriter: w, ctx: ctx, read: read, write: write}
}

// Hijack hijacks the underlying writer's connection and limits it. The
// returned ReadWriter is the server's own, over the raw connection: the
// proxy writes only the 101 head through it.
func (h *Hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &Conn{Conn: c, ctx: h.ctx, read: h.read, write: h.write}, brw, nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (h *Hijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// Conn is a connection whose reads and writes are slowed to their rates
// (nil: not limited), waiting for the budget before passing bytes on, as
// [Reader] and [Writer] do: backpressure, never a cut.
type Conn struct {
	net.Conn
	ctx         context.Context
	read, write *rate.Limiter
}

func (c *Conn) Read(p []byte) (int, error) {
	if c.read == nil {
		return c.Conn.Read(p)
	}
	return (&Reader{ctx: c.ctx, r: c.Conn, l: c.read}).Read(p) // does not escape: no allocation
}

func (c *Conn) Write(p []byte) (int, error) {
	if c.write == nil {
		return c.Conn.Write(p)
	}
	return paced(c.ctx, c.write, p, c.Conn.Write, nil)
}

// CloseWrite half-closes the connection when it can (a proxy passes a
// host's end of stream on this way and goes on copying the client's
// bytes), as the connection it wraps does: when that one cannot, the
// error says so and the proxy closes the whole connection as it would.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
