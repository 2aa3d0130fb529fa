package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/gatehouse-dev/gatehouse/internal/h2"
	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/lane"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
	"github.com/gatehouse-dev/gatehouse/internal/workers"
)

// Edge runs the listeners. New validates; Listen binds; Run serves and
// drains; Close releases what Listen bound when Run will not be called.
// Addr, ActiveConnections and Draining are safe for concurrent use.
type Edge struct {
	opts Options
	log  *slog.Logger
	// clusterHdr is the X-Gatehouse-Cluster value of edge's own 414 and
	// 431 (Options.Cluster), shared and never modified; nil: none.
	clusterHdr []string
	// plainAnswer is the https listener's answer to a plain HTTP request
	// (plainHTTPAnswer), naming the cluster as edge's other answers do.
	plainAnswer []byte

	mu                 sync.Mutex
	mgmtLn, httpLn, ln net.Listener // ln: https
	ran, closed        bool

	conns *tracker
	// mgmtConns bounds the management listener's writes as conns does
	// the others' (DESIGN §3: a client that cannot keep up is closed),
	// with no cap and no gauge: those are the data listeners'.
	mgmtConns *tracker
	serving   atomic.Bool
	draining  atomic.Bool
	// lingering: Linger was called; the drain is delayed, not begun.
	lingering atomic.Bool

	wg            sync.WaitGroup // accept loops, servers and connection goroutines
	pipeCtx       context.Context
	pipeStop      context.CancelFunc
	offload       *offload   // HTTP/2 handlers on reused goroutines; nil without https
	h2            *h2.Server // HTTP/2 over TLS; nil without https or with DisableLane
	dialLog       failLog    // passthrough dial failures, said once per routed name and window
	overLog       failLog    // connections closed at the cap, said once per window
	overSourceLog failLog    // connections closed at a source's cap, the same
}

// New validates opts. It binds and starts nothing.
func New(opts Options) (*Edge, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Edge{opts: o, log: log, conns: newTracker(o.ActiveConns, o.IdleTimeout), mgmtConns: newTracker(nil, o.IdleTimeout)}
	e.plainAnswer = plainHTTPAnswer
	if o.Cluster != "" {
		e.clusterHdr = []string{o.Cluster}
		e.plainAnswer = withField(plainHTTPAnswer, "X-Gatehouse-Cluster", o.Cluster)
	}
	e.conns.max = int64(o.MaxConnections)
	e.conns.over = e.overCap
	e.conns.perSource = o.MaxConnectionsPerSource
	e.conns.overSource = e.overSourceCap
	if exempt := o.SourceExempt; len(exempt) > 0 {
		e.conns.exempt = func(ip netip.Addr) bool {
			return slices.ContainsFunc(exempt, func(p netip.Prefix) bool { return p.Contains(ip) })
		}
	}
	return e, nil
}

// MaxConnections is the cap on open client connections; 0: none.
func (e *Edge) MaxConnections() int { return e.opts.MaxConnections }

// overCap counts and, once per window, logs a connection closed at
// accept because MaxConnections were open.
func (e *Edge) overCap() {
	if e.opts.ConnsRefused != nil {
		e.opts.ConnsRefused.Inc()
	}
	if say, left := e.overLog.say("", time.Now()); say {
		e.log.Warn("edge: connection limit reached, closing new connections", "max_connections", e.opts.MaxConnections, "not_logged_since", left)
	}
}

// overSourceCap counts and, once per window, logs a connection closed at
// accept because MaxConnectionsPerSource were open from its source.
func (e *Edge) overSourceCap(source string) {
	if e.opts.ConnsRefused != nil {
		e.opts.ConnsRefused.Inc()
	}
	if say, left := e.overSourceLog.say("", time.Now()); say {
		e.log.Warn("edge: one source at its connection limit, closing its new connections", "source", source, "max_connections_per_source", e.opts.MaxConnectionsPerSource, "not_logged_since", left)
	}
}

// ListenManagement binds the management listener only. Call it before
// anything else starts (DESIGN §3), then Listen and Run. Idempotent.
func (e *Edge) ListenManagement() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	return e.bind(&e.mgmtLn, e.opts.ManagementAddr, "management")
}

// Listen binds management (if not yet bound), then http, then https.
// On error every listener it bound is closed. Idempotent.
func (e *Edge) Listen() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed
	}
	err := e.bind(&e.mgmtLn, e.opts.ManagementAddr, "management")
	if err == nil {
		err = e.bind(&e.httpLn, e.opts.HTTPAddr, "http")
	}
	if err == nil {
		err = e.bind(&e.ln, e.opts.HTTPSAddr, "https")
	}
	if err != nil {
		e.closeListeners()
	}
	return err
}

var errClosed = errors.New("edge: closed")

// Close releases the listeners ListenManagement and Listen bound, for a
// caller that will not Run e after all: a part meant to start after the
// listeners failed, and the process (an embedder) goes on. Once Run has
// been called its drain owns the listeners, and Close does nothing. After
// Close, Listen and Run fail. Idempotent.
func (e *Edge) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.ran {
		return nil
	}
	return e.closeListeners()
}

// closeListeners closes and forgets every bound listener; e.mu is held.
func (e *Edge) closeListeners() error {
	var errs []error
	for _, l := range []*net.Listener{&e.mgmtLn, &e.httpLn, &e.ln} {
		if *l != nil {
			errs = append(errs, (*l).Close())
			*l = nil
		}
	}
	return errors.Join(errs...)
}

// ListenError is a listener that could not bind: Listener is
// "management", "http" or "https", so that the caller can name its own
// setting for it.
type ListenError struct {
	Listener string
	Err      error
}

func (e *ListenError) Error() string { return fmt.Sprintf("edge: %s listener: %v", e.Listener, e.Err) }
func (e *ListenError) Unwrap() error { return e.Err }

func (e *Edge) bind(l *net.Listener, addr, name string) error {
	if *l != nil || addr == "" {
		return nil
	}
	ln, err := sock.Listen(context.Background(), addr)
	if err != nil {
		return &ListenError{Listener: name, Err: err}
	}
	*l = ln
	return nil
}

// Addr returns a bound listener's address ("management", "http" or
// "https"), or nil.
func (e *Edge) Addr(name string) net.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := map[string]net.Listener{"management": e.mgmtLn, "http": e.httpLn, "https": e.ln}[name]
	if l == nil {
		return nil
	}
	return l.Addr()
}

// ActiveConnections returns the number of open client connections.
func (e *Edge) ActiveConnections() int64 { return e.conns.count() }

// Draining reports whether drain has started.
func (e *Edge) Draining() bool { return e.draining.Load() }

// Linger starts a delayed drain (drain_delay): /readyz turns 503
// "draining" at once, so that a load balancer checking it stops sending
// new connections, while every listener still accepts and serves as
// before; the drain itself comes when Run's context ends, d later by the
// caller's clock. Connections reused meanwhile would keep a client on a
// gateway about to stop, so each answer now ends its connection
// (closeLingering): the client's next request reconnects through the
// load balancer, by then routing elsewhere. An idle connection is left
// open until its next answer or the drain: closed now, it would race a
// request the load balancer, still routing here, is sending on it, the
// failure the delay is for. An HTTP/2 connection is told to go away
// after its next answer, by either server (net/http's, package h2's);
// Shutdown, which would tell every connection at once, is the drain's:
// it refuses every stream of a connection opened after it, which would
// turn away the new clients a delay is for. d is for the log only.
// Idempotent.
func (e *Edge) Linger(d time.Duration) {
	if e.lingering.Swap(true) {
		return
	}
	// Said at once, as the drain's first line is: an operator who sent
	// SIGTERM and sees the listeners still serve reads why, and for how
	// long.
	e.log.Info("edge: drain delayed: /readyz 503, listeners still serving; keep-alive connections close after their answer; the drain begins after drain_delay",
		"drain_delay", d, "open_connections", e.conns.count())
}

// closeLingering has an answer given after Linger end its connection: an
// HTTP/1 one says Connection: close, which the lane and net/http both
// honour (neither has a switch of its own that leaves idle connections
// alone: net/http's SetKeepAlivesEnabled closes them); both HTTP/2
// servers take a handler's Connection: close as GOAWAY, the connection
// closing once its streams end (package h2's refuses none the client
// had in flight as it read the GOAWAY). An upgrade is left as it is: its 101 would say
// close beside Upgrade, and an upgrade refused ends its connection at the
// drain. Before Linger it costs an atomic load.
func (e *Edge) closeLingering(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.lingering.Load() && !isUpgrade(r) {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// isUpgrade reports whether r asks to switch protocols (RFC 9110 §7.8),
// as the gateway tells an upgrade: an Upgrade field that Connection names.
func isUpgrade(r *http.Request) bool {
	return len(r.Header["Upgrade"]) > 0 && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade")
}

func (e *Edge) httpsPort() int {
	if a, ok := e.Addr("https").(*net.TCPAddr); ok {
		return a.Port
	}
	if _, p, err := net.SplitHostPort(e.opts.HTTPSAddr); err == nil {
		var n int
		fmt.Sscan(p, &n)
		return n
	}
	return 443
}

// server returns an http.Server for h. Its HTTP/1 requests pass
// headerLimit first; a lane in front of it serves h itself (newLane).
// lineLimit says the listener bounds the request line (each of them
// does, DESIGN §3: h answers 414 through limits). A line too long for
// net/http to read whole (over MaxHeaderBytes plus its 4 KiB of slack) it
// answers 431 itself, never reaching h: the server's base context carries
// the limit (httpwire.WithLineLimit) for a guard that reads each head
// before net/http (WrapHTTP, WrapTLS) to answer such a line 414 in its
// place, as soon as the line is over the limit.
func (e *Edge) server(h http.Handler, lineLimit bool) *http.Server {
	srv := &http.Server{
		Handler:           e.headerLimit(stallBodies(h, e.opts.IdleTimeout), lineLimit),
		ReadHeaderTimeout: e.opts.ReadHeaderTimeout,
		IdleTimeout:       e.opts.IdleTimeout,
		MaxHeaderBytes:    e.opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
	if lineLimit {
		ctx := httpwire.WithLineLimit(context.Background(), e.opts.MaxRequestLine)
		srv.BaseContext = func(net.Listener) context.Context { return ctx }
	}
	return srv
}

// Run binds what Listen has not, serves every listener, and when ctx ends
// drains: /readyz turns 503, listeners stop accepting, in-flight requests
// and pipes get DrainTimeout to finish, then whatever is left is closed.
// It returns nil after a drain, or the error of a listener that failed.
// Run may be called once.
func (e *Edge) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.ran {
		e.mu.Unlock()
		return errors.New("edge: Run called twice")
	}
	e.ran = true
	e.mu.Unlock()
	if err := e.Listen(); err != nil {
		return err
	}
	e.pipeCtx, e.pipeStop = context.WithCancel(context.Background())
	defer e.pipeStop()

	// Build every server and lane first, so that nothing is running when
	// one of them fails; then start serving, management first.
	var mgmt, plain, l7 *http.Server
	var handed, l7ln *chanListener
	var fast, fastTLS *lane.Server
	if e.mgmtLn != nil {
		// DESIGN §3's limits hold on every HTTP listener: a line over
		// MaxRequestLine gets 414 here too, before the loopback Host
		// check or a route sees it.
		mgmt = e.server(e.limits(e.managementHandler()), true)
		mgmt.DisableGeneralOptionsHandler = true // managementHandler answers "OPTIONS *"
	}
	if e.httpLn != nil {
		ph := e.closeLingering(e.httpHandler())
		plain = e.server(ph, true)
		// "OPTIONS *" goes to the chain where the http listener serves
		// it, as on https, and to httpHandler's asterisk in redirect and
		// acme-only modes: net/http's own answer would name no cluster.
		plain.DisableGeneralOptionsHandler = true
		if e.opts.HTTPMode == ModeServe && !e.opts.DisableLane {
			// The lane reads the connections first and hands net/http
			// those it does not serve itself (see internal/lane).
			handed = newChanListener(e.httpLn.Addr())
			var err error
			if fast, err = e.newLane(plain, ph, handed.hand); err != nil {
				return err
			}
		}
	}
	if e.ln != nil {
		e.offload = newOffload(&e.wg, e.closeLingering(e.limits(e.opts.Handler)), e.opts.IdleTimeout)
		l7h := withTLSState(e.offload)
		l7 = e.server(l7h, true)
		l7.ConnContext = tlsStateContext
		// net/http (HTTP/1 and its HTTP/2), the lane and h2 all leave
		// "OPTIONS *" to the chain, which answers it for a known host
		// and logs, counts and stamps it as any request (gateway's
		// asterisk), rather than answering it out of sight.
		l7.DisableGeneralOptionsHandler = true
		// net/http's HTTP/2 (DisableLane) takes internal/h2's windows.
		// At its defaults a connection's window is no larger than a
		// stream's (1 MiB each), and a connection's credit comes back
		// only as handlers read: one request whose host takes none of
		// its upload filled it, and every other upload on that client's
		// connection stalled until IdleTimeout failed it (408).
		l7.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 20, MaxReceiveBufferPerConnection: 4 << 20}
		l7ln = newChanListener(e.ln.Addr())
		if !e.opts.DisableLane {
			// HTTP/1.1 over TLS takes the lane too; h2 goes straight to
			// net/http (serveTLSConn decides by ALPN).
			var err error
			handTLS := func(c net.Conn) { l7ln.hand(e.wrapTLS(c)) }
			if fastTLS, err = e.newLane(l7, l7h, handTLS); err != nil {
				return err
			}
			if e.h2, err = e.newH2(l7); err != nil {
				return err
			}
		}
	}

	if e.opts.WrapServer != nil {
		for _, s := range []*http.Server{mgmt, plain, l7} {
			if s != nil {
				e.opts.WrapServer(s)
			}
		}
	}

	errc := make(chan error, 4)
	if mgmt != nil {
		// Wrapped like the http listener, so that net/http's own error
		// answers there are problems too (DESIGN §2).
		var ln net.Listener = trackingListener{e.mgmtLn, e.mgmtConns}
		if e.opts.WrapHTTP != nil {
			ln = e.opts.WrapHTTP(ln)
		}
		e.serve(mgmt, ln, errc)
	}
	if plain != nil {
		var ln net.Listener = trackingListener{e.httpLn, e.conns}
		if handed != nil {
			ln = handed
		}
		if e.opts.WrapHTTP != nil {
			ln = e.opts.WrapHTTP(ln)
		}
		e.serve(plain, ln, errc)
		if fast != nil {
			e.accept("http", trackingListener{e.httpLn, e.conns}, fast.ServeConn, errc)
		}
	}
	if l7 != nil {
		e.serve(l7, l7ln, errc)
		e.accept("https", countingListener{e.ln, e.conns}, func(c net.Conn) {
			e.serveTLSConn(c, l7ln, fastTLS)
		}, errc)
	}
	e.serving.Store(true)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	e.drain(mgmt, plain, l7, fast, fastTLS)
	return err
}

func (e *Edge) serve(srv *http.Server, ln net.Listener, errc chan<- error) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("edge: serve %s: %w", ln.Addr(), err)
		}
	}()
}

// drain stops the data listeners and waits, within DrainTimeout, for every
// request and pipe to finish; the management listener goes last so /readyz
// reports the drain.
func (e *Edge) drain(mgmt, plain, l7 *http.Server, fast, fastTLS *lane.Server) {
	e.draining.Store(true)
	start := time.Now()
	// Said at once: the next line comes only when the drain ends, up to
	// drain_timeout later, and an operator who sent SIGTERM reads here
	// that it was taken and how long it may last.
	e.log.Info("edge: draining: listeners closed, /readyz 503; open connections have drain_timeout to finish",
		"drain_timeout", e.opts.DrainTimeout, "open_connections", e.conns.count())
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.DrainTimeout)
	defer cancel()
	if e.ln != nil {
		e.ln.Close() // the accept loop ends; handshakes in flight finish or fail
	}
	var wg sync.WaitGroup
	if fast != nil {
		e.httpLn.Close() // the lane's accept loop ends
	}
	for _, l := range []*lane.Server{fast, fastTLS} {
		if l != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = l.Shutdown(ctx) }()
		}
	}
	for _, s := range []*http.Server{plain, l7} {
		if s != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.Shutdown(ctx) }()
		}
	}
	if e.h2 != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.h2.Shutdown(ctx) }()
	}
	wg.Wait()
	select {
	case <-e.conns.idle():
	case <-ctx.Done():
	}
	// An HTTP/2 connection that lingered (every stream answered, the
	// client's bytes read out after its GOAWAY) is not counted as cut:
	// h2's Shutdown closed it as ctx ended.
	left := e.conns.count()
	// Past the deadline (or done): close whatever is left.
	for _, s := range []*http.Server{plain, l7} {
		if s != nil {
			s.Close()
		}
	}
	for _, l := range []*lane.Server{fast, fastTLS} {
		if l != nil {
			l.Close()
		}
	}
	if e.h2 != nil {
		e.h2.Close()
	}
	e.pipeStop()
	e.conns.closeAll()
	if mgmt != nil {
		mgmt.Close()
	}
	if e.offload != nil {
		e.offload.pool.Stop() // the servers are closed: no request comes
	}
	e.wg.Wait()
	if left > 0 {
		// The requests on them end as a client's that left would: 499 in
		// the access log before their answer began, and after it (a
		// stream, an upgrade) the status that was sent, with the bytes
		// that went out, as nginx logs them. Say here that the gateway
		// cut them.
		e.log.Warn("edge: drained; drain_timeout cut the connections still open (a request cut before its answer logs status 499, one cut mid-answer the status it sent)",
			"took", time.Since(start).Round(time.Millisecond), "cut_connections", left)
		return
	}
	e.log.Info("edge: drained", "took", time.Since(start).Round(time.Millisecond), "cut_connections", left)
}

// newLane builds the lane in front of srv: it serves h (srv's handler
// without headerLimit: the lane reads no head over MaxHeaderBytes) and
// hands srv (through handoff) the connections it does not take.
func (e *Edge) newLane(srv *http.Server, h http.Handler, handoff func(net.Conn)) (*lane.Server, error) {
	return lane.New(lane.Options{
		Handler:           h,
		Handoff:           handoff,
		Server:            srv,
		ReadHeaderTimeout: e.opts.ReadHeaderTimeout,
		IdleTimeout:       e.opts.IdleTimeout,
		MaxHeaderBytes:    e.opts.MaxHeaderBytes,
		Logger:            e.log,
		OnHandoff:         e.opts.LaneHandoff,
		RequestContext:    e.opts.RequestContext,
		RequestDone:       laneDone(e.opts.RequestDone),
	})
}

// laneDone adapts RequestDone to the lane, which reuses its own memory
// for a request whatever the handler says (lane.Options.RequestDone).
func laneDone(f func(context.Context) bool) func(context.Context) {
	if f == nil {
		return nil
	}
	return func(ctx context.Context) { f(ctx) }
}

// newH2 builds gatehouse's HTTP/2 server for the https listener: it
// serves what srv's HTTP/2 would, with the same bounds, and answers its
// own refusals as problems (DESIGN §2). The handler must not use a
// request's or response's header map after it returns: h2 reuses them
// (h2.Options.Handler); the gateway's chain and proxy do not.
func (e *Edge) newH2(srv *http.Server) (*h2.Server, error) {
	return h2.New(h2.Options{
		Handler:           e.closeLingering(e.limits(e.opts.Handler)),
		Server:            srv,
		RequestContext:    e.opts.RequestContext,
		RequestDone:       e.opts.RequestDone,
		ReadHeaderTimeout: e.opts.ReadHeaderTimeout,
		IdleTimeout:       e.opts.IdleTimeout,
		WriteStall:        e.opts.IdleTimeout,
		BodyStall:         e.opts.IdleTimeout,
		MaxHeaderBytes:    e.opts.MaxHeaderBytes,
		TooLarge: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			e.headTooLarge(w)
		}),
		Logger: e.log,
	})
}

// accept starts the accept loop of the listener called name: until ln
// closes, each connection goes to serve on a reused goroutine (package
// workers); the loop and those goroutines are owned by e.wg. Temporary accept errors
// back off; any other is sent on errc.
func (e *Edge) accept(name string, ln net.Listener, serve func(net.Conn), errc chan<- error) {
	w := workers.New(&e.wg, workers.DefaultMaxIdle, workers.DefaultIdleFor, serve)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer w.Stop()
		var backoff time.Duration
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
					backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
					e.log.Warn("edge: "+name+" accept", "err", err, "retry_in", backoff)
					time.Sleep(backoff)
					continue
				}
				errc <- fmt.Errorf("edge: %s accept: %w", name, err)
				return
			}
			backoff = 0
			w.Go(c)
		}
	}()
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}
