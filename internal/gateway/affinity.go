package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/logcut"
	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// ClusterOptions configures owner affinity, signed forwarding and peer
// failover (DESIGN §5). The zero value turns all three off: every request
// is served locally and every forward mark is stripped.
type ClusterOptions struct {
	// Members returns the current cluster set, self included; in gatehouse
	// it is (*peers.Peers).Set. It is called once per request and must be
	// cheap. Nil means no cluster is known: no affinity, no failover, no
	// mark believed. A set whose Self is not Options.ClusterID, or the
	// zero (unknown) set, is treated as "owner unknown": serve locally.
	Members func() cluster.Set
	// Key is this cluster's Ed25519 private key (the same for every
	// gateway of the cluster); it signs the X-Gatehouse-Client mark of
	// every request this gateway forwards. Required with Members.
	Key ed25519.PrivateKey
	// Hash is the owner function, cluster.hash; zero means mod-N. Every
	// cluster must use the same one.
	Hash cluster.Hash
	// NoAffinity turns owner affinity off (cluster.affinity: false):
	// requests are served locally first. Failover still applies.
	NoAffinity bool
	// NoFailover turns peer failover off (cluster.failover: false).
	NoFailover bool
	// Deadline is cluster.deadline: one overall deadline, counted from the
	// moment the gateway received the request, for the owner forward, the
	// local attempt and every peer to produce response headers; once it
	// has passed, no further attempt is made and the client gets 504.
	// Streaming a body that has started is not cut. The local attempt is
	// bounded by the proxy's own ResponseHeaderTimeout: keep it at most
	// Deadline. Zero means 15 s; negative is invalid.
	Deadline time.Duration
	// Transport carries forwards and failovers to peer gateways. Nil means
	// a pooled, kept-alive transport of the gateway's own (5 s dial and TLS
	// handshake timeouts, never an environment proxy).
	Transport http.RoundTripper
}

// clusterState is what the affinity layer keeps between requests.
// Immutable after initCluster.
type clusterState struct {
	members   func() cluster.Set // nil: clusters off
	key       ed25519.PrivateKey
	hash      cluster.Hash
	affinity  bool
	failover  bool
	deadline  time.Duration
	rp        *httputil.ReverseProxy
	transport *peerTransport // ours, when Options.Transport was nil; closed by closeCluster
	health    *peerHealth    // the transport's, when it is a peerTransport; else nil
	// traced: the transport reports through httptrace when it has a
	// connection for a request (net/http's do, before writing a byte of
	// it), so a forward that ends without one reached no peer.
	traced bool
	warned *sync.Map // "kind peer id" -> *atomic.Int64, the last warning's unix nanos (warnAllowed)
}

// warnEvery bounds the warnings about one peer: a peer that is down or
// whose key is configured wrong fails every request for its apps, and a
// line each would flood the log. The metrics count every one.
const warnEvery = 10 * time.Second

// warnAllowed reports whether a warning of kind about peer may be logged
// now: one every warnEvery. Peers come from discovery, so the keys are
// bounded.
func (st *clusterState) warnAllowed(kind, peer string, now time.Time) bool {
	v, _ := st.warned.LoadOrStore(kind+" "+peer, new(atomic.Int64))
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && now.UnixNano()-prev < int64(warnEvery) {
		return false
	}
	return last.CompareAndSwap(prev, now.UnixNano())
}

// initCluster builds g.clusters from opts; New calls it once, after the
// clock and logger are set. It sets g.peerFallback.
func (g *Gateway) initCluster(opts ClusterOptions) error {
	if opts.Deadline < 0 {
		return errors.New("gateway: Cluster.Deadline must not be negative")
	}
	h, err := cluster.ParseHash(string(opts.Hash))
	if err != nil {
		return fmt.Errorf("gateway: Cluster.Hash: %w", err)
	}
	if opts.Members == nil {
		return nil
	}
	if len(opts.Key) != ed25519.PrivateKeySize {
		return errors.New("gateway: Cluster.Key must be an Ed25519 private key when Cluster.Members is set")
	}
	if set := opts.Members(); set.Self() != "" {
		if set.Self() != g.clusterID {
			return fmt.Errorf("gateway: Cluster.Members is the set of cluster %q, not of %q", set.Self(), g.clusterID)
		}
		if self, _ := set.Peer(set.Self()); self.PublicKey != nil && !self.PublicKey.Equal(opts.Key.Public()) {
			return errors.New("gateway: Cluster.Key is not the key the cluster set holds for this cluster")
		}
	}
	st := clusterState{
		members:  opts.Members,
		key:      opts.Key,
		hash:     h,
		affinity: !opts.NoAffinity,
		failover: !opts.NoFailover,
		deadline: opts.Deadline,
		warned:   new(sync.Map),
	}
	if st.deadline == 0 {
		st.deadline = 15 * time.Second
	}
	rt := opts.Transport
	if rt == nil {
		st.transport = newPeerTransport(nil)
		rt = st.transport
	}
	switch pt := rt.(type) {
	case *peerTransport:
		st.health, st.traced = pt.health, true
	case *http.Transport:
		st.traced = true
	}
	st.rp = &httputil.ReverseProxy{
		Rewrite:        g.rewritePeer,
		Transport:      rt,
		ModifyResponse: modifyPeerResponse,
		ErrorHandler:   peerError,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	g.clusters = st
	// Installed whatever st.failover says: the owner's signed answer to a
	// forward no host of its can take is part of forwarding (DESIGN
	// §5.2), which an owner with failover off takes part in too; failover
	// itself stays off.
	g.peerFallback = g.failover
	return nil
}

// peerTransport is the gateway's own transport to peer gateways: HTTP/2
// to an https peer, except for a request that asks to upgrade its
// connection (WebSocket, or any other protocol a host speaks after a
// 101). HTTP/2 cannot carry an upgrade, and net/http's transport moves
// only a WebSocket one to HTTP/1.1 by itself: any other failed as
// "invalid Upgrade request header", so that the owner never got it.
type peerTransport struct {
	h2, h1 *http.Transport
	health *peerHealth // fed by both pools' dials
	// h2Conns are the h2 pool's connections, for closeAll: a forward
	// still in flight at Close (its client cut by the drain) ends its
	// stream afterwards and left its connection open for the pool's idle
	// timeout after the gateway had stopped, as the proxy's h2c ones did.
	h2Conns *proxy.ConnSet
}

// newPeerTransport builds a peerTransport; tlsConf nil means the system's
// roots.
func newPeerTransport(tlsConf *tls.Config) *peerTransport {
	// Two of them, not a Clone: cloning sets the original's HTTP/2 up
	// first and copies it, ALPN "h2" and all.
	var h1 http.Protocols
	h1.SetHTTP1(true)
	health := &peerHealth{now: time.Now}
	dial := health.dial(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second})
	conns := new(proxy.ConnSet)
	return &peerTransport{h2: newHTTPTransport(tlsConf, nil, conns.Dial(dial)), h1: newHTTPTransport(tlsConf, &h1, dial), health: health, h2Conns: conns}
}

// newHTTPTransport is one pool of peerTransport; nil protocols means
// HTTP/2 where the peer offers it, else HTTP/1.1.
//
// Its HTTP/1.1 connections, plaintext or over TLS, read each response
// head beside net/http (proxy.FramingDial, for the exchanges RoundTrip
// has proxy.WatchFraming check): a peer's head with both Content-Length
// and Transfer-Encoding is no answer, as a host's is not, and its
// connection is not used again. net/http's client reads it as chunked
// and reuses the connection (RFC 9112 §6.3: a possible response split).
// So the TLS handshake is the dial's (tlsConf, ALPN h2 when protocols is
// nil, a 5 s bound), for the wrapper to sit above it.
func newHTTPTransport(tlsConf *tls.Config, protocols *http.Protocols, dial func(context.Context, string, string) (net.Conn, error)) *http.Transport {
	if tlsConf == nil {
		tlsConf = new(tls.Config) // the system's roots
	}
	tlsConf = tlsConf.Clone()
	tlsConf.NextProtos = []string{"http/1.1"}
	if protocols == nil {
		tlsConf.NextProtos = []string{"h2", "http/1.1"}
	}
	return &http.Transport{
		DialContext:           proxy.FramingDial(dial),
		DialTLSContext:        proxy.FramingDialTLS(dial, tlsConf, 5*time.Second),
		ForceAttemptHTTP2:     protocols == nil,
		Protocols:             protocols,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		// A host's bound (DESIGN §2 step 10): a peer's head is no bigger.
		MaxResponseHeaderBytes: proxy.MaxHeadBytes,
		// As the proxy's to hosts: otherwise a request that names no
		// encoding reaches the owner's host asking for gzip, and its
		// answer is unzipped here, no longer the body (nor the length)
		// the host sent, and an event stream waits in the unzipper.
		DisableCompression: true,
	}
}

func (t *peerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	// A host's bound on 1xx (DESIGN §2 step 10): ReverseProxy's trace
	// takes them, so net/http counts none, and a peer could send them
	// until the cluster deadline, each passed on to the client.
	proxy.LimitInterim(r)
	proxy.WatchFraming(r)
	if _, ok := r.Header["Upgrade"]; ok { // ReverseProxy keeps it only on an upgrade
		return t.h1.RoundTrip(r)
	}
	return t.h2.RoundTrip(r)
}

// CloseIdleConnections drops the pooled idle connections of both.
func (t *peerTransport) CloseIdleConnections() {
	t.h2.CloseIdleConnections()
	t.h1.CloseIdleConnections()
}

// closeAll drops the idle connections and closes every one of the h2
// pool, idle or not, after which that pool dials no more (Gateway.Close,
// once nothing is served). The HTTP/1.1 pool's, which carries upgrades,
// are left to their requests, as the proxy leaves its own.
func (t *peerTransport) closeAll() {
	t.CloseIdleConnections()
	t.h2Conns.CloseAll()
}

// peerHealth is the passive health of peer gateways by the address their
// URL dials: a peer that could not be connected to, or that did not
// answer a forward within the cluster deadline, cools down (1 s, doubling
// to 30 s while it keeps failing, as a host does) and requests skip it
// meanwhile. A cluster can stay active in the set while its gateways
// cannot be reached from here (it still announces on the bus, or a
// /healthz path answers that the public one does not), or for the 10-15 s
// its probes take to notice that it hung: without this every request for
// its apps waited out the connect timeout, or the whole deadline, before
// the next cluster was tried (DESIGN §5.2: owner unreachable → the
// others). Only failing addresses are kept: an answer from the peer
// forgets its address. A connect that succeeds does not: a hung gateway
// accepts connections, and its cool-down would never grow.
type peerHealth struct {
	now   func() time.Time
	mu    sync.Mutex
	addrs map[string]*route.Health
}

// dial wraps d's DialContext with the bookkeeping. The transport dials
// apart from any one request (a cancelled request does not cancel its
// dial), so a hung connect is counted when it times out even if every
// request that wanted it has given up.
func (p *peerHealth) dial(d *net.Dialer) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil && ctx.Err() == nil { // not one the transport called off itself
			p.fail(addr)
		}
		return c, err
	}
}

// fail starts or lengthens addr's cool-down.
func (p *peerHealth) fail(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.addrs[addr]
	if h == nil {
		if p.addrs == nil {
			p.addrs = map[string]*route.Health{}
		}
		h = new(route.Health)
		p.addrs[addr] = h
	}
	h.Fail(p.now())
}

// stalled records that the peer at u did not answer within the cluster
// deadline. Nil p ignores it.
func (p *peerHealth) stalled(u *url.URL) {
	if p != nil {
		p.fail(peerDialAddr(u))
	}
}

// unreachable records that the transport got no connection to the peer at
// u although its dial succeeded (the TLS handshake failed). Nil p ignores
// it.
func (p *peerHealth) unreachable(u *url.URL) {
	if p != nil {
		p.fail(peerDialAddr(u))
	}
}

// answered forgets the peer at u: it answered. Nil p ignores it.
func (p *peerHealth) answered(u *url.URL) {
	if p == nil {
		return
	}
	addr := peerDialAddr(u)
	p.mu.Lock()
	delete(p.addrs, addr)
	p.mu.Unlock()
}

// coolingDown reports whether the peer at u is to be skipped at now. Nil
// p (a transport that is not the gateway's own) never is.
func (p *peerHealth) coolingDown(u *url.URL, now time.Time) bool {
	if p == nil {
		return false
	}
	addr := peerDialAddr(u)
	p.mu.Lock()
	h := p.addrs[addr]
	p.mu.Unlock()
	return h != nil && h.Degraded(now)
}

// peerDialAddr is the address the transport dials for u.
func peerDialAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// closeCluster closes the connections to peer gateways (peerTransport's
// closeAll). Idempotent. Gateway.Close should call it.
func (g *Gateway) closeCluster() {
	if g.clusters.transport != nil {
		g.clusters.transport.closeAll()
	}
}

// set returns the cluster set when it is usable for this gateway: known,
// and this cluster's.
func (st *clusterState) set(self string) (cluster.Set, bool) {
	if st.members == nil {
		return cluster.Set{}, false
	}
	s := st.members()
	return s, s.Self() == self
}

// verifyForward checks the marks of a request forwarded by a peer gateway
// (DESIGN §5.3): exactly one X-Gatehouse-Forwarded naming a known cluster
// other than this one, and one X-Gatehouse-Client whose signature verifies
// with that cluster's key from discovery, over this request's Host, with a
// ts within 30 s of now. It returns the client address the peer vouches
// for and the peer's id. Hygiene calls it before stripping every
// X-Gatehouse-* header, and believes the result only when ok.
//
// Any X-Gatehouse-Forwarded sets the request's ForwardMarked, verified
// or not, whoever it names: the request is served here and never
// forwarded again. That is stricter than the seed DESIGN, on purpose: two
// gateways that cannot verify each other's marks (a wrong key in either's
// config) and disagree on the owner would bounce the request between
// them until the deadline, and so would gateways whose sets differ (a
// mark naming a cluster this one does not know, a→b→c→a) or a clusters:
// entry that reaches this gateway (a mark naming this cluster): one GET
// bounced 1,801 times in a review, until the hops, charged to the
// gateway's own address, used up the app's rate limit for every client.
// A client gains nothing by it: forging a mark naming a known peer always
// stopped forwarding. Only a verified mark names the client.
//
// A mark names a peer when it has one X-Gatehouse-Forwarded, naming a
// cluster of the set other than this one. A refused one that names a
// peer is a misconfiguration until shown otherwise, so it is a warning
// (one every warnEvery per peer) as well as a count.
func (g *Gateway) verifyForward(r *http.Request) (clientIP netip.Addr, fromCluster string, ok bool) {
	fwd, client := r.Header[cluster.HeaderForwarded], r.Header[cluster.HeaderClient]
	if len(fwd) == 0 && len(client) == 0 {
		return netip.Addr{}, "", false
	}
	if rq := route.RequestFrom(r.Context()); rq != nil && len(fwd) > 0 {
		rq.ForwardMarked = true
	}
	set, known := g.clusters.set(g.clusterID)
	var peer cluster.Peer
	found := false
	if known && len(fwd) == 1 && fwd[0] != g.clusterID {
		peer, found = set.Peer(fwd[0])
	}
	if !found {
		g.metrics.ForwardMarksRefused.WithLabelValues("_unknown").Inc()
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			// The client's fields as sent, which may be as long as the
			// header block: cut, and joined only for a line written.
			g.log.Debug("gateway: forward mark naming no peer stripped", "from", logcut.Value(strings.Join(fwd, ", ")))
		}
		return netip.Addr{}, "", false
	}
	var ip netip.Addr
	err := errors.New("no single X-Gatehouse-Client")
	if len(client) == 1 {
		ip, err = cluster.VerifyClient(peer.PublicKey, peer.ID, client[0], r.Host, g.now())
	}
	if err != nil {
		g.metrics.ForwardMarksRefused.WithLabelValues(peer.ID).Inc()
		if g.clusters.warnAllowed("mark", peer.ID, g.now()) {
			g.log.Warn("gateway: a forward mark naming a peer cluster did not verify; the request is served here as the connecting address's (check that peer's public_key in this gateway's clusters, and both clocks)",
				"from", peer.ID, "remote", r.RemoteAddr, "err", err)
		}
		return netip.Addr{}, "", false
	}
	if rq := route.RequestFrom(r.Context()); rq != nil {
		rq.ForwardMark = client[0]
	}
	return ip, peer.ID, true
}

// unknownAtOwner answers a peer's verified forward for a host this
// gateway routes to no app: with separate stores the owner need not know
// an app its peers serve, and its 404 ("no app is served at this host")
// went back to the client although the forwarding cluster had hosts for
// it. No host here saw the request, so it gets the signed no-host 503
// (DESIGN §5.2) and the forwarding gateway serves it itself. It is not
// charged to the unknown-host budget: the peer's client did not scan
// names. Any other request is left alone (false, nothing written).
func (g *Gateway) unknownAtOwner(w http.ResponseWriter, r *http.Request) bool {
	if g.clusters.members == nil || len(r.Header[cluster.HeaderForwarded]) == 0 {
		return false
	}
	if _, _, ok := g.verifyForward(r); !ok {
		return false
	}
	w.Header()[cluster.HeaderNoHost] = []string{cluster.SignNoHost(g.clusters.key, g.clusterID, r.Header[cluster.HeaderClient][0])}
	problem.Write(w, http.StatusServiceUnavailable, "no app is served at this host in this cluster")
	return true
}

// affinity is step 9: a request for an app owned by another active
// cluster is forwarded to that cluster's gateway, once. It is served here
// when this cluster owns the app, when the owner is unknown, when the
// request was itself forwarded (one hop), or when the owner cannot take
// it (DESIGN §5.2): unreachable, or a GET/HEAD/OPTIONS answered ≥ 500.
func (g *Gateway) affinity(next http.Handler) http.Handler {
	st := &g.clusters
	if st.members == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		if rq != nil && rq.ForwardedBy != "" && rq.Match.Kind == route.KindApp {
			// A verified forward: the peer's deadline has been running
			// since it got the request, and a host here that does not
			// answer is to be this gateway's 504, which reaches the peer
			// in time, not the peer's deadline, which takes this gateway
			// for a hung one and sends every app it owns elsewhere.
			exchangeFrom(r.Context()).hold() // the deadline's timer, as a forward's
			g.serveLocal(w, r, rq, next, g.clusters.deadline-forwardMargin(g.clusters.deadline), "the app did not answer in time")
			return
		}
		if !st.affinity || rq == nil || rq.Match.Kind != route.KindApp || rq.Match.App == nil ||
			rq.ForwardMarked || !rq.ClientIP.IsValid() {
			next.ServeHTTP(w, r)
			return
		}
		set, ok := st.set(g.clusterID)
		owner := set.Owner(rq.Match.App.ID, st.hash)
		if !ok || owner == "" || owner == g.clusterID {
			next.ServeHTTP(w, r)
			return
		}
		// A forward's transport and its deadline's timer may use the
		// request's context after it is answered.
		exchangeFrom(r.Context()).hold()
		peer, _ := set.Peer(owner)
		body := &keptBody{}
		var small []byte // a small write's body, read before the forward
		if r.Body != nil && r.Body != http.NoBody {
			if !replayable(r) && r.ContentLength > 0 && r.ContentLength <= maxKeptBody {
				// Kept whole, a write the owner proves no host of its saw
				// can still be served here with its body.
				small = make([]byte, r.ContentLength)
				began := g.now()
				_, err := io.ReadFull(r.Body, small)
				var extra []byte
				if err == nil && r.Trailer != nil {
					// On to the body's end, where nothing more is: that is
					// where the server fills in an HTTP/2 request's
					// trailers (and hygiene's guard drops forged ones).
					// Stopped at the length, the forward carried none.
					// Only when trailers are declared: an HTTP/2 client
					// may hold its stream open after the last byte until
					// it has an answer, and would wait for it for ever.
					extra, err = io.ReadAll(io.LimitReader(r.Body, 1))
				}
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						problem.Write(w, http.StatusRequestTimeout, "the request body stopped coming")
						return
					}
					problem.Write(w, http.StatusBadRequest, "the request body ended before its Content-Length")
					return
				}
				if len(extra) > 0 { // the servers refuse such a body themselves; kept for any other
					problem.Write(w, http.StatusBadRequest, "the request body is longer than its Content-Length")
					return
				}
				// The client's upload is not the clusters' time (as
				// sparingUpload spares a streamed one): the deadline
				// starts that much later for the owner and the local
				// attempt after it.
				r = r.WithContext(context.WithValue(r.Context(), uploadSpentKey{}, g.now().Sub(began)))
				r.Body = io.NopCloser(bytes.NewReader(small))
			} else {
				body.ReadCloser = r.Body
				r.Body = body
				if r.ProtoMajor == 1 {
					// The forward sends the upload on as the owner's
					// answer comes, as the proxy does to a host, and for
					// the same reason (internal/proxy): an HTTP/1 server
					// otherwise reads what is left of it as the answer's
					// head goes out and drops it, up to 256 KiB. The
					// owner's host got a chunked upload with that much
					// missing from its middle, as if whole, and one of
					// known length cut.
					_ = http.NewResponseController(w).EnableFullDuplex()
				}
			}
		}
		a := g.tryPeer(w, r, rq, peer, false)
		// Resent here: what may go to a second cluster anyway, and a write
		// no host of the owner's saw (it could not be reached, or said so)
		// whose body is still whole.
		resend := replayable(r) || (a.unsent || a.noHost) && (small != nil || !body.touched())
		// An owner without a host for the app is how apps are deployed at
		// times (DESIGN §5.2); an owner that fails is worth a warning.
		if a.outcome == outcomeMoveOn && !a.noHost && st.warnAllowed("owner", owner, g.now()) {
			g.log.Warn("gateway: the owner cluster could not take a request for its app (one line per owner every 10 s; gatehouse_cluster_forwards_total counts them)",
				"app", rq.Match.App.ID, "owner", owner, "method", logcut.Method(r.Method), "served_here", resend, "err", a.err)
		}
		switch {
		case a.outcome == outcomeMoveOn && resend:
			// Serve here; failover (if it comes to that) skips the owner.
			g.log.Debug("gateway: owner cannot serve, serving locally", "app", rq.Match.App.ID, "owner", owner, "err", a.err)
			if small != nil {
				r.Body = io.NopCloser(bytes.NewReader(small))
			}
			tried := ownerTried{id: owner, noHost: a.status == http.StatusServiceUnavailable}
			g.serveLocal(w, r.WithContext(context.WithValue(r.Context(), ownerTriedKey{}, tried)), rq, next, st.deadline, "no cluster answered in time")
		case a.outcome == outcomeMoveOn && a.noHost:
			// The body streamed to the owner, which had no host for it:
			// gone, so not servable here either.
			problem.Write(w, http.StatusServiceUnavailable, "the owner cluster has no host for this app, and the request's body went to it")
		case a.outcome == outcomeMoveOn:
			// A write that may have reached the owner: never replayed.
			writeUpstreamError(w, a.err)
		default:
			g.finishAttempt(w, rq, a)
		}
	})
}

// forwardMargin is how much sooner than the cluster deadline a gateway
// answers a forward whose host has not answered: the forwarding gateway's
// deadline started before the forward reached this one (a connection, a
// TLS handshake, the request on its way), and this gateway's answer has
// the way back to go. A quarter of the deadline, at most 1 s: three round
// trips of 300 ms.
func forwardMargin(deadline time.Duration) time.Duration {
	return min(deadline/4, time.Second)
}

// serveLocal serves r here within what is left of budget, counted from
// when r's cluster deadline started: after r's owner could not serve it,
// the cluster deadline (DESIGN §5.2: one deadline covers the owner
// forward and the local attempt); for a forward from a peer, a little
// less (forwardMargin). The proxy's ResponseHeaderTimeout counts from the
// local attempt's own start, so without this a slow owner answer and a
// slow host add up to twice the deadline. If the budget runs out before
// the local response has started, the attempt is cancelled and the
// client gets 504 with detail; a response that has started is never cut.
func (g *Gateway) serveLocal(w http.ResponseWriter, r *http.Request, rq *route.Request, next http.Handler, budget time.Duration, detail string) {
	left := g.deadlineStart(r, rq).Add(budget).Sub(g.now())
	if left <= 0 {
		problem.Write(w, http.StatusGatewayTimeout, detail)
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	lw := &localWriter{ResponseWriter: w}
	cause := errDeadline
	if rq.ForwardedBy != "" {
		// The host had all the time the forward has: it answers for it,
		// as for the proxy's head timeout.
		cause = errForwardDeadline
	}
	lw.clock.start(left, func() {
		if lw.state.CompareAndSwap(localWaiting, localExpired) {
			cancel(cause)
		}
	})
	defer lw.clock.stop()
	next.ServeHTTP(lw, sparingUpload(r.WithContext(ctx), &lw.clock))
	if lw.state.Load() == localExpired && !lw.wrote.Load() {
		// The proxy took the cancellation for a client gone and wrote
		// nothing: the deadline is what ended the attempt.
		problem.Write(w, http.StatusGatewayTimeout, detail)
	}
}

// localWriter is the writer of serveLocal's attempt: the first final
// status, flush or hijack stops the deadline, so a response that has
// started is never cut by it.
type localWriter struct {
	http.ResponseWriter
	clock deadlineClock
	state atomic.Int32 // localWaiting, then localStarted or localExpired
	wrote atomic.Bool  // a final status was written
}

const (
	localWaiting int32 = iota
	localStarted
	localExpired
)

func (w *localWriter) start() {
	w.wrote.Store(true)
	if w.state.CompareAndSwap(localWaiting, localStarted) {
		w.clock.stop()
	}
}

func (w *localWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.start()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *localWriter) Write(b []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(b)
}

// FlushError flushes (Server-Sent Events); the fast path asserts
// http.Flusher, so both are implemented.
func (w *localWriter) FlushError() error {
	w.start()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *localWriter) Flush() { _ = w.FlushError() }

// Hijack hands the connection over (WebSocket): the upgrade has started.
func (w *localWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.start()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *localWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ownerTriedKey marks a request the affinity layer already forwarded to
// its owner (the value is an ownerTried), so failover does not try it
// twice.
type ownerTriedKey struct{}

// ownerTried is how the owner answered a request it could not serve.
type ownerTried struct {
	id     string
	noHost bool // it answered 503: no host there
}

// failover is the proxy's Fallback (DESIGN §5.2): the local attempt could
// not serve the request (no routable host, or every host unreachable)
// and nothing has been written. A verified forward gets the signed no-host
// 503, failover on or off. With failover on, a GET/HEAD/OPTIONS without a
// body is sent to the owner, then the other active peers in id order after
// self, under the one cluster deadline; the first peer answer below 500 is returned
// with X-Failover-Cluster. It returns false, leaving the proxy's own
// 502/503, for writes, forwarded requests (one hop), and when no peer
// answered below 500 — except that the proxy's 503 (no host here) becomes
// 502 when a cluster tried could have had one (with failover off too, for
// the owner it forwarded to): DESIGN §5.2 keeps 503 for
// no host anywhere, so it is answered only when every peer tried said 503
// too. A peer that answered another 5xx has hosts that failed, and one
// that could not be reached may have hosts: that is "no peer available".
func (g *Gateway) failover(w http.ResponseWriter, r *http.Request, cause error) bool {
	st := &g.clusters
	rq := route.RequestFrom(r.Context())
	if rq != nil && rq.ForwardedBy != "" && rq.ForwardMark != "" {
		// No host here saw this forward: every cause the proxy falls back
		// on says so (no host; hosts, but none routable, unhealthy or
		// draining; every try failed to connect, the body untouched). The
		// 503 says so, signed, and the gateway that forwarded it may serve
		// it itself, a write included, where it may have a healthy host.
		w.Header()[cluster.HeaderNoHost] = []string{cluster.SignNoHost(st.key, g.clusterID, rq.ForwardMark)}
		if errors.Is(cause, proxy.ErrNoHost) {
			return false // the proxy's own 503
		}
		problem.Write(w, http.StatusServiceUnavailable, "no host of this cluster can take the request")
		return true
	}
	tried, ownerWasTried := r.Context().Value(ownerTriedKey{}).(ownerTried)
	hostElsewhere := ownerWasTried && !tried.noHost
	if rq != nil && rq.Match.App != nil && (!replayable(r) || !st.failover) && hostElsewhere && errors.Is(cause, proxy.ErrNoHost) {
		// A request no other peer will be asked for (a write, or failover
		// off) that the owner could not take (unreachable, or no answer)
		// and no host here: the owner may well have hosts, so it is "no
		// peer available", 502, not the proxy's 503 for no host anywhere.
		problem.Write(w, http.StatusBadGateway, fmt.Sprintf("no host here, and the owner cluster %s could not take the request", tried.id))
		return true
	}
	if !st.failover {
		return false
	}
	if rq == nil || rq.Match.App == nil || rq.ForwardedBy != "" || rq.ForwardMarked || !replayable(r) || !rq.ClientIP.IsValid() {
		return false
	}
	set, ok := st.set(g.clusterID)
	if !ok {
		return false
	}
	app := rq.Match.App.ID
	for _, peer := range set.Failover(set.Owner(app, st.hash)) {
		if ownerWasTried && peer.ID == tried.id {
			continue
		}
		a := g.tryPeer(w, r, rq, peer, true)
		if a.outcome == outcomeMoveOn {
			g.log.Debug("gateway: failover peer skipped", "app", app, "cluster", peer.ID, "err", a.err)
			hostElsewhere = hostElsewhere || a.status != http.StatusServiceUnavailable
			continue
		}
		if a.outcome == outcomeServed {
			rq.FailoverCluster = peer.ID
			g.log.Debug("gateway: failed over", "app", app, "cluster", peer.ID, "cause", cause)
		}
		g.finishAttempt(w, rq, a)
		return true
	}
	if hostElsewhere && errors.Is(cause, proxy.ErrNoHost) {
		detail := "no cluster could serve this app"
		if ownerWasTried && !tried.noHost {
			detail = fmt.Sprintf("no host here, and no cluster could serve this app (its owner, %s, could not take the request)", tried.id)
		}
		problem.Write(w, http.StatusBadGateway, detail)
		return true
	}
	return false
}

// replayable: a request that may be sent to a second cluster after a
// first could not serve it — GET, HEAD or OPTIONS, and no body.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return r.ContentLength == 0
	}
	return false
}

// outcome is how one attempt at a peer ended.
type outcome uint8

const (
	outcomeServed   outcome = iota // the peer's response was written to w
	outcomeMoveOn                  // nothing written; the next candidate may try
	outcomeDeadline                // the cluster deadline passed: answer 504
	outcomeGone                    // the client went away: answer nothing
)

// peerAttempt is one request's attempt at one peer gateway, carried in
// the outbound request's context so the ReverseProxy hooks see it.
type peerAttempt struct {
	g        *Gateway
	w        http.ResponseWriter
	rq       *route.Request
	peer     cluster.Peer
	target   *url.URL
	failover bool
	retry    bool // a ≥ 500 answer is skipped (replayable request)
	clock    deadlineClock
	outcome  outcome
	err      error
	unsent   bool // no connection to the peer was had (refused, timed out, TLS failed): it got nothing
	// connected: the transport had a connection for the request
	// (httptrace's GotConn), so some of it may have reached the peer.
	connected atomic.Bool
	status    int    // the 5xx a skipped peer answered; 0 when it did not answer
	mark      string // the X-Gatehouse-Client value sent
	noHost    bool   // the owner answered, signed, that no host of its saw the request
}

type peerAttemptKey struct{}

var (
	errDeadline = errors.New("gateway: cluster deadline passed")
	// errForwardDeadline ends a peer's forward whose host here has not
	// answered (serveLocal): a context.DeadlineExceeded, which the proxy
	// takes for the host's timeout, not for the client leaving.
	errForwardDeadline = fmt.Errorf("gateway: a forward's share of the cluster deadline passed: %w", context.DeadlineExceeded)
	errSkip            = errors.New("gateway: peer answered 5xx")
	// errPeerCooling: a recent connect to the peer failed (peerHealth).
	errPeerCooling = errors.New("gateway: peer unreachable, cooling down")
)

// tryPeer sends r to peer's gateway, with the forward marks, and writes
// the peer's response to w unless the attempt ends otherwise (see
// outcome). It waits for response headers at most until the cluster
// deadline.
func (g *Gateway) tryPeer(w http.ResponseWriter, r *http.Request, rq *route.Request, peer cluster.Peer, failover bool) *peerAttempt {
	a := &peerAttempt{g: g, w: w, rq: rq, peer: peer, failover: failover, retry: replayable(r)}
	defer g.countForward(a)
	u, err := cluster.ParseURL(peer.URL)
	if err != nil {
		a.outcome, a.err, a.unsent = outcomeMoveOn, err, true
		return a
	}
	a.target = u
	if g.clusters.health.coolingDown(u, time.Now()) {
		a.outcome, a.err, a.unsent = outcomeMoveOn, fmt.Errorf("%w: %s", errPeerCooling, peer.ID), true
		return a
	}
	left := g.deadlineStart(r, rq).Add(g.clusters.deadline).Sub(g.now())
	if left <= 0 {
		a.outcome, a.err = outcomeDeadline, errDeadline
		return a
	}
	ctx := context.WithValue(r.Context(), peerAttemptKey{}, a)
	if g.clusters.traced {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { a.connected.Store(true) }})
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.clock.start(left, func() { cancel(errDeadline) })
	defer a.clock.stop()
	g.clusters.rp.ServeHTTP(w, sparingUpload(r.WithContext(ctx), &a.clock))
	if a.outcome == outcomeDeadline && left >= g.clusters.deadline/2 {
		g.peerStalled(r, a)
	}
	return a
}

// uploadSpentKey carries, in a request's context, how long affinity
// waited for the body of a small write it read whole before the forward
// (a time.Duration).
type uploadSpentKey struct{}

// deadlineStart is when r's cluster deadline started: when the gateway
// received it, later by the time a small write's body took to arrive
// (uploadSpentKey). The client's upload is not the clusters' time: without
// this a slow client's 600-byte POST got 504 through a non-owner, no
// cluster ever asked, and 200 through the owner.
func (g *Gateway) deadlineStart(r *http.Request, rq *route.Request) time.Time {
	start := rq.Start
	if start.IsZero() {
		start = g.now()
	}
	if d, ok := r.Context().Value(uploadSpentKey{}).(time.Duration); ok {
		start = start.Add(d)
	}
	return start
}

// peerStalled handles a peer that had at least half the cluster deadline
// and did not answer in it: a gateway that hangs (accepts connections,
// never answers) stays active in the set until its probes miss three
// times, 10-15 s, and without a cool-down each request for its apps
// waited the whole deadline. One that had less may only have been left
// too little by a slow local attempt, and is not blamed.
func (g *Gateway) peerStalled(r *http.Request, a *peerAttempt) {
	g.clusters.health.stalled(a.target)
	if g.clusters.warnAllowed("deadline", a.peer.ID, g.now()) {
		g.log.Warn("gateway: a peer cluster did not answer a forward within cluster.deadline; it is skipped for a cool-down (one line per peer every 10 s; gatehouse_cluster_forwards_total{result=\"deadline\"} counts them)",
			"cluster", a.peer.ID, "failover", a.failover, "method", logcut.Method(r.Method), "deadline", g.clusters.deadline)
	}
}

// countForward counts how attempt a ended in ClusterForwards.
func (g *Gateway) countForward(a *peerAttempt) {
	kind := "owner"
	if a.failover {
		kind = "failover"
	}
	var result string
	switch a.outcome {
	case outcomeServed:
		result = metrics.ForwardAnswered
	case outcomeDeadline:
		result = metrics.ForwardDeadline
	case outcomeGone:
		result = metrics.ForwardCanceled
	default:
		switch {
		case a.noHost:
			result = metrics.ForwardNoHost
		case a.unsent:
			result = metrics.ForwardUnreachable
		default:
			result = metrics.ForwardFailed
		}
	}
	g.metrics.ClusterForwards.WithLabelValues(a.peer.ID, kind, result).Inc()
}

// sparingUpload returns r (a copy of the caller's request) whose body
// pauses c while each read waits for the client's bytes. The client's
// upload is not the clusters' time: the proxy's header timeout also
// starts only once the body is sent, and a slow upload must not get 504
// through one gateway and 200 through the owner's. The time the body
// waits for the owner or a host to take it does count: one that stops
// reading it is bounded by the deadline like one that does not answer.
func sparingUpload(r *http.Request, c *deadlineClock) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	r.Body = &sparedBody{ReadCloser: r.Body, c: c}
	return r
}

// sparedBody is a request body whose reads pause a deadlineClock.
type sparedBody struct {
	io.ReadCloser
	c *deadlineClock
}

func (b *sparedBody) Read(p []byte) (int, error) {
	b.c.pause()
	defer b.c.resume()
	return b.ReadCloser.Read(p)
}

// deadlineClock is what is left of the cluster deadline for one attempt
// (a peer's, or the local one after the owner's): it runs until response
// headers are in, except while the request's body waits for the client.
type deadlineClock struct {
	mu    sync.Mutex
	timer *time.Timer
	state int           // clockRunning, clockPaused, clockFired or clockStopped
	at    time.Time     // when it fires, while running
	left  time.Duration // what is left, while paused
}

const (
	clockRunning = iota
	clockPaused
	clockFired
	clockStopped
)

func (c *deadlineClock) start(left time.Duration, fire func()) {
	c.at = time.Now().Add(left)
	c.timer = time.AfterFunc(left, func() {
		c.mu.Lock()
		run := c.state == clockRunning
		if run {
			c.state = clockFired
		}
		c.mu.Unlock()
		if run {
			fire()
		}
	})
}

func (c *deadlineClock) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == clockRunning && c.timer.Stop() {
		c.state, c.left = clockPaused, time.Until(c.at)
	}
}

func (c *deadlineClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == clockPaused {
		c.state, c.at = clockRunning, time.Now().Add(c.left)
		c.timer.Reset(c.left)
	}
}

// stop ends the clock; it reports false when the deadline had passed.
func (c *deadlineClock) stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == clockFired {
		return false
	}
	c.state = clockStopped
	c.timer.Stop()
	return true
}

// rewritePeer builds the request to a peer gateway: its URL, the client's
// own Host, this gateway's signed marks and its request id.
// X-Forwarded-For/Host and Forwarded were removed by ReverseProxy: the
// peer computes its own, and learns the client's address from the signed
// mark. X-Forwarded-Proto is this gateway's (the client's scheme), which
// the peer keeps only when the mark verifies.
func (g *Gateway) rewritePeer(pr *httputil.ProxyRequest) {
	a := pr.In.Context().Value(peerAttemptKey{}).(*peerAttempt)
	pr.SetURL(a.target)
	host := pr.In.Host
	if !isASCII(host) {
		// Only HTTP/2's :authority can be so (net/http refuses such a
		// Host over HTTP/1). net/http's transport would send its own
		// punycode of it, without the lookup mapping the route layer
		// applied: not the name signed below, and for a name the mapping
		// changes (full-width letters) not the name routed. Send and sign
		// the name routed.
		host = a.rq.Match.Name
	}
	pr.Out.Host = host
	if pr.In.Trailer != nil {
		// The incoming map, which net/http fills once the body has been
		// read (and hygiene's guard cleans): ProxyRequest's clone of it
		// holds only the declared names, so the peer would get none. To an
		// http peer only a chunked body carries them (as proxy's rewrite).
		pr.Out.Trailer = pr.In.Trailer
		pr.Out.ContentLength = -1
	}
	h := pr.Out.Header
	if v := pr.In.Header["X-Forwarded-Proto"]; len(v) > 0 {
		h["X-Forwarded-Proto"] = v // hygiene's: the client's scheme, which the peer's host is to see
	}
	if v := pr.In.Header[headerRequestID]; len(v) > 0 {
		// observe's, which the peer keeps: ReverseProxy removed it if the
		// client's Connection named it, and the peer would make another
		// id, so the trace would not join up. A client's hop-by-hop list
		// drops only fields of its own.
		h[headerRequestID] = v
	}
	h[cluster.HeaderForwarded] = g.clusterHdr
	a.mark = cluster.SignClient(g.clusters.key, g.clusterID, a.rq.ClientIP.String(), g.now(), host)
	h[cluster.HeaderClient] = []string{a.mark}
}

// modifyPeerResponse runs once a peer's response headers are in: the
// deadline no longer applies; a ≥ 500 answer to a replayable request is
// skipped; the peer's headers replace this gateway's own (CORS and rate
// limit headers the layers above set), and a failover is labelled.
func modifyPeerResponse(res *http.Response) error {
	a := res.Request.Context().Value(peerAttemptKey{}).(*peerAttempt)
	if !a.clock.stop() {
		return errDeadline
	}
	if res.StatusCode < 100 || res.StatusCode > 599 {
		// A host's bound (DESIGN §2 step 10): no HTTP answer (RFC 9110
		// §15), and under 100 writing it panics. The peer has not
		// answered: a GET is served elsewhere, a write gets 502.
		return fmt.Errorf("gateway: %s answered status %03d, outside 100-599", a.peer.ID, res.StatusCode)
	}
	a.g.clusters.health.answered(a.target)
	noHost := res.Header[cluster.HeaderNoHost]
	delete(res.Header, cluster.HeaderNoHost)
	if res.StatusCode == http.StatusServiceUnavailable && !a.failover && len(noHost) == 1 &&
		cluster.VerifyNoHost(a.peer.PublicKey, a.peer.ID, a.mark, noHost[0]) {
		// The owner's own word that none of its hosts saw the request:
		// even a write may then be served here (affinity decides).
		a.status, a.noHost = res.StatusCode, true
		return fmt.Errorf("%w: %s has no host for the app", errSkip, a.peer.ID)
	}
	if res.StatusCode >= 500 && a.retry {
		a.status = res.StatusCode
		return fmt.Errorf("%w: %s answered %d", errSkip, a.peer.ID, res.StatusCode)
	}
	wh := a.w.Header()
	for k := range res.Header {
		delete(wh, k)
	}
	if x := exchangeFrom(res.Request.Context()); x != nil && x.w.interim {
		// After a 1xx the recorder puts this gateway's rate fields back
		// on the final answer; the peer's replace them as above.
		for i, k := range rateFields {
			if _, ok := res.Header[k]; ok {
				x.w.rate[i] = nil
			}
		}
	}
	delete(res.Header, cluster.HeaderFailover)
	if a.failover {
		res.Header[cluster.HeaderFailover] = []string{a.peer.ID}
	}
	if _, ok := res.Header[cluster.HeaderCluster]; !ok {
		res.Header[cluster.HeaderCluster] = []string{a.peer.ID}
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// As proxy's modifyResponse does: without the request, whose
		// method ReverseProxy's res.Write reads, a 101 to a POST, PUT or
		// PATCH gets no "Content-Length: 0" (RFC 9110 §8.6); ReverseProxy
		// tunnels for the request it holds itself.
		res.Request = nil
	}
	return nil
}

// peerError is ReverseProxy's ErrorHandler for peer attempts: it only
// records how the attempt ended; tryPeer's caller answers.
func peerError(_ http.ResponseWriter, out *http.Request, err error) {
	a := out.Context().Value(peerAttemptKey{}).(*peerAttempt)
	a.err = err
	switch {
	case errors.Is(err, errDeadline) || errors.Is(context.Cause(out.Context()), errDeadline):
		a.outcome, a.err = outcomeDeadline, errDeadline
	case errors.Is(err, errSkip):
		a.outcome = outcomeMoveOn
	case out.Context().Err() != nil:
		a.outcome = outcomeGone
	default:
		var op *net.OpError
		dialed := errors.As(err, &op) && op.Op == "dial"
		// A TLS handshake that failed (the peer hung up in it, or showed
		// a certificate this gateway does not trust) is no dial error,
		// but no byte of the request went out either: a write may be
		// served here, as when the connect is refused, and the peer cools
		// down as then (the dial itself counted its own failures).
		a.unsent = dialed || a.g.clusters.traced && !a.connected.Load()
		if a.unsent && !dialed {
			a.g.clusters.health.unreachable(a.target)
		}
		a.outcome, a.err = outcomeMoveOn, explainPeerTLS(err)
	}
}

// untrustedPeerCA is added to the error of a forward to a peer cluster
// whose certificate chains to no root this gateway trusts: gatehouse has
// no setting for a private CA, Go's system roots (SSL_CERT_FILE,
// SSL_CERT_DIR on Linux) are where it goes (docs/config.md, "Private
// CA"). internal/bus says the same of the bus; STYLE §6.1 keeps the
// gateway from importing it.
const untrustedPeerCA = "the peer cluster's certificate is not signed by a CA this process trusts: for a private CA, start gatehouse with SSL_CERT_FILE set to the CA's PEM file, or SSL_CERT_DIR to a directory holding it"

// explainPeerTLS returns err with untrustedPeerCA when the peer's
// certificate's signer is unknown, and err as it is otherwise. Called on
// a failed forward alone: an answered one costs nothing more.
func explainPeerTLS(err error) error {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w (%s)", err, untrustedPeerCA)
	}
	return err
}

// finishAttempt answers for an attempt that ended without the peer's
// response being written.
func (g *Gateway) finishAttempt(w http.ResponseWriter, rq *route.Request, a *peerAttempt) {
	switch a.outcome {
	case outcomeDeadline:
		problem.Write(w, http.StatusGatewayTimeout, "no cluster answered in time")
	case outcomeGone:
		rq.Status = 499 // for the access log; never sent
	}
}

// writeUpstreamError answers a write whose forward failed after it may
// have reached the owner: 504 for a timeout, else 502.
func writeUpstreamError(w http.ResponseWriter, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		problem.Write(w, http.StatusGatewayTimeout, "the owner cluster did not answer in time")
		return
	}
	problem.Write(w, http.StatusBadGateway, "the owner cluster is unreachable")
}

// maxKeptBody bounds the body of a write read whole before its forward to
// the owner (see affinity): at most this much memory per forwarded write,
// the size of most API calls and forms. A larger or chunked body streams
// to the owner and cannot be served here after.
const maxKeptBody = 16 << 10

// keptBody is the request body while it is offered to the owner cluster:
// ReverseProxy's transport closes the body it sent, but if the owner got
// none of it the local attempt still needs it. Close is a no-op; the
// server closes the real body when the handler returns.
type keptBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *keptBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.ReadCloser.Read(p)
}

func (b *keptBody) Close() error { return nil }

func (b *keptBody) touched() bool { return b.read.Load() }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
