package lane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/deadline"
	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/workers"
)

// Options configure a Server. Handler and Handoff are required.
type Options struct {
	// Handler serves the requests the lane takes.
	Handler http.Handler
	// Handoff receives a connection at the first request the lane does
	// not take, with the bytes already read put back in front of it. It
	// owns the connection from then on (net/http's Serve, in practice).
	Handoff func(net.Conn)
	// Server is what the request's context carries under
	// http.ServerContextKey (code below uses it to tell a server's
	// request from a test's). Optional.
	Server *http.Server
	// OnHandoff, when set, is told why each handed-over connection left
	// (one of the reason* constants: a metric label). Optional.
	OnHandoff func(reason string)
	// RequestContext, when set, returns the context a request is served
	// with, made from the connection's (which Close cancels, and which
	// carries net/http's server values and httpwire's mark). A handler
	// that would give each request a context of its own with
	// Request.WithContext, a copy of the whole Request, makes it here
	// instead: the lane's one copy of the Request carries it. Optional.
	RequestContext func(conn context.Context) context.Context
	// RequestDone, when set, is given back each context RequestContext
	// made once the lane no longer uses it: the handler has returned and
	// the answer is written to the connection's buffer. The maker may
	// then reuse it. Not called after a handler panicked or once the
	// client is gone. Optional.
	RequestDone func(ctx context.Context)
	// ReadHeaderTimeout bounds reading a request head, from its first
	// byte (for a new connection, from the start). Zero: none.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection, and each wait for a request body's next bytes (a
	// client that stalls its upload would otherwise hold the handler,
	// and the host behind it, for ever). Zero: ReadHeaderTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes is the largest head the lane reads itself (capped at
	// 4 KiB); a larger one goes to net/http with its own limits.
	MaxHeaderBytes int
	Logger         *slog.Logger
}

// maxHead caps the lane's read buffer: a head beyond it is rare enough to
// leave to net/http, and the buffer is held by every open connection.
const maxHead = 4 << 10

// Server serves connections given to ServeConn. Safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger
	size int // read buffer size

	draining atomic.Bool
	mu       sync.Mutex
	conns    map[*conn]struct{}
	zero     chan struct{} // closed while no connection is served
	date     httpwire.Date
	// clock times the per-request deadlines and the idle wait: time.Now
	// would read the wall clock too, for twice the cost (deadline.Clock).
	clock   deadline.Clock
	pool    sync.Pool // *exchange
	bufs    sync.Pool // *[idleBuf]byte
	replies sync.Pool // *[replySize]byte, see holder
	joins   sync.Pool // *[joinSize]byte, see out
	parker  *parker
	wg      sync.WaitGroup // goroutines that took over an idle connection
	closed  bool           // Close was called (under mu): no more of them
	// resumers serve connections the parker wakes: a reused goroutine
	// has grown its stack through the handler chain already, where a
	// fresh one would grow it again for every request after an idle
	// spell (see warmFor). Owned by wg; Close stops them.
	resumers *workers.Pool[*conn]
}

// New validates o. It starts nothing; the first connection to fall idle
// starts the goroutine that watches idle connections, which Close ends.
func New(o Options) (*Server, error) {
	if o.Handler == nil || o.Handoff == nil {
		return nil, errors.New("lane: Handler and Handoff are required")
	}
	if o.ReadHeaderTimeout < 0 || o.IdleTimeout < 0 || o.MaxHeaderBytes < 0 {
		return nil, errors.New("lane: timeouts and MaxHeaderBytes must not be negative")
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = o.ReadHeaderTimeout
	}
	if o.Server == nil {
		o.Server = &http.Server{} // the context always carries one, as net/http's does
	}
	s := &Server{opts: o, log: o.Logger, size: maxHead, clock: deadline.NewClock(), conns: map[*conn]struct{}{}, zero: make(chan struct{})}
	s.joins.New = func() any { return new([joinSize]byte) }
	close(s.zero)
	s.parker = newParker(s)
	s.resumers = workers.New(&s.wg, workers.DefaultMaxIdle, workers.DefaultIdleFor, func(cn *conn) {
		cn.acquireBuf()
		cn.run(false)
	})
	if o.MaxHeaderBytes > 0 && o.MaxHeaderBytes < s.size {
		s.size = o.MaxHeaderBytes
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Connection states, for drain: an idle connection waits for a request
// and is closed at once; an active one finishes its request first.
const (
	stateActive int32 = iota
	stateIdle
)

type conn struct {
	s      *Server
	c      net.Conn
	remote string
	tls    *tls.ConnectionState // nil: plaintext
	ctx    context.Context      // the requests' context: canceled by Close
	cancel context.CancelFunc
	state  atomic.Int32

	// buf[:n] holds bytes read and not yet served. It is small while the
	// connection waits (an idle connection holds no more than this) and
	// the exchange's larger buffer when a head outgrows it.
	buf   []byte
	n     int
	small *[idleBuf]byte // pooled: a parked connection holds none
	// registered says the socket is in the parker's epoll set.
	registered bool
	deadline   time.Time // the read deadline last set
	// idleDeadline says deadline bounds no head begun: it ends a wait for
	// the next request (idle or warm), or was the last request's when the
	// next is pipelined. That head gets ReadHeaderTimeout from its next
	// read instead.
	idleDeadline bool
	// idleSince is when the connection last fell idle: the idle timeout
	// counts from it across the warm wait and the fresh goroutine's.
	idleSince time.Time
	// waited says the idle period's warm wait is over: the connection
	// waits on in the parker (or, when it cannot be parked, on a goroutine
	// for the rest of the idle timeout).
	waited bool
	// waiter says the goroutine serving the connection was started only
	// to wait (goOn): its stack is small. Once the next request's first
	// bytes are in, a reused goroutine (s.resumers) serves it instead of
	// this one growing its stack through the handler chain.
	waiter bool
	served int // requests the lane served on the connection
	// blanks is how many CR or LF bytes may still be skipped before the
	// next request line: 4 after a POST, as net/http skips them (RFC 9112
	// §2.2: some clients end a POST's body with a CRLF), else 0.
	blanks int

	// The last of a response, held for the next wait's Read to write
	// (see holder): reply is the buffer the connection keeps it in while
	// held. pipelines says the client has sent a request before it had
	// the answer to the one before, so none is held for it again.
	h         holder
	reply     *[replySize]byte
	held      bool
	pipelines bool
	x         *exchange // while a request is read and served; nil idle

	// The watch: a bodiless request still running after watchDelay gets a
	// background read, so that a client that leaves cancels it (as
	// net/http's server does for every request; most end long before).
	// Its timer is not reset per request (see internal/deadline).
	watch   *deadline.Timer
	wmu     sync.Mutex
	armed   bool          // a request is running; the watch may read
	reading chan struct{} // closed when the background read returned; nil: none started
	wbuf    [1]byte
	wgot    bool // the background read got the next request's first byte
	wgone   bool // the client left: the connection ends after this request
}

// watchDelay is how long a request runs before the lane starts watching
// its client.
const watchDelay = 500 * time.Millisecond

// arm starts the watch for a request.
func (cn *conn) arm() {
	cn.wmu.Lock()
	cn.armed, cn.reading, cn.wgot, cn.wgone = true, nil, false, false
	cn.wmu.Unlock()
	if cn.watch == nil {
		cn.watch = deadline.New(cn.backgroundRead)
	}
	cn.watch.Start(watchDelay)
}

// disarm ends the watch after the handler returned: a background read in
// progress is interrupted (a deadline in the past) and waited for.
func (cn *conn) disarm() {
	cn.watch.End()
	cn.wmu.Lock()
	cn.armed = false
	reading := cn.reading
	cn.wmu.Unlock()
	if reading != nil {
		_ = cn.c.SetReadDeadline(aLongTimeAgo)
		<-reading
		cn.setReadDeadline(time.Time{}, false)
	}
}

// backgroundRead runs when a request has run for watchDelay: it reads one
// byte while the handler runs. A byte is the next request's (kept); an
// error other than disarm's deadline means the client left: the requests'
// context is canceled, which aborts the host's request.
func (cn *conn) backgroundRead() {
	cn.wmu.Lock()
	if !cn.armed || cn.reading != nil {
		cn.wmu.Unlock()
		return
	}
	done := make(chan struct{})
	cn.reading = done
	// Under the lock, so that disarm's deadline (set after it takes the
	// lock) always comes after this one.
	_ = cn.c.SetReadDeadline(time.Time{})
	cn.wmu.Unlock()
	defer close(done)
	n, err := cn.c.Read(cn.wbuf[:])
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	switch {
	case n == 1:
		cn.wgot = true
	case err != nil && (cn.armed || !isTimeout(err)):
		cn.wgone = true
		cn.cancel()
	}
}

// idleBuf is the read buffer an idle connection holds: most heads fit.
const idleBuf = 1 << 10

// exchange is the memory a request needs while it is read and served,
// pooled across connections so that idle ones do not hold it.
type exchange struct {
	bw   *out
	hdr  http.Header // the request's header map
	vals [32]string  // backing for one-value header slices
	w    writer
	h    head
	big  [maxHead]byte
	// req is the Request the handler gets. Like hdr and h's URL it is
	// the lane's again once the handler has returned: a handler must not
	// keep a request (http.Handler says the same of its body and writer).
	req http.Request
}

func (s *Server) getExchange(cn *conn) *exchange {
	x, _ := s.pool.Get().(*exchange)
	if x == nil {
		x = &exchange{hdr: make(http.Header, 8)}
		x.w.hdr = make(http.Header, 16)
		x.bw = newOut(cn.c, &s.joins)
	} else {
		x.bw.Reset(cn.c)
	}
	x.w.cn, x.w.bw = cn, x.bw
	return x
}

func (s *Server) putExchange(x *exchange) {
	x.bw.Reset(nil)
	clear(x.hdr)
	clear(x.vals[:x.h.nv]) // only what the head used: the rest is clear
	x.w.reset(false, false)
	x.w.cn = nil
	x.h = head{u: x.h.u}
	x.req = http.Request{} // nor the request's context and body
	s.pool.Put(x)
}

// ServeConn serves c until the client closes it, a timeout or drain ends
// it, or it is handed off. It blocks; run it on the connection's own
// goroutine. The Server owns c from the call on.
func (s *Server) ServeConn(c net.Conn) {
	cn := &conn{s: s, c: c, remote: c.RemoteAddr().String()}
	cn.h = holderOf(c)
	cn.acquireBuf()
	if cs, ok := c.(connectionStater); ok {
		st := cs.ConnectionState() // the handshake is done: the caller's job
		cn.tls = &st
	}
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, c.LocalAddr())
	ctx = context.WithValue(ctx, http.ServerContextKey, s.opts.Server)
	// parse takes only heads whose fields hygiene would pass: the mark
	// spares it the second look.
	cn.ctx, cn.cancel = context.WithCancel(httpwire.MarkChecked(ctx))
	if !s.add(cn) {
		cn.cancel()
		_ = c.Close()
		return
	}
	cn.run(true)
}

// run serves the connection. The handler grows a goroutine's stack to what
// the whole chain needs, and an idle keep-alive connection should not hold
// that (most of its memory otherwise): after a connection's first request
// run returns and the wait goes on on a fresh goroutine; after a later one
// the serving goroutine waits warmFor itself first. Either way, a
// connection still idle after warmFor goes to the parker, which holds it
// with no goroutine, or where it cannot (TLS), to a fresh goroutine. A
// fresh goroutine only waits: when the next request comes (to it or to
// the parker), a reused goroutine (s.resumers), whose stack has grown
// already, serves it. The Server owns those goroutines (s.wg).
func (cn *conn) run(first bool) {
	s := cn.s
	handed, idle, moved := cn.serve(first)
	cn.waiter = false // whatever serves the connection next is another goroutine
	if moved {
		s.resume(cn)
		return
	}
	if idle {
		if !s.parker.can(cn) {
			cn.waited = true // no warm wait on the fresh goroutine: it waits it all
		}
		if cn.waited && s.parker.park(cn) {
			return
		}
		if s.goOn(cn) {
			return
		}
		_ = cn.c.Close()
	}
	cn.finish(handed)
}

// goOn serves cn on a fresh goroutine, unless Close has begun.
func (s *Server) goOn(cn *conn) bool {
	// Under the lock, so that no Add comes after Close's Wait began.
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closed {
		return false
	}
	go func() {
		defer s.wg.Done()
		cn.acquireBuf()
		cn.waiter = true
		cn.run(false)
	}()
	return true
}

// resume serves a connection whose next request came (to the parker, or
// to the goroutine that waited for it) on a reused goroutine, unless
// Close has begun.
func (s *Server) resume(cn *conn) {
	// Under the lock, as goOn: Go may start a goroutine (wg.Add), which
	// must not come after Close's Wait began.
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.resumers.Go(cn)
	}
	s.mu.Unlock()
	if closed {
		cn.end()
	}
}

// end closes an idle connection nobody serves.
func (cn *conn) end() {
	_ = cn.c.Close()
	cn.finish(nil)
}

// finish lets go of a connection that is closed or handed off.
func (cn *conn) finish(handed net.Conn) {
	s := cn.s
	cn.endReply()
	if cn.x != nil {
		s.putExchange(cn.x)
		cn.x = nil
	}
	cn.releaseBuf()
	cn.cancel()
	if cn.watch != nil {
		cn.watch.Stop()
	}
	s.remove(cn)
	if handed != nil {
		s.opts.Handoff(handed)
	}
}

// acquireBuf gives the connection its small read buffer, if it has none.
func (cn *conn) acquireBuf() {
	if cn.small == nil {
		b, _ := cn.s.bufs.Get().(*[idleBuf]byte)
		if b == nil {
			b = new([idleBuf]byte)
		}
		cn.small = b
	}
	cn.buf = cn.small[:min(idleBuf, cn.s.size)]
}

// releaseBuf pools the small read buffer; nothing in it is unserved.
func (cn *conn) releaseBuf() {
	if cn.small != nil {
		cn.s.bufs.Put(cn.small)
		cn.small = nil
	}
	cn.buf = nil
}

func (s *Server) add(cn *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	if len(s.conns) == 0 {
		s.zero = make(chan struct{})
	}
	s.conns[cn] = struct{}{}
	return true
}

func (s *Server) remove(cn *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, cn)
	if len(s.conns) == 0 {
		close(s.zero)
	}
}

// Shutdown stops taking requests: idle connections are closed now, active
// ones after their response (which says Connection: close). It returns
// when none is left, or with ctx's error; Close then cuts the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.parker.closeAll(false)
	s.mu.Lock()
	for cn := range s.conns {
		if cn.state.Load() == stateIdle {
			_ = cn.c.SetReadDeadline(aLongTimeAgo) // wakes the read; the loop sees draining
		}
	}
	zero := s.zero
	s.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes every connection the lane still serves, cancels the
// context of the requests in flight on them, and waits for the goroutines
// the lane started.
func (s *Server) Close() error {
	s.draining.Store(true)
	s.mu.Lock()
	s.closed = true
	for cn := range s.conns {
		// Closed before canceled: a handler that ends when its context
		// does must find the connection gone, not answer a cut request.
		_ = cn.c.Close()
		cn.cancel()
	}
	s.mu.Unlock()
	s.parker.closeAll(true)
	s.resumers.Stop() // after closed is set: no Go follows
	s.wg.Wait()       // the goroutines that took over idle connections end with them
	return nil
}

var aLongTimeAgo = time.Unix(1, 0)

// serve is the connection's loop. It returns the connection to hand off,
// or nil when it closed it; or idle when a request is done and nothing of
// the next has arrived yet; or moved when a waiter's wait is over and
// the request that ended it is to be served on a reused goroutine.
func (cn *conn) serve(first bool) (handed net.Conn, idle, moved bool) {
	s := cn.s
	for {
		if !first && cn.n == 0 && !cn.waited {
			// A wait for the next request starts warm (on the serving
			// goroutine, or on a fresh one after the first request): a
			// client that comes back soon is served from the netpoller,
			// and only a connection idle past warmFor goes to the parker,
			// whose wake-up (system calls, a new goroutine) costs more.
			got, ok := cn.waitWarm()
			if !ok {
				_ = cn.c.Close()
				return nil, false, false
			}
			if !got {
				cn.waited = true
				return nil, true, false
			}
		}
		if !cn.readHead(first) {
			_ = cn.c.Close()
			return nil, false, false
		}
		if cn.waiter {
			return nil, false, true // run clears the mark
		}
		if cn.blanks > 0 && !cn.skipBlanks() {
			// Only blank-line bytes so far: wait for the request, back
			// in the parker if the idle wait was there (else this
			// goroutine, grown or reused, would hold the connection
			// for the rest of IdleTimeout).
			if cn.waited {
				return nil, true, false
			}
			continue
		}
		if strings.IndexByte("GHPDO", cn.buf[0]) < 0 {
			// None of the lane's methods begins so: net/http's, at once,
			// rather than after a wait for a line end that a TLS hello
			// sent to the plaintext port, say, may never bring.
			return cn.handoff(reasonMethod), false, false
		}
		if cn.x == nil {
			cn.x = s.getExchange(cn)
		}
		x := cn.x
		end := headEnd(cn.buf[:cn.n], 0)
		for end == 0 {
			if cn.n == len(cn.buf) {
				if len(cn.buf) == s.size {
					return cn.handoff(reasonSize), false, false
				}
				cn.buf = x.big[:s.size] // the head outgrew the idle buffer
				copy(cn.buf, cn.small[:cn.n])
			}
			if !cn.read(s.opts.ReadHeaderTimeout) {
				_ = cn.c.Close()
				return nil, false, false
			}
			end = headEnd(cn.buf[:cn.n], 0)
		}
		if end < 0 {
			return cn.handoff(reasonLineEnding), false, false
		}
		if why := parse(string(cn.buf[:end]), &x.h, x.hdr, x.vals[:]); why != "" {
			return cn.handoff(why), false, false
		}
		if x.h.target == "*" && !s.opts.Server.DisableGeneralOptionsHandler {
			// net/http answers "OPTIONS *" itself unless told not to;
			// then its handler gets it, and so does the lane's.
			return cn.handoff(reasonTarget), false, false
		}
		first = false
		var b *body
		take := 0
		if x.h.length > 0 {
			take = int(min(int64(cn.n-end), x.h.length))
			b = &body{cn: cn, pre: cn.buf[end : end+take], left: x.h.length - int64(take)}
			// The head is in; the body's reads arm their own stall bound
			// (body.readLocked).
			cn.setReadDeadline(time.Time{}, false)
		}
		if !cn.exchange(x, b) {
			if b != nil && !b.end() {
				cn.lingerClose()
			}
			_ = cn.c.Close()
			return nil, false, false
		}
		if x.h.method == http.MethodPost {
			cn.blanks = 4
		}
		rest := cn.buf[end+take : cn.n] // a pipelined request stays
		extra := 0
		if cn.wgot {
			extra = 1 // and the byte the watch read after it
		}
		if len(rest)+extra <= min(idleBuf, s.size) {
			cn.n = copy(cn.small[:], rest)
			cn.buf = cn.small[:min(idleBuf, s.size)]
			s.putExchange(x)
			cn.x = nil
		} else {
			cn.n = copy(cn.buf, rest)
		}
		if cn.wgot {
			cn.buf[cn.n] = cn.wbuf[0]
			cn.n++
			cn.wgot = false
		}
		if cn.blanks > 0 && cn.n > 0 {
			// A CRLF sent with a POST's body is no pipelined request:
			// with nothing after it, the connection is idle from now.
			cn.skipBlanks()
		}
		if cn.n > 0 {
			cn.pipelines = true // the next request came before its answer went
			// The deadline is the last head's (or its body's), perhaps
			// past after a long handler: the next head's own bound starts
			// at its next read, as net/http's starts at each request.
			cn.idleDeadline = true
		}
		// The held answer rides on the warm wait's Read; anything else
		// comes first (a pipelined request, the first request's wait on
		// a fresh goroutine, the drain), so it goes now.
		if cn.held && (cn.n > 0 || cn.served == 0 || s.draining.Load()) && !cn.endReply() {
			_ = cn.c.Close()
			return nil, false, false
		}
		if s.draining.Load() {
			_ = cn.c.Close()
			return nil, false, false
		}
		cn.served++
		if cn.n > 0 {
			continue // pipelined
		}
		cn.idleSince, cn.waited = s.clock.Now(), false
		if cn.served == 1 {
			return nil, true, false // the wait goes on on a fresh goroutine (a small stack)
		}
	}
}

// warmFor is how long the goroutine of a connection in use waits for the
// next request itself before a fresh goroutine takes the wait over.
// Serving grew its stack to what the handler chain needs; a fresh
// goroutine would grow one again for the next request, a copy per
// doubling (a tenth of the CPU of a small proxied request), while on a
// connection the client has come back to (its second request or later) the
// next request most often comes soon: a page's assets, a pool's reuse. A
// connection's first wait is never warm, so that a crowd of one-request
// connections does not hold a crowd of large stacks; a warm one holds its
// stack for at most warmFor.
const warmFor = 250 * time.Millisecond

// waitWarm waits up to warmFor for the next request's first bytes. It
// reports got when they came, and !ok when the connection is to close:
// the client left, drain began, or the idle timeout (shorter than
// warmFor) ran out.
func (cn *conn) waitWarm() (got, ok bool) {
	now := cn.idleSince
	wait := warmFor
	last := false // this wait is the whole idle timeout
	if t := cn.s.opts.IdleTimeout; t > 0 && t <= wait {
		wait, last = t, true
	}
	// One timer operation per slack on a busy connection, not one per
	// request: the deadline moves only when it is due within wait-slack,
	// or is not this wait's. The end of a warm wait is nobody's timeout;
	// an idle timeout is kept to within a tenth.
	slack := wait / 2
	if last {
		slack = wait / 10
	}
	until := now.Add(wait)
	if !cn.idleDeadline || cn.deadline.IsZero() || cn.deadline.After(until) || cn.deadline.Before(until.Add(-slack)) {
		cn.setReadDeadline(until, true)
	}
	cn.state.Store(stateIdle)
	if cn.s.draining.Load() {
		cn.endReply()
		return false, false
	}
	// Not when this wait is the whole idle timeout: a request whose
	// readiness the Read missed would find the connection closed, not
	// the parker.
	replied := cn.held && !last
	if cn.held && last && !cn.endReply() {
		return false, false
	}
	k, err := cn.c.Read(cn.buf)
	if replied && !cn.endReply() {
		// A layer above answered the Read from what it had buffered, and
		// the reply, written now, failed.
		return false, false
	}
	cn.state.Store(stateActive)
	cn.n = k
	switch {
	case k > 0:
		return true, true
	case isWrite(err):
		// The answer's write failed or stalled: the client is gone or
		// does not read.
	case replied && isTimeout(err) && cn.s.draining.Load():
		// The drain woke the wait, and a request sent before its answer
		// may be there unseen (the replying Read forgot readiness from
		// before it). It came before the drain, so it is served (its
		// answer says Connection: close) rather than cut with a reset:
		// one more read, which tries before it waits, briefly.
		cn.setReadDeadline(time.Now().Add(lookFor), true)
		if k, _ := cn.c.Read(cn.buf); k > 0 {
			cn.n = k
			return true, true
		}
	case isTimeout(err) && !last && !cn.s.draining.Load():
		if replied {
			// Either a slow client, or a request sent before its answer
			// whose readiness the Read missed: the parker finds it, and
			// the connection replies no more.
			cn.pipelines = true
		}
		return false, true
	}
	if err != nil && !errors.Is(err, io.EOF) && !isTimeout(err) {
		cn.s.log.Debug("lane: read", "remote", cn.remote, "err", err)
	}
	return false, false
}

// holder is a connection that can keep what is written to it and have
// its next Read write it first, then wait for readiness without first
// trying to read (sock.Conn's Hold; the edge's counted connection and
// sni.Conn pass it on; for TLS, the connection under crypto/tls, which
// writes its records through it). The lane holds the last of a response
// that way. Without it every wait for a next request begins with a read
// that finds nothing (EAGAIN: the client sends its next request only
// after it has the answer), one system call per request for nothing.
// Release writes what the Read did not (crypto/tls may answer a read
// from what it buffered, without reading the connection).
//
// The Read forgets readiness that came before it began, so a request the
// client sent before it had the answer (pipelining) can be missed: it is
// then found when the warm wait ends and the parker looks (level, not
// edge), or, for TLS, the goroutine that waits on reads again. To keep
// that a one-off, a connection that has pipelined once, or whose warm
// wait after a reply ran out, gets no replies again.
type holder interface {
	Hold(buf []byte) bool
	Unhold()
	Release() error
}

// lookFor bounds a read for bytes that, if sent in time, are there
// already: the read a drain makes on a connection whose replying wait it
// woke (see waitWarm), and a wait for the next request whose end passed
// before its read began (see readHead).
const lookFor = 50 * time.Millisecond

// replySize is the reply buffer: the out buffer's worth, and room for a
// TLS record's overhead.
const replySize = outSize + 256

func holderOf(c net.Conn) holder {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	h, _ := c.(holder)
	return h
}

// hold starts keeping what the connection is written for the next wait's
// Read, if it can.
func (cn *conn) hold() bool {
	// Not for the first request: the wait for its next one is a fresh
	// goroutine's, and the answer goes before that starts.
	if cn.h == nil || cn.served == 0 || cn.pipelines || cn.s.draining.Load() {
		return false
	}
	b, _ := cn.s.replies.Get().(*[replySize]byte)
	if b == nil {
		b = new([replySize]byte)
	}
	if !cn.h.Hold(b[:]) {
		cn.s.replies.Put(b)
		return false
	}
	cn.reply, cn.held = b, true
	return true
}

// endReply ends a held reply: what no Read wrote is written now, and the
// buffer is the lane's again. It reports false when that write failed.
func (cn *conn) endReply() bool {
	if !cn.held {
		return true
	}
	err := cn.h.Release()
	cn.s.replies.Put(cn.reply)
	cn.reply, cn.held = nil, false
	return err == nil
}

// isWrite reports an error from writing: a reply's write, made by a Read.
func isWrite(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

// readHead waits for the first bytes of the next request (there may be
// some already). It reports false when the connection is to be closed:
// the client left, the wait timed out, or drain began while idle.
func (cn *conn) readHead(first bool) bool {
	if cn.n > 0 {
		return true
	}
	if cn.held && !cn.endReply() {
		return false
	}
	timeout := cn.s.opts.IdleTimeout
	if first {
		timeout = cn.s.opts.ReadHeaderTimeout
	} else if timeout > 0 {
		// The warm wait counts. What is left may be over before the read
		// begins though the request came in time: the parker woke the
		// connection for it, and the goroutine that reads ran late. A
		// deadline already past fails a read without a try, so the read
		// gets lookFor: what came in time is there, and its head then has
		// ReadHeaderTimeout (see read). net/http's idle wait is a Peek(4):
		// it asks four bytes in time where the lane asks one, then gives
		// the head ReadHeaderTimeout as the lane does.
		timeout = max(timeout-time.Since(cn.idleSince), lookFor)
	}
	cn.setDeadline(timeout, !first)
	cn.state.Store(stateIdle)
	if cn.s.draining.Load() {
		return false
	}
	k, err := cn.c.Read(cn.buf)
	cn.state.Store(stateActive)
	cn.n = k
	if k == 0 {
		if err != nil && !errors.Is(err, io.EOF) && !isTimeout(err) {
			cn.s.log.Debug("lane: read", "remote", cn.remote, "err", err)
		}
		return false
	}
	return true
}

// skipBlanks drops the CR and LF bytes at the start of the buffer that
// cn.blanks still allows (net/http's rule after a POST: up to four, then
// a request line) and reports whether any byte is left to read a head
// from. The first other byte ends the allowance.
func (cn *conn) skipBlanks() bool {
	k := 0
	for k < cn.n && k < cn.blanks && (cn.buf[k] == '\r' || cn.buf[k] == '\n') {
		k++
	}
	if k < cn.n {
		cn.blanks = 0
	} else {
		cn.blanks -= k
	}
	cn.n = copy(cn.buf, cn.buf[k:cn.n])
	return cn.n > 0
}

// read reads more of a head begun, within timeout of now. The head of a
// request that began during a wait for the next request (idle or warm), or
// was only begun in what the lane read with the one before (pipelined), is
// bounded by timeout from here, not by the end of that wait nor by the
// last head's deadline: net/http arms ReadHeaderTimeout when its idle
// wait's Peek(4) returns, which for a pipelined head is at once.
func (cn *conn) read(timeout time.Duration) bool {
	switch {
	case cn.idleDeadline:
		var d time.Time
		if timeout > 0 {
			d = cn.s.clock.Now().Add(timeout)
		}
		cn.setReadDeadline(d, false)
	case timeout > 0:
		d := cn.s.clock.Now().Add(timeout)
		if cn.deadline.IsZero() || d.Before(cn.deadline) {
			cn.setReadDeadline(d, false)
		}
	}
	k, err := cn.c.Read(cn.buf[cn.n:])
	cn.n += k
	return k > 0 || err == nil
}

// setDeadline arms the read deadline timeout from now; idle says it bounds
// a wait for a next request's first byte. A deadline is a timer operation,
// so one of the same kind that would move later by less than a second is
// left: the wait may end up to a second early, never late. One due within
// lookFor is moved all the same, so that the read that follows gets at
// least that long to begin.
func (cn *conn) setDeadline(timeout time.Duration, idle bool) {
	if timeout <= 0 {
		if !cn.deadline.IsZero() || cn.idleDeadline != idle {
			cn.setReadDeadline(time.Time{}, idle)
		}
		return
	}
	now := cn.s.clock.Now()
	d := now.Add(timeout)
	if cn.idleDeadline != idle || cn.deadline.IsZero() || d.Sub(cn.deadline) > time.Second || d.Before(cn.deadline) || cn.deadline.Sub(now) < lookFor {
		cn.setReadDeadline(d, idle)
	}
}

// setReadDeadline sets the connection's read deadline to d; idle says it
// ends a wait for the next request, which bounds no head.
func (cn *conn) setReadDeadline(d time.Time, idle bool) {
	cn.deadline, cn.idleDeadline = d, idle
	_ = cn.c.SetReadDeadline(d)
}

// handoff gives the connection, with what was read, to the next server.
func (cn *conn) handoff(reason string) net.Conn {
	if f := cn.s.opts.OnHandoff; f != nil {
		f(reason)
	}
	_ = cn.c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: cn.c}
	if cn.n > 0 {
		pc.pre = append([]byte(nil), cn.buf[:cn.n]...)
	}
	return pc
}

// exchange serves one parsed request. It reports whether the connection
// may carry another.
func (cn *conn) exchange(x *exchange, b *body) (keep bool) {
	h := &x.h
	// The request as parsed, without its context, on the stack: the
	// handler gets WithContext's copy (net/http's Request takes a context
	// no other way), made in x's room: inlined, the copy does not escape,
	// and no Request is allocated per request.
	req := http.Request{
		Method:     h.method,
		URL:        h.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     x.hdr,
		Body:       http.NoBody,
		Host:       h.host,
		RemoteAddr: cn.remote,
		RequestURI: h.target,
		Close:      h.close,
		TLS:        cn.tls,
	}
	if b != nil {
		req.Body, req.ContentLength = b, h.length
	}
	ctx := cn.ctx
	if f := cn.s.opts.RequestContext; f != nil {
		ctx = f(ctx)
	}
	x.req = *req.WithContext(ctx)
	r := &x.req
	w := &x.w
	w.reset(h.method == http.MethodHead, h.close || cn.s.draining.Load())
	w.body = b
	// With a body the handler reads the connection itself: the watch
	// starts only once the body has been read to its end (body.done).
	if b == nil {
		cn.arm()
	} else {
		b.setWatch(true)
	}
	ok := cn.call(w, r)
	if b == nil || b.setWatch(false) {
		cn.disarm()
	}
	if !ok || cn.wgone {
		return false
	}
	w.finish()
	if f := cn.s.opts.RequestDone; f != nil {
		f(ctx)
	}
	holding := b == nil && w.err == nil && !w.closeAfter && x.bw.Buffered() > 0 && cn.hold()
	err := x.bw.Flush()
	if holding {
		cn.h.Unhold()
	}
	if err != nil {
		return false
	}
	if b != nil && w.duplex {
		// What the head left to the handler, as net/http's server does
		// after a full-duplex handler: with the answer out, for a client
		// that sends the rest only once it has it.
		_ = b.Close()
	}
	if b != nil && !b.end() {
		return false // the rest of the body is still on the wire
	}
	return w.err == nil && !w.closeAfter
}

// call runs the handler. A panic closes the connection with nothing more
// written, as net/http does; http.ErrAbortHandler quietly.
func (cn *conn) call(w *writer, r *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				cn.s.log.Error("lane: panic serving request", "remote", cn.remote, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			w.bw.Reset(cn.c) // what the handler had not flushed: net/http drops it too
			ok = false
		}
	}()
	cn.s.opts.Handler.ServeHTTP(w, r)
	return true
}

// lingerClose half-closes and reads what the client still sends, for at
// most half a second, before the close: closing with unread bytes makes
// the kernel send a reset that can destroy the response in flight
// (net/http's closeWriteAndWait).
func (cn *conn) lingerClose() {
	cw, ok := cn.c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = cn.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.CopyN(io.Discard, cn.c, maxPostHandlerReadBytes)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// prefixConn is a connection whose first reads return pre.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// ConnectionState reports the TLS state of a TLS connection (the zero
// state otherwise), so the server it is handed to can still fill r.TLS.
func (c *prefixConn) ConnectionState() tls.ConnectionState {
	if cs, ok := c.Conn.(connectionStater); ok {
		return cs.ConnectionState()
	}
	return tls.ConnectionState{}
}

type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

// CloseWrite lets net/http half-close before closing, when the
// connection underneath can.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
