package gateway

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// tunnel serves an upgrade request under the tunnel idle bound
// (Options.TunnelIdleTimeout): a connection handed over after a 101 that
// carries no byte either way for that long is closed on both sides, as
// nginx's proxy_read_timeout and HAProxy's timeout tunnel do, so a client
// or host that vanished without a FIN does not hold two sockets and two
// copying goroutines for ever. The client's side is closed by idleConn;
// the host's through the request's context, which ReverseProxy watches
// (it closes its connection to the host, or to the owner cluster a
// request was forwarded to, when the context ends).
//
// It runs above affinity, so a tunnel through a peer cluster is bounded
// here too: the owner closing its side would only half-close this one.
//
// With Options.Conns the tunnel is held there from the 101 until it
// ends, so that a table taking its app or host out of service closes it,
// both sides, as the idle bound does.
func (g *Gateway) tunnel(next http.Handler, w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	tw := &tunnelWriter{ResponseWriter: w, idle: g.tunnelIdle, cancel: cancel, conns: g.conns, ctx: ctx}
	next.ServeHTTP(tw, r.WithContext(ctx))
	if tw.conn != nil {
		tw.conn.held.Release()
	}
	if c := tw.conn; c != nil && c.idled.Load() {
		id := ""
		if rq := route.RequestFrom(ctx); rq != nil {
			id = rq.ID
		}
		g.log.LogAttrs(ctx, slog.LevelDebug, "gateway: tunnel idle, closed",
			slog.String("request_id", id), slog.Duration("idle_timeout", g.tunnelIdle))
	}
}

// tunnelWriter hands over the connection of an upgrade, wrapped in its
// idle bound. Only the handler's goroutine uses it.
type tunnelWriter struct {
	http.ResponseWriter
	idle   time.Duration
	cancel context.CancelFunc
	conns  *route.Conns    // nil: not held
	ctx    context.Context // the request's, for its route.Request
	conn   *idleConn       // set by Hijack
}

// Hijack hands the connection over (the host answered 101), held in
// w.conns under the request's app and the host that answered.
func (w *tunnelWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	ic := newIdleConn(c, w.idle, w.cancel)
	w.conn = ic
	if rq := route.RequestFrom(w.ctx); w.conns != nil && rq != nil && rq.Match.App != nil {
		held, ok := w.conns.Add(rq.Match.App.ID, rq.UpgradedTo, (*tunnelCut)(ic))
		if !ok {
			ic.cut() // taken out of service since it was routed
		}
		ic.held = held
	}
	return ic, brw, nil
}

// Unwrap lets http.ResponseController reach the real writer (Flush for a
// host that answered the upgrade request with a stream instead).
func (w *tunnelWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// idleConn is a hijacked client connection that closes itself, and ends
// the request's context (the host's side), once no byte was read from it
// or written to it for idle: every byte of the tunnel, either way,
// passes through it. The check is a timer re-armed for the time left,
// not a goroutine: it runs once per idle period while bytes flow.
//
// Its clock is the runtime's monotonic one, not the gateway's injected
// Now: the timer that reads it is real time whatever Now says.
type idleConn struct {
	net.Conn
	idle   time.Duration
	start  time.Time
	last   atomic.Int64 // when a byte last passed, as time since start
	idled  atomic.Bool  // the idle bound closed it
	cancel context.CancelFunc
	held   *route.Conn // its place in Options.Conns; nil: not held

	mu     sync.Mutex // guards timer and closed: a check must not re-arm after Close
	timer  *time.Timer
	closed bool
}

// newIdleConn wraps c; idle 0 sets no bound (the conn is then wrapped
// only to be cut).
func newIdleConn(c net.Conn, idle time.Duration, cancel context.CancelFunc) *idleConn {
	ic := &idleConn{Conn: c, idle: idle, start: time.Now(), cancel: cancel}
	if idle > 0 {
		ic.mu.Lock()
		ic.timer = time.AfterFunc(idle, ic.check)
		ic.mu.Unlock()
	}
	return ic
}

// cut ends the tunnel, both sides: its app or host was taken out of
// service.
func (c *idleConn) cut() {
	c.cancel()
	_ = c.Close()
}

// tunnelCut is an idleConn as route.Conns closes it: Close cuts it.
type tunnelCut idleConn

func (c *tunnelCut) Close() error {
	(*idleConn)(c).cut()
	return nil
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.idle > 0 {
		c.last.Store(int64(time.Since(c.start)))
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 && c.idle > 0 {
		c.last.Store(int64(time.Since(c.start)))
	}
	return n, err
}

// CloseWrite half-closes the client's side when the host ended its own,
// as ReverseProxy does on the connection it would have had unwrapped;
// one that cannot half-close reports nil, which ReverseProxy reads as it
// reads the lack of the method: the other direction carries on.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close stops the idle check and closes the connection. ReverseProxy
// closes it when the tunnel ends; the check closes it when idle.
func (c *idleConn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// check runs on the timer: it closes an idle tunnel, or re-arms itself
// for the time left.
func (c *idleConn) check() {
	since := time.Since(c.start) - time.Duration(c.last.Load())
	if since < c.idle {
		c.mu.Lock()
		if !c.closed {
			c.timer.Reset(c.idle - since)
		}
		c.mu.Unlock()
		return
	}
	c.idled.Store(true)
	c.cancel()
	_ = c.Close()
}
