package gatehouse

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/gatehouse-dev/gatehouse/internal/api"
	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/edge"
	"github.com/gatehouse-dev/gatehouse/internal/gateway"
	"github.com/gatehouse-dev/gatehouse/internal/peers"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Run starts every part, serves until ctx ends, drains, and returns when
// every part has stopped. It may be called once. When a part fails to
// start, Run returns after every socket it bound is closed again. A stop
// (ctx ending) returns nil, also one that comes while parts still start.
func (g *Gatehouse) Run(ctx context.Context) error {
	cfg := g.cfg
	stop := ctx // ends when the caller asks the gateway to stop (SIGTERM)
	var (
		apiH    atomic.Pointer[http.Handler]
		l7      atomic.Pointer[http.Handler]
		certs   atomic.Pointer[tlsmgr.Manager]
		started atomic.Bool
	)
	e, err := g.newEdge(&l7, &apiH, &certs, &started)
	if err != nil {
		return err
	}
	if err := e.ListenManagement(); err != nil {
		return listenerKey(&cfg, err)
	}
	if err := e.Listen(); err != nil {
		return listenerKey(&cfg, err)
	}
	dnsSrv, dnsPC, dnsLn, err := g.listenDNS()
	if err != nil {
		// e never runs, so its drain will not close what Listen bound;
		// a process embedding the gateway outlives this error.
		if _, port, _ := net.SplitHostPort(cfg.DNS.Addr); port == "5353" && errors.Is(err, syscall.EADDRINUSE) {
			// The default port is mDNS's too: desktops run a daemon on it.
			err = fmt.Errorf("%w (5353 is mDNS's port too: avahi-daemon or systemd-resolved may hold it; choose another with -dns, or -dns \"\" for none)", err)
		}
		return errors.Join(fmt.Errorf("config: %s: %w", cfg.Key("dns.addr"), err), e.Close())
	}
	var dnsSelf string // where this process reaches its own DNS server
	if dnsPC != nil {
		dnsSelf = selfAddr(dnsPC.LocalAddr())
	}

	if d := cfg.DrainDelay; d > 0 {
		var end func()
		ctx, end = lingerStop(stop, d, e, &started)
		defer end()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	eg, ctx := errgroup.WithContext(ctx)
	// The listeners drain on their own clock after ctx ends, while the
	// table stays in memory for the requests still in flight. drained
	// closes once they have: no handler runs after it.
	drained := make(chan struct{})
	eg.Go(func() error { defer close(drained); return e.Run(ctx) })
	if dnsSrv != nil {
		eg.Go(func() error { return dnsSrv.Serve(ctx, dnsPC, dnsLn) })
	}

	b, err := bus.New(bus.Options{URL: joinURLs(cfg.Bus.URL), Listen: cfg.Bus.Listen, DataDir: cfg.DataDir, Name: "gatehouse-" + cfg.Cluster.ID, Logger: g.log})
	if err != nil {
		cancel()
		return errors.Join(err, eg.Wait())
	}
	g.bus.Store(b)
	err = g.startParts(ctx, eg, b, e, &apiH, &l7, &certs, dnsSelf, drained)
	if err == nil {
		if dnsPC != nil {
			g.addrs.Load().DNS = dnsPC.LocalAddr().String()
		}
		started.Store(true)
		g.readyOnce.Do(func() { close(g.ready) })
		g.log.Info("gatehouse ready", "cluster", cfg.Cluster.ID, "gateway", g.id, "addrs", g.Addrs(), "max_connections", e.MaxConnections(), "max_connections_per_source", cfg.Listeners.MaxConnectionsPerSource)
		if cfg.Control.Token == "" && len(cfg.Auth.Issuers) == 0 {
			// Closed is the right default, but a silent one: every
			// control call would answer 401 with no hint at start.
			g.log.Warn("control API closed: no control.token and no auth.issuers, so every control call answers 401; set -control-token (GATEHOUSE_CONTROL_TOKEN) or an issuer")
		}
		if len(cfg.Auth.Issuers) == 0 {
			warnTokenApps(g.log, g.live.Load())
		}
		if g.forwarder != nil {
			g.log.Info("dns recursion on, for the platform only", "upstreams", cfg.DNS.Recursion.Upstreams, "allow", cfg.DNS.Recursion.Allow)
		}
	} else {
		cancel()
	}
	werr := eg.Wait()
	b.Close() // last: hosts and peers were let go first
	if err != nil {
		if stop.Err() != nil {
			// Told to stop while starting (a bus still unreachable, say):
			// the start ends for that, and a stop is not a failure.
			return nil
		}
		return err
	}
	if ctx.Err() != nil && errors.Is(werr, context.Canceled) {
		return nil
	}
	return werr
}

// lingerStop returns the context every part runs under when drain_delay
// (d) is set: it ends d after stop does, and meanwhile e lingers (/readyz
// 503, listeners serving). The whole gateway serves on, not the
// listeners alone: the requests they take need the bus, discovery and
// the DNS server as any other. A stop before the gateway has started
// ends it at once: /readyz was never 200, so no load balancer sends it
// anything to wait for. end releases the context's timer and the watch
// on stop; call it when Run returns.
func lingerStop(stop context.Context, d time.Duration, e *edge.Edge, started *atomic.Bool) (ctx context.Context, end func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(stop))
	timer := time.AfterFunc(d, cancel)
	timer.Stop() // armed when stop ends
	unwatch := context.AfterFunc(stop, func() {
		if !started.Load() {
			cancel()
			return
		}
		e.Linger(d)
		timer.Reset(d)
	})
	return ctx, func() {
		unwatch()
		timer.Stop()
		cancel()
	}
}

// listenerKey names the config key of an edge listener that could not
// bind, as every other unusable setting is named (DESIGN §11).
func listenerKey(cfg *config.Config, err error) error {
	var le *edge.ListenError
	if !errors.As(err, &le) {
		return err
	}
	key := map[string]string{"management": "management.addr", "http": "http.addr", "https": "https.addr"}[le.Listener]
	if key == "" {
		return err
	}
	return fmt.Errorf("config: %s: %w", cfg.Key(key), le.Err)
}

// listenDNS builds the DNS server and binds its UDP and TCP sockets on
// dns.addr; all nil when dns.addr is empty. On error nothing is left bound.
func (g *Gatehouse) listenDNS() (*dns.Server, net.PacketConn, net.Listener, error) {
	cfg := g.cfg
	if cfg.DNS.Addr == "" {
		return nil, nil, nil, nil
	}
	srv, err := dns.New(dns.Options{
		Addr: cfg.DNS.Addr, Zones: g.dnsZones(), Logger: g.log,
		Forwarder: g.forwarder, RecursionAllow: cfg.RecursionPrefixes(),
		RateLimit: cfg.DNS.RateLimit, RateLimitSlip: cfg.DNS.RateLimitSlip,
		RateLimited: func(action string) { g.dnsLimited.WithLabelValues(action).Inc() },
	})
	if err != nil {
		return nil, nil, nil, err
	}
	pc, ln, err := srv.Listen()
	if err != nil {
		return nil, nil, nil, err
	}
	return srv, pc, ln, nil
}

// newEdge builds the listeners with handlers that delegate to parts built
// later: management must answer while the rest boots, and public requests
// that arrive before the table is loaded get 503, not a reset.
func (g *Gatehouse) newEdge(l7, apiH *atomic.Pointer[http.Handler], certs *atomic.Pointer[tlsmgr.Manager], started *atomic.Bool) (*edge.Edge, error) {
	cfg := g.cfg
	maxConns, err := maxConnections(cfg.Listeners.MaxConnections, cfg.Key("listeners.max_connections"))
	if err != nil {
		return nil, err
	}
	return edge.New(edge.Options{
		HTTPAddr:       cfg.HTTP.Addr,
		HTTPSAddr:      cfg.HTTPS.Addr,
		ManagementAddr: cfg.Management.Addr,
		HTTPMode:       cfg.HTTP.Mode,
		DisableLane:    !cfg.Listeners.FastPath,
		Handler:        delegate(l7, cfg.Cluster.ID),
		Management:     g.managementMux(apiH),
		Ready:          started.Load,
		TLS: &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			if m := certs.Load(); m != nil {
				return m.TLSConfig(), nil
			}
			return nil, errors.New("gatehouse: starting")
		}},
		ACME: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if m := certs.Load(); m != nil {
					m.HTTPHandler(next).ServeHTTP(w, r)
					return
				}
				next.ServeHTTP(w, r)
			})
		},
		Passthrough:             g.passthrough.Route,
		PQOnly:                  cfg.TLS.PQOnly,
		PipeIdleTimeout:         cfg.TLS.PassthroughIdleTimeout,
		WrapHTTP:                gateway.GuardListener,
		WrapTLS:                 gateway.GuardTLSConn,
		WrapServer:              gateway.GuardServerOf(cfg.Cluster.ID),
		Cluster:                 cfg.Cluster.ID,
		MaxRequestLine:          cfg.Listeners.MaxRequestLine,
		MaxHeaderBytes:          cfg.Listeners.MaxHeaderBytes,
		ReadHeaderTimeout:       cfg.Listeners.ReadHeaderTimeout,
		IdleTimeout:             cfg.Listeners.IdleTimeout,
		DrainTimeout:            cfg.DrainTimeout,
		ActiveConns:             g.metrics.ActiveConnections,
		MaxConnections:          maxConns,
		MaxConnectionsPerSource: cfg.Listeners.MaxConnectionsPerSource,
		SourceExempt:            cfg.TrustedPrefixes(),
		ConnsRefused:            g.metrics.ConnectionsRefused,
		LaneHandoff:             func(reason string) { g.metrics.FastPathHandoffs.WithLabelValues(reason).Inc() },
		Hello:                   helloCounter(g.metrics.TLSHellos, g.log),
		RequestContext:          requestContext(l7),
		RequestDone:             requestDone(l7),
		Logger:                  g.log,
	})
}

// helloCounter returns edge's Options.Hello, counting in vec. An outcome
// not in edge.HelloOutcomes (one edge added and the list missed) is
// counted under its own name all the same, and logged at error once: a
// lookup that panicked would do so on the connection's goroutine, which
// nothing recovers, and take the gateway down. Outcomes are edge's
// constants, never the client's, so the series stay few.
func helloCounter(vec *prometheus.CounterVec, log *slog.Logger) func(outcome string) {
	hellos := make(map[string]prometheus.Counter, len(edge.HelloOutcomes))
	for _, o := range edge.HelloOutcomes {
		// Every outcome is exported from the start, at 0: an alert on
		// a rate of timeouts needs the series before the first one.
		hellos[o] = vec.WithLabelValues(o)
	}
	var unlisted sync.Map // outcome -> struct{}: logged
	return func(outcome string) {
		if c, ok := hellos[outcome]; ok {
			c.Inc()
			return
		}
		if _, seen := unlisted.LoadOrStore(outcome, struct{}{}); !seen {
			log.Error("gatehouse: a tls hello outcome not in edge.HelloOutcomes, so not exported until it occurs", "outcome", outcome)
		}
		vec.WithLabelValues(outcome).Inc()
	}
}

// startParts brings up the bus, the store, the table and the parts that
// feed and serve it. Long-running parts join eg. dnsSelf is the address
// of this gateway's own DNS server, empty when it is off. drained closes
// when e has drained: the requests it serves use the gateway's upstream
// connections until then.
func (g *Gatehouse) startParts(ctx context.Context, eg *errgroup.Group, b *bus.Bus, e *edge.Edge,
	apiH, l7 *atomic.Pointer[http.Handler], certs *atomic.Pointer[tlsmgr.Manager], dnsSelf string, drained <-chan struct{}) error {
	cfg := g.cfg
	if err := b.Start(ctx); err != nil {
		var se *bus.StartError
		switch {
		case errors.As(err, &se): // the embedded server's listener, named as the setting
			err = fmt.Errorf("config: %s: %w", cfg.Key("bus.listen"), err)
		case errors.Is(err, bus.ErrDataDirInUse), errors.As(err, new(*fs.PathError)):
			// The embedded bus's files are all in data_dir: one it cannot
			// make or write (a read-only mount, a service manager's
			// sandbox) is that setting's to fix.
			err = fmt.Errorf("config: %s: %w", cfg.Key("data_dir"), err)
		}
		return err
	}
	g.addrs.Store(&Addrs{
		HTTP:       addrString(e.Addr("http")),
		HTTPS:      addrString(e.Addr("https")),
		Management: addrString(e.Addr("management")),
		Bus:        trimScheme(b.ClientURL()),
	})
	st, builder, err := g.openStore(ctx, eg, b)
	if err != nil {
		return err
	}

	// A static peer given this key was refused by New (checkKeyFiles),
	// before anything started; a key generated now no peer can have.
	key, err := g.clusterKey()
	if err != nil {
		return err
	}
	pr, err := g.newPeers(b, key)
	if err != nil {
		return err
	}
	eg.Go(func() error { return pr.Run(ctx) })

	disc, err := discovery.New(discovery.Options{
		Conn: b.Conn(), Cluster: cfg.Cluster.ID, GatewayID: g.id, Builder: builder, Keys: st, KeysUnavailable: store.Unavailable,
		HeartbeatInterval: cfg.HeartbeatInterval, HostTTL: cfg.HostTTL, Reverify: cfg.ReverifyInterval,
		Logger: g.log, Registry: g.reg, Resolver: g.hostResolver,
	})
	if err != nil {
		return err
	}
	eg.Go(func() error { return disc.Run(ctx) })
	// A changed or revoked enrolment is checked at once, not at the next
	// reverify_interval: a deleted key takes its host out of the pool.
	eg.Go(func() error {
		return st.WatchHostKeys(ctx, func(id string) { _ = disc.Reverify(id) })
	})

	tlsOpts, err := g.tlsOptions(st, dnsSelf)
	if err != nil {
		return err
	}
	mgr, err := tlsmgr.New(tlsOpts)
	if err != nil {
		return err
	}
	certs.Store(mgr)
	eg.Go(func() error { return mgr.Run(ctx) })
	if g.cfg.TLS.ACME.Directory != "" {
		eg.Go(func() error { return g.manageNames(ctx, mgr, tlsOpts.Names) })
	}
	if p, ok := tlsOpts.DNSProvider.(*dns.ACMEZones); ok {
		eg.Go(func() error { return g.sweepChallenges(ctx, p) })
	}

	authOpts, err := g.authOptions()
	if err != nil {
		return err
	}
	a, err := g.newAPI(st, disc, pr, authOpts)
	if err != nil {
		return err
	}
	var ah http.Handler = a
	apiH.Store(&ah)

	gw, err := g.newGateway(a, pr, key, authOpts)
	if err != nil {
		return err
	}
	// Closed once the edge has drained, not when the drain begins: a
	// request that ends during the drain puts its upstream connection
	// back in the pool, where it would stay open, goroutines and all,
	// for the idle timeout after Run returned.
	eg.Go(func() error { <-drained; return gw.Close() })
	// A deleted app's series and round-robin counters go a minute after it.
	eg.Go(func() error {
		return route.NewForget(&g.live, g.forgetGrace, gw, g.passthrough).Run(ctx, g.forgetEvery)
	})
	// A suspended, retired or deleted app's pipes and upgraded
	// connections close, and so do a revoked host's: new
	// requests are refused by the table at once, and these would
	// otherwise carry its traffic until the drain or their idle bound.
	eg.Go(func() error { return g.conns.Run(ctx, 0, g.logCut) })
	var h http.Handler = gw
	l7.Store(&h)
	return nil
}

// logCut says what one table change closed (route.Conns.Run).
func (g *Gatehouse) logCut(c route.Cut) {
	if c.App != "" {
		g.log.Info("connections closed: app out of service", "app", c.App, "reason", c.Why, "connections", c.N)
		return
	}
	g.log.Info("connections closed: host out of service", "host_id", c.Host, "reason", c.Why, "connections", c.N)
}

// openStore opens the routing buckets, seeds -zone, and waits until the
// table holds the store's first full load, so nothing is served from an
// empty table by mistake.
func (g *Gatehouse) openStore(ctx context.Context, eg *errgroup.Group, b *bus.Bus) (*store.Store, *route.Builder, error) {
	cfg := g.cfg
	// An external NATS cluster replicates the buckets (R3), whether
	// bus.url lists its nodes or one name in front of them; a single
	// server (the embedded bus too) keeps R1.
	replicas := 0
	if b.Clustered() {
		replicas = 3
	}
	opts := store.Options{Replicas: replicas, Logger: g.log,
		OnResync: func(reason string) { g.resyncs.WithLabelValues(reason).Inc() }}
	// The embedded server makes a bucket's stream on a goroutine of its
	// own, which goes on when the request's context ends: a stop that
	// cut the request short then shut the server down while it made the
	// stream, and nats-server left that stream's file store running (its
	// goroutines, its files in data_dir) after Run had returned and let
	// go of the lock on data_dir. With the embedded bus the buckets are
	// opened to the end, a matter of milliseconds, before a stop is
	// taken.
	octx := ctx
	if b.Embedded() {
		var cancel context.CancelFunc
		octx, cancel = context.WithTimeout(context.WithoutCancel(ctx), embeddedOpenTimeout)
		defer cancel()
	}
	st, err := g.openBuckets(octx, b, opts)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, nil, noJetStream(&cfg, b, err)
	}
	if err := seedZone(ctx, st, g.log, cfg.Zone, cfg.HTTPS.Addr); err != nil {
		return nil, nil, fmt.Errorf("gatehouse: seed zone %s: %w", cfg.Zone, err)
	}
	builder := route.NewBuilder(&g.live)
	eg.Go(func() error { return st.Run(ctx, builder) })
	eg.Go(func() error { return b.LeaveCutOff(ctx, servedProbe(st)) })
	select {
	case <-builder.Loaded():
		return st, builder, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, nil, errors.New("gatehouse: store: routing state not loaded after 30s")
	}
}

// openBuckets opens the store on b. While the buckets cannot answer (a
// NATS cluster still electing their leaders after its nodes restarted:
// requests time out, or JetStream says it is temporarily unavailable) it
// tries again until ctx ends, saying so every 10 s, as a start waits for
// the bus itself; a gateway started beside a recovering cluster stopped
// at its first 5 s timeout. A server with no JetStream (no responders)
// and any refusal still end the start.
//
// "No suitable peers for placement" is waited for too, but only for
// g.placementWait from the first time JetStream says it (a cluster
// electing leaders for long before does not use the bound up): a meta
// leader just elected, or one of the nodes still coming back, lifts it
// within seconds, and the start ended on it at once; a cluster with
// fewer JetStream servers than the buckets' replicas never lifts it.
func (g *Gatehouse) openBuckets(ctx context.Context, b *bus.Bus, opts store.Options) (*store.Store, error) {
	wait := 250 * time.Millisecond
	began := time.Now()
	var logged, placingSince time.Time
	for {
		st, err := store.Open(ctx, b.JetStream(), opts)
		if opts.Replicas > 1 && notClustered(err) {
			// A server with a cluster name but no cluster (no routes) is a
			// single server to JetStream, which says so: keep R1.
			g.log.Info("nats has a cluster name but JetStream is not clustered: routing buckets kept at one replica", "err", err)
			opts.Replicas = 0
			st, err = store.Open(ctx, b.JetStream(), opts)
		}
		placing := noPlacement(err)
		if err == nil || !placing && !bucketsRecovering(err) || ctx.Err() != nil {
			return st, err
		}
		now := time.Now()
		if placing && placingSince.IsZero() {
			placingSince = now
		}
		if placing && now.Sub(placingSince) >= g.placementBound() {
			n := max(opts.Replicas, 1)
			return nil, fmt.Errorf("gatehouse: store: no NATS servers to place the routing buckets' %d replicas on after %s: check that all the cluster's nodes are up and routed to each other, and that it has at least %d JetStream servers with storage to spare: %w",
				n, g.placementBound(), n, err)
		}
		if now.Sub(logged) >= 10*time.Second {
			msg := "waiting for the routing buckets (a NATS cluster electing their leaders?)"
			if placing {
				msg = "waiting for the routing buckets (a NATS cluster node down or restarting?)"
			}
			g.log.Warn(msg, "waited", now.Sub(began).Round(time.Second), "err", err)
			logged = now
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// servedProbe is the bus's probe of the server it is connected to
// (bus.LeaveCutOff): an error when the server could not answer for the
// routing buckets, none for an answer, a refusal included, which another
// server would give too.
func servedProbe(st *store.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := st.Probe(ctx); store.Unavailable(err) {
			return err
		}
		return nil
	}
}

// bucketsRecovering reports whether err from store.Open is the store not
// answering yet, as opposed to a server without JetStream for the
// gateway (noJetStream names bus.url for those) or a refusal. Of
// JetStream's own answers only "temporarily unavailable" is waited for:
// it says 503 for refusals that no wait lifts too ("insufficient
// resources" when max_ha_assets is spent, a store it cannot create), and
// a start waiting on those would wait for ever.
func bucketsRecovering(err error) bool {
	if !store.Unavailable(err) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return false
	}
	if code, ok := apiErrorCode(err); ok {
		return code == errCodeClusterNotAvailable
	}
	return true // a timeout, the connection between servers
}

// noPlacement reports whether err is JetStream finding no servers to
// place a bucket's replicas on (openBuckets).
func noPlacement(err error) bool {
	code, ok := apiErrorCode(err)
	return ok && code == errCodeClusterNoPeers
}

// apiErrorCode is the JetStream error code in err, from either of
// nats.go's JetStream layers; ok is false when err holds none.
func apiErrorCode(err error) (code jetstream.ErrorCode, ok bool) {
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		return je.APIError().ErrorCode, true
	}
	var ne nats.JetStreamError
	if errors.As(err, &ne) && ne.APIError() != nil {
		return jetstream.ErrorCode(ne.APIError().ErrorCode), true
	}
	return 0, false
}

// JetStream's error codes that nats.go names no constant for.
const (
	// errCodeClusterNotAvailable is "JetStream system temporarily
	// unavailable" (nats-server's JSClusterNotAvailErr), what a stream or
	// the meta layer without a leader answers.
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008
	// errCodeClusterNoPeers is "no suitable peers for placement"
	// (JSClusterNoPeersErrF, a 400): the meta leader knows too few servers
	// able to take a stream's replicas, the cluster's size or a node down,
	// or one it has not heard from yet.
	errCodeClusterNoPeers jetstream.ErrorCode = 10005
)

// defaultPlacementWait bounds how long a start waits for JetStream to
// find servers for the buckets' replicas (openBuckets).
const defaultPlacementWait = 30 * time.Second

// placementBound is g.placementWait, zero being defaultPlacementWait.
func (g *Gatehouse) placementBound() time.Duration {
	if g.placementWait > 0 {
		return g.placementWait
	}
	return defaultPlacementWait
}

// embeddedOpenTimeout bounds opening the routing buckets on the embedded
// bus, which a stop does not cut short (openStore).
const embeddedOpenTimeout = 15 * time.Second

// noJetStream names bus.url when err says the external server has no
// JetStream for the gateway's account: nats.go says only "no responders
// available for request" (nothing serves $JS.API), which names neither
// the setting nor what the server lacks.
func noJetStream(cfg *config.Config, b *bus.Bus, err error) error {
	if b.Embedded() || !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrJetStreamNotEnabled) &&
		!errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return err
	}
	return fmt.Errorf("config: %s: the NATS server has no JetStream for the gateway's account (start nats-server with -js, or add jetstream {} to its configuration): %w", cfg.Key("bus.url"), err)
}

// jsErrReplicasNotSupported is JetStream's "replicas > 1 not supported in
// non-clustered mode".
const jsErrReplicasNotSupported jetstream.ErrorCode = 10074

// notClustered reports whether err is JetStream refusing replicas because
// it runs as a single server.
func notClustered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrReplicasNotSupported
}

func (g *Gatehouse) newAPI(st *store.Store, disc *discovery.Discovery, pr *peers.Peers, authOpts auth.Options) (*api.API, error) {
	cfg := g.cfg
	return api.New(api.Options{
		Store: st, NotFound: store.ErrNotFound, TooLarge: store.ErrTooLarge, BadValue: store.ErrBadValue, Unavailable: store.Unavailable, ControlToken: cfg.Control.Token,
		VerifyPlatform: platformVerifier(authOpts),
		VerifySession:  sessionVerifier(authOpts),
		NoIssuers:      len(authOpts.Issuers) == 0,
		ResolveZones:   g.dnsZones(),
		Forwarder:      g.forwarder,
		Hosts:          disc.Hosts,
		Clusters:       func() any { return pr.Discovery() },
		VerifyDomain:   g.domainVerifier(),
		DefaultRateLimit: route.RateLimit{
			Requests: cfg.Limits.Requests, Window: route.Duration(cfg.Limits.Window),
		},
		Logger: g.log,
	})
}

// domainVerifier checks the DESIGN §7 proofs of a custom domain (TXT,
// CNAME to {app}.{zone} of a served zone, or the token over HTTP) with the
// system resolver; the API runs it on POST /api/v3/domains/{d}/verify.
func (g *Gatehouse) domainVerifier() func(context.Context, route.Domain, string) error {
	opts := verify.DomainOptions{Resolver: g.resolver, Zones: func() []string {
		var names []string
		for _, z := range g.live.Load().Zones() {
			names = append(names, z.Name)
		}
		return names
	}}
	return func(ctx context.Context, d route.Domain, method string) error {
		return verify.Domain(ctx, opts, verify.DomainClaim{Domain: d.Domain, App: d.App, Token: d.Token}, method)
	}
}

func (g *Gatehouse) newGateway(a http.Handler, pr *peers.Peers, key ed25519.PrivateKey, authOpts auth.Options) (*gateway.Gateway, error) {
	cfg := g.cfg
	return gateway.New(gateway.Options{
		ClusterID:      cfg.Cluster.ID,
		Live:           &g.live,
		API:            a,
		TrustedProxies: cfg.TrustedPrefixes(),
		Logger:         g.log,
		Metrics:        g.metrics,
		Edge: gateway.EdgeOptions{
			RateLimit: cfg.Limits.Requests, RateWindow: cfg.Limits.Window,
			UnknownRateLimit: cfg.Limits.UnknownRequests, UnknownRateWindow: cfg.Limits.Window,
			MaxRateKeys: cfg.Limits.MaxKeys, Auth: authOpts, Registry: g.reg,
		},
		Cluster: gateway.ClusterOptions{
			Members: pr.Set, Key: key, Hash: cluster.Hash(cfg.Cluster.Hash),
			NoAffinity: !cfg.Cluster.Affinity, NoFailover: !cfg.Cluster.Failover,
			Deadline: cfg.Cluster.Deadline,
		},
		// The local attempt must end within the cluster deadline so failover
		// still has time (DESIGN §5.2); the proxy bounds it, not affinity.
		Proxy:             proxy.Options{ResponseHeaderTimeout: min(30*time.Second, cfg.Cluster.Deadline)},
		AccessLog:         true,
		TunnelIdleTimeout: cfg.Listeners.TunnelIdleTimeout,
		Conns:             g.conns,
	})
}

func (g *Gatehouse) newPeers(b *bus.Bus, key ed25519.PrivateKey) (*peers.Peers, error) {
	cfg := g.cfg
	static := make([]cluster.Peer, 0, len(cfg.Clusters))
	for _, p := range cfg.Clusters {
		pub, err := decodeKey(p.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("gatehouse: clusters[%s].public_key: %w", p.ID, err)
		}
		static = append(static, cluster.Peer{ID: p.ID, URL: p.URL, PublicKey: pub})
	}
	self := cluster.Peer{ID: cfg.Cluster.ID, URL: cfg.Cluster.URL, PublicKey: key.Public().(ed25519.PublicKey)}
	noAnnounce := false
	if self.URL == "" {
		// Without cluster.url there is nothing peers could forward to, so
		// this cluster is not announced on the bus (docs/config.md); the
		// placeholder only names it in its own discovery answer, and peers
		// that list it statically use their own URL for it. It still
		// listens to the other clusters' announcements: it can forward to
		// them, and used not to know they were there.
		self.URL = "https://" + cfg.Cluster.ID + ".invalid"
		noAnnounce = true
		g.log.Info("gatehouse: this cluster is not announced to peer clusters, as cluster.url is empty (there is no URL they could forward to); it still learns of theirs from the bus",
			"cluster", cfg.Cluster.ID)
	}
	return peers.New(peers.Options{Self: self, Key: key, Static: static, Conn: b.Conn(), NoAnnounce: noAnnounce, Logger: g.log})
}

// allowCert is tlsmgr's on-demand hook: a certificate only for a
// verified custom domain of an active app whose TLS the gateway
// terminates. A passthrough app's host holds its key, never the gateway
// (DESIGN §3): a hello the edge terminates anyway (a gateway's own
// challenge, a suspended app, a classical client under pq_only) must not
// order one.
//
// A suspended app's domain keeps the certificate it has, and gets no new
// one (tlsmgr.ErrNoNewOrder): suspension is reversible and its clients
// are answered 503 (DESIGN §2), which they can read only over a
// handshake they trust; an order or renewal meanwhile would spend the
// CA's rate limits on an app that may never come back. A retired app's
// domain gets nothing: retirement is final, the domain may be another's
// by now, and the gateway no longer speaks for it.
func (g *Gatehouse) allowCert(_ context.Context, name string) error {
	tbl := g.live.Load()
	d := tbl.Domain(name)
	if d == nil || !d.Verified {
		return fmt.Errorf("gatehouse: %s is not a verified custom domain", name)
	}
	a := tbl.App(d.App)
	if a == nil || a.Mode == route.ModePassthrough {
		return fmt.Errorf("gatehouse: %s maps to no app whose TLS the gateway terminates", name)
	}
	switch a.Status {
	case route.StatusRetired:
		return fmt.Errorf("gatehouse: %s maps to app %s, which is retired", name, a.ID)
	case route.StatusSuspended:
		return fmt.Errorf("%w: %s maps to app %s, which is suspended", tlsmgr.ErrNoNewOrder, name, a.ID)
	}
	return nil
}

// tlsOptions configures certificates (DESIGN §9): the managed name of
// each zone is the wildcard *.{zone}, which covers api.{zone} and every
// {app}.{zone}; with ACME it is validated by DNS-01 through the
// store's records, which every gateway's DNS server answers, and checked
// against this gateway's own DNS server (dnsSelf) before the CA is asked.
// Custom domains stay on demand, by HTTP-01 and TLS-ALPN-01.
func (g *Gatehouse) tlsOptions(st *store.Store, dnsSelf string) (tlsmgr.Options, error) {
	cfg := g.cfg
	var names []string
	if cfg.Zone != "" {
		names = zoneNames(cfg.Zone)
	}
	live := &g.live
	opts := tlsmgr.Options{
		Names:         names,
		Directory:     cfg.TLS.ACME.Directory,
		Email:         cfg.TLS.ACME.Email,
		CARoot:        cfg.TLS.ACME.CARoot,
		CustomDomains: cfg.TLS.CustomDomains,
		Allow:         g.allowCert,
		PQOnly:        cfg.TLS.PQOnly,
		// The listener cuts a handshake at it (internal/edge): a wait
		// for an order past it holds a goroutine for a gone client.
		HandshakeTimeout: cfg.Listeners.ReadHeaderTimeout,
		Storage:          st.Certs(),
		HTTPPort:         portOf(cfg.HTTP.Addr),
		TLSPort:          portOf(cfg.HTTPS.Addr),
		Logger:           g.log,
	}
	if cfg.TLS.ACME.Directory == "" {
		return opts, nil // the bootstrap certificate only; it names the wildcard too
	}
	if dnsSelf == "" {
		// config.Validate refuses this; kept for a Gatehouse built otherwise.
		return opts, errors.New("gatehouse: tls.acme.directory needs the dns listener (dns.addr): *.{zone} is validated by DNS-01")
	}
	provider, err := dns.NewACMEZones(func() []string {
		var zs []string
		for _, z := range live.Load().Zones() {
			zs = append(zs, z.Name)
		}
		return zs
	}, dnsRecords{st}, st.Certs())
	if err != nil {
		return opts, err
	}
	opts.DNSProvider = provider
	opts.DNSResolvers = []string{dnsSelf}
	return opts, nil
}

// zoneNames are the names the gateway keeps a certificate for in zone:
// the wildcard *.{zone} alone. It covers one label, so api.{zone} and
// every {app}.{zone} are served from it: an order of their own would only
// spend the CA's rate limits (one more order per zone) on a name already
// covered. The zone's apex is not an app name and gets none. The wildcard
// needs DNS-01, which the gateway always has with ACME (tlsOptions); the
// bootstrap certificate names it too, so it covers api.{zone} likewise.
func zoneNames(zone string) []string {
	return []string{"*." + zone}
}

// dnsRecords adapts the store's record sets to dns.RecordStore, for the
// DNS-01 provider: the same sets the control API's
// PUT /api/v3/dns/zones/{zone}/records/{name}/{type} writes.
type dnsRecords struct{ st *store.Store }

var _ dns.RecordStore = dnsRecords{}

func (r dnsRecords) UpdateRecord(ctx context.Context, zone, name, typ string, fn func(*dns.Record) (*dns.Record, error)) error {
	return r.st.UpdateRecord(ctx, zone, name, typ, func(cur *route.Record) (*route.Record, error) {
		var in *dns.Record
		if cur != nil {
			in = &dns.Record{Name: cur.Name, Type: cur.Type, TTL: uint32(max(cur.TTL, 0)), Values: slices.Clone(cur.Values)}
		}
		out, err := fn(in)
		if err != nil || out == nil {
			return nil, err
		}
		return &route.Record{Zone: zone, Name: out.Name, Type: out.Type, TTL: int(out.TTL), Values: out.Values}, nil
	})
}

// selfAddr is where this process reaches a server listening on a: the
// same address, with loopback for an unspecified IP.
func selfAddr(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap()
	switch {
	case ip.IsUnspecified() && ip.Is4():
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case ip.IsUnspecified():
		ip = netip.IPv6Loopback()
	}
	return netip.AddrPortFrom(ip, ap.Port()).String()
}

// manageNames keeps certmagic managing *.{zone} for every zone in the
// table, as zones appear, and stops when a zone goes: a deleted zone's
// certificate could not be renewed anyway (the DNS-01 provider refuses
// names outside the gateway's zones), and the gateway no longer serves
// it. Apps and the API need nothing: the wildcard covers {app}.{zone} and
// api.{zone}, and custom domains are issued on demand. initial are the
// names mgr was built with (tlsOptions).
func (g *Gatehouse) manageNames(ctx context.Context, mgr *tlsmgr.Manager, initial []string) error {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	var last *route.Table
	ours := make(map[string]bool) // the zones' names mgr manages
	for _, n := range initial {
		ours[n] = true
	}
	for {
		if tbl := g.live.Load(); tbl != last {
			last = tbl
			want := make(map[string]bool)
			var todo []string
			for _, z := range tbl.Zones() {
				for _, n := range zoneNames(z.Name) {
					want[n] = true
					if !mgr.Managed(n) {
						todo = append(todo, n)
					}
				}
			}
			var gone []string
			for n := range ours {
				if !want[n] {
					gone = append(gone, n)
				}
			}
			if len(gone) > 0 {
				mgr.Unmanage(gone...)
				g.log.Info("certificates: zone gone, name unmanaged", "names", gone)
			}
			if len(todo) > 0 {
				if err := mgr.Manage(todo...); err != nil {
					g.log.Warn("certificates: manage failed", "names", todo, "err", err)
				}
			}
			ours = want
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// challengeSweepEvery is how often sweepChallenges looks for DNS-01
// challenge values left behind: a value then outlives its removal by at
// most this plus dns.StaleChallengeAge while any gateway runs.
const challengeSweepEvery = 10 * time.Minute

// sweepChallenges removes the _acme-challenge values that a gateway added
// and never removed, having crashed in between (dns.ACMEZones.Sweep): at
// start, which is when a crashed gateway is back, and then every
// challengeSweepEvery. Every gateway sweeps; sweeping is idempotent.
func (g *Gatehouse) sweepChallenges(ctx context.Context, p *dns.ACMEZones) error {
	t := time.NewTicker(challengeSweepEvery)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := p.Sweep(sctx, time.Now().Add(-dns.StaleChallengeAge))
		cancel()
		if err != nil && ctx.Err() == nil {
			g.log.Warn("certificates: sweeping stale DNS-01 challenge values", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (g *Gatehouse) authOptions() (auth.Options, error) {
	o := auth.Options{MaxSubjects: g.cfg.Auth.MaxSubjects, Leeway: g.cfg.Auth.Leeway}
	for _, is := range g.cfg.Auth.Issuers {
		o.Issuers = append(o.Issuers, auth.Issuer{Name: is.Issuer, KeysFile: is.KeysFile})
	}
	o.ClaimLimits = len(o.Issuers) > 0
	if err := o.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// warnTokenApps warns of the apps in tbl that require a token, on a
// gateway that verifies none (no auth.issuers): each answers every
// request 401 here. The control API refuses such an app on this gateway,
// but one stored before, or through a gateway with issuers, is served,
// failing closed; refusing the start for what the store holds would take
// the gateway down for every other app. It names ten at most.
func warnTokenApps(log *slog.Logger, tbl *route.Table) {
	var ids []string
	n := 0
	for _, id := range tbl.AppIDs() {
		if a := tbl.App(id); a != nil && a.Auth.Required {
			if n++; len(ids) < 10 {
				ids = append(ids, id)
			}
		}
	}
	if n > 0 {
		log.Warn("apps require a token but auth.issuers is empty, so every request to them answers 401: set auth.issuers, or their auth.required false", "apps", ids, "count", n)
	}
}

// platformVerifier accepts a bearer JWT from a configured issuer whose
// scope includes "platform" (DESIGN §7), and otherwise says why not, for
// the API's 401. nil when no issuer is configured.
func platformVerifier(o auth.Options) func(*http.Request) error {
	if len(o.Issuers) == 0 {
		return nil
	}
	v, err := auth.New(o)
	if err != nil {
		return nil
	}
	return func(r *http.Request) error {
		tok, err := auth.BearerToken(r)
		if err != nil {
			return err
		}
		_, err = v.VerifyPlatform(tok)
		return err
	}
}

// sessionVerifier accepts any valid bearer JWT from a configured issuer,
// whatever its audience or scope (the resolve API's signed-in session,
// DESIGN §8), and names the session by issuer and subject, or by the
// token itself when it has no subject. nil when no issuer is configured.
func sessionVerifier(o auth.Options) func(*http.Request) (string, error) {
	if len(o.Issuers) == 0 {
		return nil
	}
	v, err := auth.New(o)
	if err != nil {
		return nil
	}
	return func(r *http.Request) (string, error) {
		tok, err := auth.BearerToken(r)
		if err != nil {
			return "", err
		}
		c, err := v.VerifyAny(tok)
		if err != nil {
			return "", err
		}
		if c.Subject == "" {
			sum := sha256.Sum256([]byte(tok))
			return "token " + hex.EncodeToString(sum[:]), nil
		}
		return c.Issuer + "\n" + c.Subject, nil
	}
}

// dnsZones returns the DNS server's zone source: the current table's zones
// and records, converted once per table snapshot.
func (g *Gatehouse) dnsZones() func() []dns.Zone {
	type cached struct {
		tbl   *route.Table
		zones []dns.Zone
	}
	var cur atomic.Pointer[cached]
	return func() []dns.Zone {
		tbl := g.live.Load()
		if c := cur.Load(); c != nil && c.tbl == tbl {
			return c.zones
		}
		var zs []dns.Zone
		for _, z := range tbl.Zones() {
			dz := dns.Zone{Name: z.Name, TTL: uint32(max(z.TTL, 0)), Serial: tbl.Serial(z.Name)}
			for _, gw := range z.Gateways {
				if a, err := netip.ParseAddr(gw); err == nil {
					dz.Gateways = append(dz.Gateways, a)
				}
			}
			for _, r := range tbl.Records(z.Name) {
				dz.Records = append(dz.Records, dns.Record{Name: r.Name, Type: r.Type, TTL: uint32(max(r.TTL, 0)), Values: r.Values})
			}
			dz.Index()
			zs = append(zs, dz)
		}
		cur.Store(&cached{tbl: tbl, zones: zs})
		return zs
	}
}

// requestContext makes a lane request's context with the handler p
// holds, when it makes its own (the gateway: see
// gateway.Gateway.RequestContext), so that it needs no copy of the
// Request to give it one.
func requestContext(p *atomic.Pointer[http.Handler]) func(context.Context) context.Context {
	type contextMaker interface {
		RequestContext(parent context.Context) context.Context
	}
	return func(ctx context.Context) context.Context {
		if h := p.Load(); h != nil {
			if m, ok := (*h).(contextMaker); ok {
				return m.RequestContext(ctx)
			}
		}
		return ctx
	}
}

// requestDone gives a served request's context (the lane's or h2's) back
// to the handler p holds, when it takes them (the gateway:
// gateway.Gateway.RequestDone). A handler swapped in since the context
// was made takes it too: it sees its own kind of context or none.
func requestDone(p *atomic.Pointer[http.Handler]) func(context.Context) bool {
	type contextTaker interface {
		RequestDone(ctx context.Context) bool
	}
	return func(ctx context.Context) bool {
		if h := p.Load(); h != nil {
			if t, ok := (*h).(contextTaker); ok {
				return t.RequestDone(ctx)
			}
		}
		return false
	}
}

// delegate serves with whatever handler p holds, or 503 while it is unset:
// the gateway is starting and has no table to route by. /healthz too: a
// load balancer that checks it must keep a starting gateway out of
// rotation rather than send it clients to refuse, for as long as the start
// waits (for a bus that is down, without end), as the drain takes a
// gateway out by closing its listeners. Its answers name the cluster, as
// every answer does (DESIGN §5.2); a peer's probe still fails on the 503.
func delegate(p *atomic.Pointer[http.Handler], clusterID string) http.Handler {
	var clusterHdr []string
	if clusterID != "" {
		clusterHdr = []string{clusterID}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := p.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		if clusterHdr != nil {
			w.Header()["X-Gatehouse-Cluster"] = clusterHdr
		}
		// With no table there is no telling api.{zone} from an app's
		// host, and every API answer is no-store (DESIGN §7); nor is
		// this 503 for any cache to keep past the start.
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", "1")
		problem.Write(w, http.StatusServiceUnavailable, "the gateway is starting")
	})
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}
