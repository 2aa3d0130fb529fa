package edge

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/deadline"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// tracker counts open client connections (the active_connections gauge
// and the drain signal) and remembers the wrapped ones, so the end of
// drain can close what is left, hijacked connections included.
type tracker struct {
	gauge Gauge
	// max caps the open connections; zero: no cap. over is told of each
	// connection closed at accept because the cap was reached.
	max  int64
	over func()
	// perSource caps the open connections from one source (sourceOf);
	// zero: no cap. exempt sources are not counted: a trusted proxy's
	// connections carry many clients. overSource is told of each
	// connection closed at accept because its source's cap was reached.
	perSource  int
	exempt     func(netip.Addr) bool
	overSource func(source string)
	// stall bounds how long a write to a wrapped connection may wait for
	// the client to take it; zero: no bound.
	stall time.Duration
	// clock times the stall deadlines: a write reads it, and time.Now
	// costs twice as much (see deadline.Clock).
	clock deadline.Clock

	mu       sync.Mutex
	n        int64
	bySource map[source]int // open connections per counted source; no zero entries
	conns    map[*trackedConn]struct{}
	// raw holds the connections served unwrapped (the https listener's,
	// from accept until wrapRaw wraps one or doneRaw ends it: its
	// ClientHello being read, its passthrough pipe), so that closeAll
	// ends them too: a client still sending its hello when the drain
	// runs out would hold the drain for the hello's own bound
	// (ReadHeaderTimeout), which may be the longer. cut says closeAll
	// ran: a connection counted after it is closed at once.
	raw  map[net.Conn]struct{}
	cut  bool
	zero chan struct{} // closed while n == 0
}

// source is a connection's key under the per-source cap: an IPv4
// address, or an IPv6 /48 (one site usually holds a whole /48), as
// limit.KeyFor counts a client for the request limits. The zero source is
// not counted.
type source netip.Prefix

// sourceOf is a's source: the zero source when no per-source cap is set
// or a is exempt (or not an IP address).
func (t *tracker) sourceOf(a net.Addr) source {
	if t.perSource <= 0 {
		return source{}
	}
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return source{}
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return source{}
	}
	ip = ip.Unmap()
	if t.exempt != nil && t.exempt(ip) {
		return source{}
	}
	if ip.Is4() {
		return source(netip.PrefixFrom(ip, 32))
	}
	p, _ := ip.WithZone("").Prefix(48) // cannot fail for a valid IPv6 address
	return source(p)
}

func (s source) String() string {
	if p := netip.Prefix(s); p.Addr().Is4() {
		return p.Addr().String()
	}
	return netip.Prefix(s).String()
}

func newTracker(g Gauge, stall time.Duration) *tracker {
	z := make(chan struct{})
	close(z)
	return &tracker{gauge: g, stall: stall, clock: deadline.NewClock(), conns: map[*trackedConn]struct{}{}, raw: map[net.Conn]struct{}{}, zero: z}
}

// Why add refused a connection.
const (
	admitted = iota
	overTotal
	overSource
)

// add counts one more connection from src, unless a cap is reached: then
// it says which and counts nothing. A raw connection (not nil) is
// remembered until wrapRaw or doneRaw.
func (t *tracker) add(src source, raw net.Conn) int {
	t.mu.Lock()
	if t.max > 0 && t.n >= t.max {
		t.mu.Unlock()
		return overTotal
	}
	if src != (source{}) {
		if t.bySource[src] >= t.perSource {
			t.mu.Unlock()
			return overSource
		}
		if t.bySource == nil {
			t.bySource = map[source]int{}
		}
		t.bySource[src]++
	}
	if t.n == 0 {
		t.zero = make(chan struct{})
	}
	t.n++
	if raw != nil {
		t.raw[raw] = struct{}{}
		if t.cut {
			raw.Close() // counted, and done by whoever serves it, as any
		}
	}
	t.mu.Unlock()
	if t.gauge != nil {
		t.gauge.Inc()
	}
	return admitted
}

// accept is ln.Accept for a counted listener: a connection over the cap
// is closed at once, unread, and the next one is waited for. At the cap
// the process keeps descriptors for its hosts, its bus and its
// management listener, which a flood of clients would otherwise take
// (each accepted connection may hold up to four: itself, a host
// connection and a splice pipe's two ends; six while a passthrough pipe
// moves bytes both ways).
//
// A source over its own cap is closed the same way: one client (a
// single address, or an IPv6 site) cannot hold the connections every
// other client needs.
//
// raw says the connection is served unwrapped (see tracker.raw).
func (t *tracker) accept(ln net.Listener, raw bool) (net.Conn, source, error) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil, source{}, err
		}
		src := t.sourceOf(c.RemoteAddr())
		var rc net.Conn
		if raw {
			rc = c
		}
		switch t.add(src, rc) {
		case admitted:
			return c, src, nil
		case overTotal:
			c.Close()
			if t.over != nil {
				t.over()
			}
		case overSource:
			c.Close()
			if t.overSource != nil {
				t.overSource(src.String())
			}
		}
	}
}

// done counts one connection from src less.
func (t *tracker) done(src source) { t.doneRaw(nil, src) }

// doneRaw counts raw, a connection from src that accept remembered as
// raw, done, and forgets it.
func (t *tracker) doneRaw(raw net.Conn, src source) {
	t.mu.Lock()
	if raw != nil {
		delete(t.raw, raw)
	}
	if src != (source{}) {
		if n := t.bySource[src] - 1; n > 0 {
			t.bySource[src] = n
		} else {
			delete(t.bySource, src)
		}
	}
	t.n--
	if t.n == 0 {
		close(t.zero)
	}
	t.mu.Unlock()
	if t.gauge != nil {
		t.gauge.Dec()
	}
}

// count returns the number of open connections.
func (t *tracker) count() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// idle returns a channel closed once no connection is open.
func (t *tracker) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.zero
}

// wrap returns c (already counted by add, from src) as a conn whose
// first Close counts it done.
func (t *tracker) wrap(c net.Conn, src source) *trackedConn { return t.wrapRaw(nil, c, src) }

// wrapRaw is wrap for c that serves raw, a connection accept remembered
// as raw: from now on c is the one remembered.
func (t *tracker) wrapRaw(raw, c net.Conn, src source) *trackedConn {
	tc := &trackedConn{Conn: c, t: t, src: src}
	t.mu.Lock()
	if raw != nil {
		delete(t.raw, raw)
	}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	return tc
}

// closeAll closes every connection still open, wrapped or raw; one
// counted after it is closed as it is counted.
func (t *tracker) closeAll() {
	t.mu.Lock()
	t.cut = true
	cs := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	raw := make([]net.Conn, 0, len(t.raw))
	for c := range t.raw {
		raw = append(raw, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	for _, c := range raw {
		c.Close() // whoever serves it counts it done
	}
}

// trackedConn is a counted client connection. Its writes are bounded by
// the tracker's stall: a client that stops reading (DESIGN §3: "a client
// that cannot keep up is closed") makes the write fail, and its server
// closes the connection, instead of a handler and its upstream
// connection waiting on it for as long as the client likes.
type trackedConn struct {
	net.Conn
	t    *tracker
	src  source
	once sync.Once

	// wdl is the write deadline Write last set (ns on the tracker's
	// clock; 0: none).
	// theirs says someone else set one (tls.Conn.Close bounds its
	// close_notify to 5 s, a handler may use http.ResponseController):
	// Write leaves it alone until it is cleared.
	wdl    atomic.Int64
	theirs atomic.Bool
}

// Write arms the stall deadline, then writes. Re-arming costs a runtime
// timer update, so it happens only when less than a stall is left, for a
// stall and a half: every write has at least a stall to go through.
func (c *trackedConn) Write(p []byte) (int, error) {
	c.armStall()
	return c.Conn.Write(p)
}

func (c *trackedConn) armStall() {
	if s := int64(c.t.stall); s > 0 && !c.theirs.Load() {
		now := int64(c.t.clock.Elapsed())
		if c.wdl.Load()-now < s {
			d := now + s + s/2
			if c.Conn.SetWriteDeadline(c.t.clock.At(time.Duration(d))) == nil {
				c.wdl.Store(d)
			}
		}
	}
}

// holder is a connection whose writes can be kept for its next Read to
// write (sock.Conn, sni.Conn over one): see the lane's holder.
type holder interface {
	Hold(buf []byte) bool
	Unhold()
	Release() error
}

// Hold keeps the writes that follow for the next Read to write, as
// sock.Conn's Hold, under the same stall bound as Write: the last of a
// response rides on the wait for the next request. It reports false, and
// keeps nothing, over a connection that cannot.
func (c *trackedConn) Hold(buf []byte) bool {
	h, ok := c.Conn.(holder)
	if !ok {
		return false
	}
	c.armStall()
	return h.Hold(buf)
}

// Pending passes on to the underlying connection (sock.Conn's, through
// sni.Conn): true when it cannot say.
func (c *trackedConn) Pending() bool {
	p, ok := c.Conn.(interface{ Pending() bool })
	return !ok || p.Pending()
}

func (c *trackedConn) Unhold() {
	if h, ok := c.Conn.(holder); ok {
		h.Unhold()
	}
}

func (c *trackedConn) Release() error {
	h, ok := c.Conn.(holder)
	if !ok {
		return nil
	}
	c.armStall()
	return h.Release()
}

func (c *trackedConn) SetDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

// noteDeadline records a write deadline set from outside: a zero one
// hands the stall bound back to Write.
func (c *trackedConn) noteDeadline(t time.Time) {
	c.theirs.Store(!t.IsZero())
	c.wdl.Store(0)
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
		c.t.done(c.src)
	})
	return err
}

// SyscallConn exposes the socket, so that the lane can watch an idle
// connection's without a goroutine.
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// trackingListener counts every accepted connection.
type trackingListener struct {
	net.Listener
	t *tracker
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, src, err := l.t.accept(l.Listener, false)
	if err != nil {
		return nil, err
	}
	return l.t.wrap(sock.Wrap(c), src), nil
}

// countingListener counts every accepted connection but leaves it as it
// is: an https connection must stay a raw TCP connection until its
// ClientHello says whether it is piped (spliced) or terminated; whoever
// serves it wraps it (wrapRaw) or counts it done (doneRaw), from its
// sourceOf, which is the same at both ends. Until then the tracker
// remembers it as raw, for closeAll.
type countingListener struct {
	net.Listener
	t *tracker
}

func (l countingListener) Accept() (net.Conn, error) {
	c, _, err := l.t.accept(l.Listener, true)
	return c, err
}

// chanListener feeds connections the https accept loop terminated to the
// L7 http.Server.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// hand gives c to the server; after Close, it closes c instead.
func (l *chanListener) hand(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// CloseWrite half-closes when the connection can, so that a server
// closing with the client's bytes unread (a large body left unread) can
// let its response arrive before the reset.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
