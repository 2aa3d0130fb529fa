package pipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrIdle is Join's error for a pipe that carried no byte either way for
// its idle timeout.
var ErrIdle = errors.New("pipe: idle timeout")

// Stats counts the bytes a pipe carried.
type Stats struct {
	// Up is client -> host, the prefix included; Down is host -> client.
	Up, Down int64
}

// Join pipes client and host until both directions are done, ctx ends, or
// either side fails, and returns what was copied. It first writes prefix
// (the peeked ClientHello) to host. Join owns both connections from the
// call on and closes both before it returns.
//
// For zero-copy, client and host must be the raw *net.TCPConn values: a
// wrapper (for metrics, or a replaying conn) hides ReadFrom and turns the
// splice into a user-space copy. The returned error is nil for a pipe that ended by
// EOF both ways, ctx.Err() when ctx ended it, ErrIdle when idle ended it,
// or the first copy error.
//
// idle > 0 closes a pipe that carried no byte either way for that long;
// the client's socket says when it last received or sent data (TCP_INFO),
// so the copies are spliced as they are and a check runs once per idle
// period. Where the socket cannot say (not Linux, or not a TCP socket),
// idle is not enforced.
func Join(ctx context.Context, client, host net.Conn, prefix []byte, idle time.Duration) (Stats, error) {
	return join(ctx, client, host, prefix, idle, parkAfter)
}

// parkAfter is how long a direction waits for bytes inside splice before
// it gives its kernel pipe back and waits without one (see copyHalf).
const parkAfter = 2 * time.Second

// join is Join with the park delay as a parameter (0: never park).
func join(ctx context.Context, client, host net.Conn, prefix []byte, idle, park time.Duration) (Stats, error) {
	var st Stats
	var (
		closeOnce sync.Once
		wg        sync.WaitGroup
		up, down  result
		ended     atomic.Int32 // directions that reached EOF
	)
	closeBoth := func() { closeOnce.Do(func() { client.Close(); host.Close() }) }
	stop := context.AfterFunc(ctx, closeBoth)
	var idled atomic.Bool
	if idle > 0 && canAsk(client) {
		var t *time.Timer
		t = time.AfterFunc(idle, func() {
			since, ok := sinceData(client)
			switch {
			case !ok:
				// Closed by the pipe's end, which is under way.
			case since >= idle:
				idled.Store(true)
				closeBoth()
			default:
				t.Reset(idle - since)
			}
		})
		defer t.Stop()
	}
	// The hello goes out under ctx and the idle bound too: a host that
	// never reads, with a full receive window, would otherwise hold the
	// write, the client and the drain for ever.
	if len(prefix) > 0 {
		n, err := host.Write(prefix)
		st.Up += int64(n)
		if err != nil {
			stop()
			closeBoth()
			if cerr := ctx.Err(); cerr != nil {
				return st, cerr
			}
			if idled.Load() {
				return st, ErrIdle
			}
			return st, fmt.Errorf("pipe: write hello: %w", err)
		}
	}
	// The answer's direction runs on the caller's goroutine, whose stack
	// has already grown: a third goroutine would grow its own, and the
	// caller would park in Wait and be woken, on every connection.
	wg.Add(2)
	go copyHalf(&wg, &up, host, client, &ended, closeBoth, park)
	copyHalf(&wg, &down, client, host, &ended, closeBoth, park)
	wg.Wait()
	stop()
	closeBoth()
	st.Up += up.n
	st.Down += down.n
	if err := ctx.Err(); err != nil {
		return st, err
	}
	if idled.Load() {
		return st, ErrIdle
	}
	return st, errors.Join(up.err, down.err)
}

type result struct {
	n   int64
	err error
}

// copyHalf copies src to dst. On EOF it half-closes dst so the peer sees
// the end of the stream while the other direction carries on; on any error
// it closes both sides, which unblocks the other direction at once. The
// second direction to reach EOF closes both instead of half-closing: the
// close sends dst its FIN as the shutdown would, one system call fewer
// on every passthrough connection that ends cleanly.
//
// Go's splice holds a kernel pipe (two descriptors) for as long as it
// waits for src, so an idle pipe would hold six descriptors, not two.
// With park > 0 a direction that has waited that long for a byte gives
// its kernel pipe back and waits for the next byte without one; an active
// direction only starts a new splice once per park.
func copyHalf(wg *sync.WaitGroup, r *result, dst, src net.Conn, ended *atomic.Int32, closeBoth func(), park time.Duration) {
	defer wg.Done()
	if park > 0 && !canPark(src) {
		park = 0
	}
	for {
		if park > 0 {
			_ = src.SetReadDeadline(time.Now().Add(park))
		}
		n, err := io.Copy(dst, src) // *net.TCPConn.ReadFrom: splice on Linux
		r.n += n
		r.err = err
		if park == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if n == 0 {
			// Quiet for a whole park: wait for the next byte with no
			// kernel pipe held (and no deadline: the idle timeout and
			// the pipe's end close src).
			_ = src.SetReadDeadline(time.Time{})
			if r.err = waitReadable(src); r.err != nil {
				break
			}
		}
	}
	if r.err != nil {
		if errors.Is(r.err, net.ErrClosed) {
			r.err = nil // closed by the other direction or by ctx
		}
		closeBoth()
		return
	}
	if ended.Add(1) == 2 {
		closeBoth()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	closeBoth() // cannot half-close: end the whole pipe
}
