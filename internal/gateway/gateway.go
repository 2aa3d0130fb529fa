// Package gateway is the L7 request path of DESIGN §2: one ordered list of
// layers (chain.go is the table of contents) from healthz to dispatch.
// A [Gateway] is an http.Handler; the listeners (internal/edge) serve it on
// the https listener after TLS and on the http listener in serve mode.
//
// Each layer answers the request or calls the next, and knows nothing of
// the layers above it. What a layer learns travels down in the request's
// context as one [route.Request]: observe creates it, route fills the
// table snapshot and the match, hygiene the client address, auth the
// token subject; dispatch (internal/proxy) reads them.
package gateway

import (
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// Gateway is the L7 request path. Build it with [New]; it is safe for
// concurrent use and starts no goroutine of its own.
type Gateway struct {
	clusterID  string
	clusterHdr []string // shared, never modified: the X-Gatehouse-Cluster value
	live       *route.Live
	trusted    []netip.Prefix
	log        *slog.Logger
	now        func() time.Time
	metrics    *metrics.Set
	accessLog  bool
	tunnelIdle time.Duration // Options.TunnelIdleTimeout; 0: no bound
	conns      *route.Conns  // Options.Conns; nil: upgrades not held

	api     http.Handler // api.{zone}, behind hygiene; nil: 404
	proxy   *proxy.Proxy
	handler http.Handler // the folded chain

	// peerFallback answers a request no local host can serve, by
	// forwarding it to a peer cluster (DESIGN §5.2). The cluster layer
	// (affinity.go) sets it in initCluster; nil means no failover. New
	// hands it to the proxy as proxy.Options.Fallback.
	peerFallback func(w http.ResponseWriter, r *http.Request, cause error) bool

	// edge is the state of the protection layers (cors.go, limit.go,
	// auth.go, policy.go), built by initEdge.
	edge edgeState
	// clusters is the state of the affinity layer, built by initCluster.
	clusters clusterState

	// exchanges holds the exchanges RequestDone took back (layers.go).
	exchanges sync.Pool
}

var _ http.Handler = (*Gateway)(nil)

// New validates opts and builds the chain. It starts nothing; the only
// side effect is registering the metrics on opts.Registry when
// opts.Metrics is nil.
func New(opts Options) (*Gateway, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	g := &Gateway{
		clusterID:  opts.ClusterID,
		clusterHdr: []string{opts.ClusterID},
		live:       opts.Live,
		log:        opts.Logger,
		now:        opts.Now,
		metrics:    opts.Metrics,
		accessLog:  opts.AccessLog,
		tunnelIdle: opts.TunnelIdleTimeout,
		conns:      opts.Conns,
	}
	for _, p := range opts.TrustedProxies {
		g.trusted = append(g.trusted, p.Masked())
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.metrics == nil {
		m, err := metrics.New(opts.Registry)
		if err != nil {
			return nil, err
		}
		g.metrics = m
	}
	if err := g.initEdge(opts.Edge); err != nil {
		return nil, err
	}
	if err := g.initCluster(opts.Cluster); err != nil {
		return nil, err
	}
	po := opts.Proxy
	if po.ClusterID == "" {
		po.ClusterID = g.clusterID
	}
	if po.Logger == nil {
		po.Logger = g.log
	}
	if po.Metrics == nil {
		po.Metrics = g.metrics
	}
	if po.Now == nil {
		po.Now = g.now
	}
	if po.Fallback == nil {
		po.Fallback = g.peerFallback
	}
	if g.edge.apps != nil && po.OwnFields == nil {
		// The limit layer's one-value fields: a host's own would make
		// two values the client cannot read (DESIGN §2 step 6).
		po.OwnFields = rateFields[:3]
	}
	p, err := proxy.New(po)
	if err != nil {
		return nil, err
	}
	g.proxy = p
	if opts.API != nil {
		g.api = g.hygiene(opts.API)
	}
	g.handler = g.chain()
	return g, nil
}

// ServeHTTP runs r through the whole L7 path.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// Metrics returns the collectors the gateway records into; the listeners
// drive its ActiveConnections gauge.
func (g *Gateway) Metrics() *metrics.Set { return g.metrics }

// Close drops pooled idle connections to hosts and peer gateways, and
// every connection to an h2c host (see proxy.Proxy.Close) and every
// HTTP/2 one to a peer gateway: call it once nothing is served.
// Idempotent.
func (g *Gateway) Close() error {
	g.closeCluster()
	return g.proxy.Close()
}

// dispatch is step 10: pick a host and proxy (internal/proxy).
func (g *Gateway) dispatch() http.Handler { return g.proxy }
