package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// HTTP listener modes (DESIGN §3, -http-mode).
const (
	ModeRedirect = "redirect"  // 308 to https (the default)
	ModeACMEOnly = "acme-only" // only ACME challenges; everything else 404
	ModeServe    = "serve"     // the full L7 path in plaintext
)

// Dial opens a connection to a passthrough host (an alias, so a plain func
// literal fits Options.Passthrough). The connection should be a
// *net.TCPConn, so the pipe splices. held is the pipe's place in a
// route.Conns, released once the pipe has ended; nil: not held.
type Dial = func(ctx context.Context) (c net.Conn, held *route.Conn, err error)

// Gauge is the subset of prometheus.Gauge edge needs for
// active_connections; prometheus.Gauge satisfies it.
type Gauge interface {
	Inc()
	Dec()
}

// Counter is the part of a prometheus.Counter the edge uses.
type Counter interface {
	Inc()
}

// Options configures an Edge. Zero values take the defaults given.
type Options struct {
	// Listener addresses; an empty address disables that listener.
	// A management listener bound to a loopback address answers only a
	// Host that is localhost or a loopback address (421 otherwise, but
	// for /healthz), against DNS rebinding.
	HTTPAddr, HTTPSAddr, ManagementAddr string

	// HTTPMode is ModeRedirect (default when empty), ModeACMEOnly or
	// ModeServe.
	HTTPMode string
	// Handler is the L7 path (internal/gateway). Required when HTTPSAddr is
	// set or HTTPMode is ModeServe.
	Handler http.Handler
	// Management serves every management route except /readyz, which edge
	// answers. nil: 404 for everything else.
	Management http.Handler
	// Ready, when set, must report true before /readyz answers 200 (for
	// example: the store has loaded the routing table). nil: ready as soon
	// as Run serves.
	Ready func() bool

	// TLS is the https listener's config; its GetCertificate comes from
	// tlsmgr. Required when HTTPSAddr is set. NextProtos should offer h2,
	// http/1.1 and http/1.0 (and acme-tls/1 for TLS-ALPN-01).
	TLS *tls.Config
	// ACME wraps the http listener's handler so ACME HTTP-01 challenges are
	// answered (tlsmgr.Manager.HTTPHandler). It sees only
	// /.well-known/acme-challenge/ requests; the handler it wraps answers
	// 404. nil: those paths get 404.
	ACME func(next http.Handler) http.Handler
	// Passthrough reports whether a ClientHello's server name belongs to an
	// app in passthrough mode and, if so, how to reach one of its verified
	// tls hosts (see RoutePassthrough). It is never called for an empty
	// name. nil: every connection is terminated.
	Passthrough func(serverName string) (Dial, bool)

	// PQOnly (tls.pq_only) never pipes a ClientHello that does not offer
	// X25519MLKEM768 with TLS 1.3; TLS should then refuse the same hello
	// (tlsmgr's config with PQOnly does), so it gets a handshake alert.
	// A hello below TLS 1.2 is never piped either way.
	PQOnly bool

	// WrapHTTP wraps the plaintext listeners, http and management, for a
	// guard that must see the raw bytes of each connection before Go's
	// server parses them (gateway.GuardListener refuses request-smuggling
	// framings the server would otherwise accept, and with WrapServer
	// answers the server's own errors as problems). It is not applied to
	// https: wrapping a *tls.Conn would hide r.TLS and HTTP/2. nil: no
	// wrapper.
	WrapHTTP func(net.Listener) net.Listener
	// WrapTLS wraps each HTTP/1 connection of the https listener once its
	// handshake is done (ALPN other than h2), for the same guard: the
	// connections the lane hands net/http, or all of them when the lane is
	// off. The wrapper must keep the connection's ConnectionState method,
	// from which r.TLS is restored. HTTP/2 connections are never wrapped.
	// nil: no wrapper.
	WrapTLS func(net.Conn) net.Conn
	// WrapServer adjusts the http.Server of the management, the http and
	// the https listener once, before it serves, for the guard WrapHTTP
	// and WrapTLS put on their connections (gateway.GuardServer tells it
	// when one of the server's handlers is answering). It may wrap the
	// server's Handler, ConnContext and ConnState, keeping what they did.
	// nil: nothing.
	WrapServer func(*http.Server)

	// DisableLane serves HTTP/1 with net/http alone. By default
	// internal/lane reads each HTTP/1.1 connection first (the http
	// listener in serve mode, and https connections that did not
	// negotiate h2) and serves its plain requests itself (the same
	// handler, less CPU and memory), handing net/http the rest.
	DisableLane bool
	// LaneHandoff, when set, is told why the lane handed a connection to
	// net/http (a metric label). Optional.
	LaneHandoff func(reason string)
	// RequestContext, when set, gives each request the lane serves its
	// context (lane.Options.RequestContext): the Handler's own per-request
	// context, made without a second copy of the Request. Optional.
	RequestContext func(conn context.Context) context.Context
	// RequestDone, when set, is given back the contexts RequestContext
	// made once the lane or the HTTP/2 server no longer uses them
	// (lane.Options.RequestDone, h2.Options.RequestDone), for the Handler
	// to reuse, and reports whether nothing the Handler left behind can
	// reach the request (h2.Options.RequestDone). Optional.
	RequestDone func(ctx context.Context) bool

	// Cluster is the X-Gatehouse-Cluster value of the answers edge writes
	// itself in front of Handler and Management (its 414 and 431), which
	// DESIGN §5.2 says every answer carries, as Handler's do (a guard's
	// answers carry it through WrapServer: gateway.GuardServerOf), and of
	// the https listener's answer to plain HTTP. Visible ASCII (a cluster
	// id); empty: none.
	Cluster string

	// MaxRequestLine bounds the request line (method, target, version)
	// on every listener, management included: longer gets 414, even in a
	// head over MaxHeaderBytes. A line longer than net/http reads (MaxHeaderBytes
	// plus 4 KiB) never reaches edge's handler: net/http answers 431,
	// unless a guard in front of it (WrapHTTP, WrapTLS; gateway's) cuts
	// the line off at this limit, which the servers' base context carries
	// (httpwire.LineLimit). Zero means 8 KiB.
	MaxRequestLine int
	// MaxHeaderBytes bounds the request line plus header block: larger
	// gets 431. Zero means 64 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds reading a request's headers, and on https
	// the ClientHello and the TLS handshake. Zero means 10 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections, and a client that
	// stops reading: a response write it does not take within IdleTimeout
	// (to one and a half times it) fails and the connection is closed; over
	// HTTP/2, a write stalled on one stream's window resets that stream.
	// Zero means 120 s.
	IdleTimeout time.Duration
	// DrainTimeout bounds graceful drain after Run's context ends. Zero
	// means 30 s.
	DrainTimeout time.Duration
	// DialTimeout bounds dialing a passthrough host. Zero means 5 s.
	DialTimeout time.Duration
	// PipeIdleTimeout closes a passthrough pipe that carried no byte
	// either way for this long (Linux; see pipe.Join). Zero: never.
	PipeIdleTimeout time.Duration

	// ActiveConns counts open client connections on the http and https
	// listeners (passthrough pipes included). nil: not exported (the count
	// is still on /readyz).
	ActiveConns Gauge
	// MaxConnections caps the open client connections on the http and
	// https listeners together (the management listener is apart): one
	// more is closed as soon as it is accepted. Zero: no cap.
	MaxConnections int
	// MaxConnectionsPerSource caps the open client connections from one
	// source, an IPv4 address or an IPv6 /48 (the request limits' client),
	// on the http and https listeners together: one more from it is
	// closed as soon as it is accepted. Zero: no cap.
	MaxConnectionsPerSource int
	// SourceExempt are the sources MaxConnectionsPerSource does not cap:
	// trusted proxies, whose connections carry many clients.
	SourceExempt []netip.Prefix
	// ConnsRefused counts the connections closed at either cap; nil: not
	// counted (they are still logged, once per 10 s).
	ConnsRefused Counter
	// Hello, when set, is told the outcome of each https connection's
	// ClientHello, one of HelloOutcomes (a metric label), on the
	// connection's goroutine. nil: not counted (the failures are still
	// logged at debug level).
	Hello func(outcome string)
	// Logger; nil discards.
	Logger *slog.Logger
}

func (o *Options) validate() error {
	switch o.HTTPMode {
	case "", ModeRedirect, ModeACMEOnly, ModeServe:
	default:
		return fmt.Errorf("edge: http mode must be redirect, acme-only or serve, got %q", o.HTTPMode)
	}
	if o.HTTPAddr == "" && o.HTTPSAddr == "" && o.ManagementAddr == "" {
		return errors.New("edge: no listener address")
	}
	if o.HTTPSAddr != "" && o.TLS == nil {
		return errors.New("edge: https listener needs a TLS config")
	}
	if o.Handler == nil && (o.HTTPSAddr != "" || (o.HTTPAddr != "" && o.HTTPMode == ModeServe)) {
		return errors.New("edge: handler is required")
	}
	for name, v := range map[string]int{"max request line": o.MaxRequestLine, "max header bytes": o.MaxHeaderBytes, "max connections": o.MaxConnections, "max connections per source": o.MaxConnectionsPerSource} {
		if v < 0 {
			return fmt.Errorf("edge: %s must not be negative, got %d", name, v)
		}
	}
	for i := 0; i < len(o.Cluster); i++ {
		// It goes into answers as a field value, some of them written raw.
		if c := o.Cluster[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("edge: cluster %q must be visible ASCII", o.Cluster)
		}
	}
	for i, p := range o.SourceExempt {
		if !p.IsValid() {
			return fmt.Errorf("edge: source exempt %d is not a valid prefix", i)
		}
	}
	for name, d := range map[string]time.Duration{"read header timeout": o.ReadHeaderTimeout, "idle timeout": o.IdleTimeout, "drain timeout": o.DrainTimeout, "dial timeout": o.DialTimeout, "pipe idle timeout": o.PipeIdleTimeout} {
		if d < 0 {
			return fmt.Errorf("edge: %s must not be negative, got %s", name, d)
		}
	}
	return nil
}

func orDefault[T int | time.Duration](v, d T) T {
	if v == 0 {
		return d
	}
	return v
}

func (o *Options) withDefaults() Options {
	c := *o
	if c.HTTPMode == "" {
		c.HTTPMode = ModeRedirect
	}
	c.MaxRequestLine = orDefault(c.MaxRequestLine, 8<<10)
	c.MaxHeaderBytes = orDefault(c.MaxHeaderBytes, 64<<10)
	c.ReadHeaderTimeout = orDefault(c.ReadHeaderTimeout, 10*time.Second)
	c.IdleTimeout = orDefault(c.IdleTimeout, 120*time.Second)
	c.DrainTimeout = orDefault(c.DrainTimeout, 30*time.Second)
	c.DialTimeout = orDefault(c.DialTimeout, 5*time.Second)
	return c
}
