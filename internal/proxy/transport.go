package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// transport sends each upstream request over the pool that fits the
// chosen host's scheme: http and https over one keep-alive HTTP/1.1
// transport, h2c over a cleartext HTTP/2 transport.
type transport struct {
	h1   *http.Transport
	h2c  *http.Transport
	dial func(ctx context.Context, network, addr string) (net.Conn, error) // the fast path's dialer, the same
	// h2cConns are the h2c connections open, for closeAll: net/http's
	// HTTP/2 pool closes a connection only if it is idle when asked, and
	// one whose last stream ended after that (a request the drain cut,
	// whose stream net/http winds down on a goroutine of its own after
	// the handler returned) stayed open, goroutines and all, for the idle
	// timeout after the gateway had stopped.
	h2cConns ConnSet
}

// pinnedDial returns a DialContext that connects to the chosen host's
// Dial address (the one that passed its challenge) rather than the URL's
// host:port it is asked for, which may be a name: a name is never
// resolved here, so one pointed elsewhere since the challenge cannot move
// the host's traffic (DESIGN §4). The URL keeps the name, so the TLS
// server name and the connection pools are as before. The chosen host
// travels in the dial's context (see attempt).
func pinnedDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if a := attemptFrom(ctx); a != nil && a.host.Dial != "" {
			addr = a.host.Dial
		}
		return dial(ctx, network, addr)
	}
}

func newTransport(o *Options) *transport {
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	// A host's TLS certificate is not what gatehouse trusts: a host is
	// routable only after proving its enrolled Ed25519 key at the very
	// address dialed here (DESIGN §4). Hosts commonly serve self-signed
	// certificates, so verifying a chain would add no trust and refuse
	// honest hosts.
	hostTLS := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	h1 := &http.Transport{
		Proxy: nil, // never an environment proxy: hosts are dialed directly
		// The connections note the names each response head's
		// Connection lists (connfields.go), an https one over its TLS,
		// which the transport then leaves to DialTLSContext: handshake
		// and timeout are the same as its own.
		DialContext:           headDial(pinnedDial(d.DialContext)),
		DialTLSContext:        headDialTLS(pinnedDial(d.DialContext), hostTLS, o.DialTimeout),
		MaxIdleConns:          0, // no global cap: MaxIdleConnsPerHost bounds each host
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       o.IdleConnTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		ExpectContinueTimeout: 1 * time.Second,
		// HTTP/1.1 only upstream: WebSocket upgrades need it, and the pool
		// gives the reuse HTTP/2 would.
		ForceAttemptHTTP2: false,
		// Do not decompress behind the app's back: bytes pass through.
		DisableCompression: true,
		// The fast path's bound on a host's head, on every path: a
		// tenant's host may otherwise have the gateway hold up to
		// net/http's 10 MB default per request in flight.
		MaxResponseHeaderBytes: maxFastHead,
	}
	// h2c: a plain TCP connection, spoken to as HTTP/2 with prior
	// knowledge (the ALPN-less form gRPC uses).
	h2c := &http.Transport{
		Proxy:               nil,
		DialContext:         nil, // below: through t.h2cConns
		MaxIdleConnsPerHost: o.MaxIdleConnsPerHost,
		IdleConnTimeout:     o.IdleConnTimeout,
		// The HTTP/2 transport reads this field too: a stream whose
		// host never answers is reset, and the client gets the same 504
		// an http host's silence gives, not a wait as long as its own.
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		DisableCompression:    true,
		// As for h1 (the HTTP/2 transport reads it as its header list bound).
		MaxResponseHeaderBytes: maxFastHead,
		Protocols:              new(http.Protocols),
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	t := &transport{h1: h1, h2c: h2c, dial: d.DialContext}
	h2c.DialContext = t.h2cConns.Dial(pinnedDial(d.DialContext))
	return t
}

// RoundTrip implements http.RoundTripper. The chosen host travels in the
// request's context (see attempt).
func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	a := attemptFrom(r.Context())
	if a != nil {
		a.bound1xx(r)
		if isH2C(a.host) {
			return t.h2c.RoundTrip(r)
		}
		a.noteConnFields(r)
	}
	return t.h1.RoundTrip(r)
}

// bound1xx ends the exchange at the host's sixth 1xx (max1xx), as the
// fast path does: ReverseProxy passes each 1xx on through its client
// trace, and net/http's clients (HTTP/1.1 and HTTP/2) count none once a
// trace takes them, so a host sending 1xx after 1xx was read until the
// head's timeout, its client waiting all that time for a 504. The trace
// is the one ReverseProxy made for r alone; an error from its
// Got1xxResponse fails the round trip, which the error handler answers
// 502.
func (a *attempt) bound1xx(r *http.Request) {
	tr := httptrace.ContextClientTrace(r.Context())
	if tr == nil || tr.Got1xxResponse == nil {
		return
	}
	pass := tr.Got1xxResponse
	tr.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		// The names this 1xx's Connection listed, which net/http's
		// client may have dropped with it (connfields.go).
		for _, k := range a.fields.take1xx() {
			delete(h, k)
		}
		if err := pass(code, h); err != nil {
			return err
		}
		if a.interim.n1xx > max1xx { // counted by pass, on this goroutine
			return errFastTooMany
		}
		return nil
	}
}

// MaxHeadBytes bounds a response head the gateway reads, a host's or a
// peer gateway's (net/http's client allows 10 MB): past it the answer is
// a failure (a host's: 502).
const MaxHeadBytes = maxFastHead

// LimitInterim bounds the 1xx responses of r's exchange to max1xx, as
// bound1xx does for a host's, for a transport that carries requests of
// another httputil.ReverseProxy (the gateway's to peer gateways): its
// trace, which net/http's clients leave the count to, fails the exchange
// at the sixth 1xx, before passing it on. The trace is the one
// ReverseProxy made for r alone; call it once per RoundTrip.
func LimitInterim(r *http.Request) {
	tr := httptrace.ContextClientTrace(r.Context())
	if tr == nil || tr.Got1xxResponse == nil {
		return
	}
	pass, n := tr.Got1xxResponse, 0
	tr.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		if n++; n > max1xx { // one exchange's 1xx come in turn, on one goroutine
			return errFastTooMany
		}
		return pass(code, h)
	}
}

func (t *transport) closeIdle() {
	t.h1.CloseIdleConnections()
	t.h2c.CloseIdleConnections()
}

// closeAll closes the idle connections and every h2c connection, idle
// or not, and refuses later h2c dials (Proxy.Close). HTTP/1.1
// connections in use are left to their requests: a request cut (its
// context ended) closes its own.
func (t *transport) closeAll() {
	t.closeIdle()
	t.h2cConns.CloseAll()
}

// errClosed is the dial error of a proxy that was closed.
var errClosed = errors.New("proxy: closed")

// ConnSet remembers the connections its dial opened and has not seen
// closed, so that CloseAll can close them: net/http's HTTP/2 pool
// closes a connection only if it is idle when asked, and one whose last
// stream ends after that stays open for the idle timeout. The proxy's
// h2c pool and the gateway's pool to peer gateways use one. The zero
// value is ready; safe for concurrent use.
type ConnSet struct {
	mu     sync.Mutex
	conns  map[*setConn]struct{}
	closed bool // CloseAll was called: dial refuses
}

// Dial wraps dial so that its connections join s.
func (s *ConnSet) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errClosed
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc := &setConn{Conn: c, set: s}
		s.mu.Lock()
		if s.closed { // CloseAll came during the dial
			s.mu.Unlock()
			_ = c.Close()
			return nil, errClosed
		}
		if s.conns == nil {
			s.conns = make(map[*setConn]struct{})
		}
		s.conns[sc] = struct{}{}
		s.mu.Unlock()
		return sc, nil
	}
}

// CloseAll closes every connection in s; later dials fail.
func (s *ConnSet) CloseAll() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// setConn is a connection of a ConnSet's, which leaves it when closed.
type setConn struct {
	net.Conn
	set  *ConnSet
	once sync.Once
}

func (c *setConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func isH2C(h *route.Host) bool {
	return h.Scheme == "h2c" || h.URL.Scheme == "h2c"
}
