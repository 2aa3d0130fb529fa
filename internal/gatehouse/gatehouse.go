package gatehouse

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/dashboard"
	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/edge"
	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

// Gatehouse is one gateway process. Build it with New, then Run it once.
type Gatehouse struct {
	cfg config.Config
	log *slog.Logger
	id  string // this gateway's id, named in host challenges

	reg     *prometheus.Registry
	metrics *metrics.Set
	live    route.Live

	// ready is closed once every part is up; Ready exposes it.
	ready     chan struct{}
	readyOnce sync.Once
	// addrs are the bound listener addresses, for tests and the demo.
	addrs atomic.Pointer[Addrs]
	// resolver answers custom-domain proofs (TXT, CNAME); nil is the
	// system resolver. Tests point it at an in-process DNS server.
	resolver verify.Resolver
	// hostResolver resolves the names hosts announce as their addr, once
	// per challenge; nil is the system resolver. Tests point it at an
	// in-process DNS server.
	hostResolver verify.AddrResolver
	// forwarder recurses for the platform (DESIGN §8), over DNS and the
	// resolve API alike; nil: recursion is off (dns.recursion.upstreams).
	forwarder *dns.Forwarder
	// passthrough routes TLS passthrough names (the https listener's
	// Options.Passthrough); startParts has the table's sweep forget its
	// deleted apps.
	passthrough *edge.Passthrough
	// conns holds the passthrough pipes and upgraded connections open
	// to each app and host; startParts has each new table close those
	// whose app or host it takes out of service.
	conns *route.Conns
	// forgetGrace and forgetEvery time the table's sweep of deleted
	// apps' state (route.Forget); zero is its defaults. Tests shorten
	// them.
	forgetGrace, forgetEvery time.Duration
	// placementWait bounds a start's wait for JetStream to place the
	// buckets' replicas (openBuckets); zero is 30 s. Tests shorten it.
	placementWait time.Duration
	// bus is the gateway's bus once Run made it, for the
	// gatehouse_bus_connected gauge; nil before.
	bus atomic.Pointer[bus.Bus]
	// resyncs counts the store's full loads by reason
	// (store.Options.OnResync).
	resyncs *prometheus.CounterVec
	// dnsLimited counts the UDP DNS responses over dns.rate_limit, by
	// action (dns.Options.RateLimited).
	dnsLimited *prometheus.CounterVec
}

// Addrs are the addresses the listeners actually bound (useful with port 0).
type Addrs struct {
	HTTP, HTTPS, DNS, Management, Bus string
}

// New validates cfg and returns a gateway that has started nothing.
func New(cfg config.Config, log *slog.Logger) (*Gatehouse, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkBus(cfg); err != nil {
		return nil, err
	}
	if err := checkDataDir(cfg.DataDir, cfg.Key("data_dir")); err != nil {
		return nil, err
	}
	if err := checkKeyFiles(cfg); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := metrics.NewRegistry()
	ms, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("gatehouse: %w", err)
	}
	var fwd *dns.Forwarder
	if ups := cfg.DNS.Recursion.Upstreams; len(ups) > 0 {
		if fwd, err = dns.NewForwarder(dns.ForwarderOptions{Upstreams: ups}); err != nil {
			return nil, fmt.Errorf("gatehouse: dns.recursion.upstreams: %w", err)
		}
	}
	g := &Gatehouse{
		cfg:       cfg,
		log:       log,
		id:        gatewayID(cfg.Cluster.ID),
		reg:       reg,
		metrics:   ms,
		ready:     make(chan struct{}),
		forwarder: fwd,
	}
	g.conns = route.NewConns(&g.live)
	g.passthrough = edge.NewPassthrough(&g.live, nil, g.conns)
	// A platform alerts on the bus being down without reading the log;
	// /readyz says only that the gateway has started.
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gatehouse_bus_connected",
		Help: "1 while the gateway is connected to its bus (NATS), 0 while it is starting or the connection is down.",
	}, func() float64 {
		if b := g.bus.Load(); b != nil && b.Connected() {
			return 1
		}
		return 0
	})); err != nil {
		return nil, fmt.Errorf("gatehouse: %w", err)
	}
	// A full load costs CPU in proportion to the routing table: a
	// platform sees here how often the store's checks found a reason
	// for one.
	g.resyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatehouse_store_resyncs_total",
		Help: "Full loads of the routing buckets into the table, by reason: start, retry, interval, stalled, keys, swept, recreated.",
	}, []string{"reason"})
	if err := reg.Register(g.resyncs); err != nil {
		return nil, fmt.Errorf("gatehouse: %w", err)
	}
	// A platform sees here that the DNS server is held back, by a flood
	// of forged sources or by resolvers that ask too often.
	g.dnsLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gatehouse_dns_rate_limited_total",
		Help: "UDP DNS responses over dns.rate_limit, by action: dropped, truncated.",
	}, []string{"action"})
	if err := reg.Register(g.dnsLimited); err != nil {
		return nil, fmt.Errorf("gatehouse: %w", err)
	}
	return g, nil
}

// Ready is closed once the gateway serves: bus, store, table and listeners
// are all up.
func (g *Gatehouse) Ready() <-chan struct{} { return g.ready }

// Addrs returns the bound listener addresses once Ready is closed.
func (g *Gatehouse) Addrs() Addrs {
	if a := g.addrs.Load(); a != nil {
		return *a
	}
	return Addrs{}
}

// Live is the routing table the gateway serves from.
func (g *Gatehouse) Live() *route.Live { return &g.live }

// Registry is the Prometheus registry /metrics serves.
func (g *Gatehouse) Registry() *prometheus.Registry { return g.reg }

// gatewayID names this process in host challenges: the cluster id, the
// machine's name and a random suffix, so two gateways on one machine differ.
func gatewayID(cluster string) string {
	hn, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	if hn == "" {
		hn = "gw"
	}
	return cluster + "/" + hn + "-" + hex.EncodeToString(b[:])
}

// checkBus refuses, by the bus's own rules, the bus.url and bus.listen
// values config.Validate lets through and bus.New would refuse (a port
// out of range, a path, ws mixed with nats URLs, a listen host that is a
// name): one line naming the key, before anything is bound, rather than
// the bus's own word once the listeners are.
func checkBus(cfg config.Config) error {
	if len(cfg.Bus.URL) > 0 {
		if err := bus.CheckURLs(cfg.Bus.URL); err != nil {
			return fmt.Errorf("config: %s: %w", cfg.Key("bus.url"), err)
		}
		return nil
	}
	if err := bus.CheckListenHost(cfg.Bus.Listen); err != nil {
		return fmt.Errorf("config: %s: %w", cfg.Key("bus.listen"), err)
	}
	return nil
}

// checkDataDir refuses a data_dir that is a file, or lies under one, by
// its key and before anything is bound: found later, it failed as the
// embedded bus's "bus: mkdir …" once the listeners were up, or as
// cluster.key, which the operator may never have set. A directory not
// there yet is fine: the start makes it.
func checkDataDir(dir, key string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("config: %s: %s is not a directory", key, p)
		case err == nil:
			return nil
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("config: %s: %w", key, err)
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// checkKeyFiles reads the key files cfg names, which Validate only finds,
// so one that holds no key stops the start before anything is bound or
// written: found by Run, it would follow the embedded bus's store, the
// generated credentials and the seeded zone (DESIGN §11: bad input changes
// nothing else). Run reads them again.
func checkKeyFiles(cfg config.Config) error {
	// The key generated into data_dir at an earlier start (cluster.key
	// empty) is the same secret, held to the same rules; one not there
	// yet is generated by Run.
	key := cfg.ClusterKeyPath()
	if _, err := os.Lstat(key); cfg.Cluster.Key != "" || !errors.Is(err, os.ErrNotExist) {
		// As for the bus credential (bus.token): a private key other
		// users can read lets any of them sign forwards and announcements
		// as this cluster. Refused rather than warned about, since a
		// warning at start is easily missed and the fix is one chmod.
		if fi, err := os.Stat(key); err == nil && fi.Mode().Perm()&0o077 != 0 && runtime.GOOS != "windows" {
			return fmt.Errorf("config: %s: %s has mode %04o; it holds the cluster's private key: chmod 600 it", cfg.Key("cluster.key"), key, fi.Mode().Perm())
		}
		k, err := host.LoadKey(key)
		if err != nil {
			return fmt.Errorf("config: %s: %w", cfg.Key("cluster.key"), err)
		}
		if err := ownKeyElsewhere(&cfg, k); err != nil {
			return err
		}
	}
	for i, is := range cfg.Auth.Issuers {
		if _, err := auth.LoadKeys(is.KeysFile); err != nil {
			return fmt.Errorf("config: %s: %w", cfg.Key(fmt.Sprintf("auth.issuers[%d].keys_file", i)), err)
		}
	}
	if cfg.TLS.ACME.CARoot != "" {
		if _, err := tlsmgr.LoadRoots(cfg.TLS.ACME.CARoot); err != nil {
			return fmt.Errorf("config: %s: %w", cfg.Key("tls.acme.ca_root"), err)
		}
	}
	return nil
}

// ownKeyElsewhere refuses a static peer of another id whose public_key is
// this cluster's own: a key pasted into the wrong entry, under which that
// peer's marks never verify and this cluster's would pass for its.
func ownKeyElsewhere(cfg *config.Config, key ed25519.PrivateKey) error {
	pub := key.Public().(ed25519.PublicKey)
	for i, p := range cfg.Clusters {
		if p.ID == cfg.Cluster.ID {
			continue
		}
		if k, err := decodeKey(p.PublicKey); err == nil && k.Equal(pub) {
			return fmt.Errorf("config: %s: is this cluster's own key (cluster.key), not cluster %q's; give that cluster's key (its gateway lists it in GET /api/v3/discovery/clusters)", cfg.Key(fmt.Sprintf("clusters[%d].public_key", i)), p.ID)
		}
	}
	return nil
}

// clusterKey loads the cluster's Ed25519 key, generating it into the data
// directory at first start when no key file is configured.
func (g *Gatehouse) clusterKey() (ed25519.PrivateKey, error) {
	path := g.cfg.ClusterKeyPath()
	if k, err := host.LoadKey(path); err == nil {
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("gatehouse: cluster.key: %w", err)
	}
	if g.cfg.Cluster.Key != "" {
		return nil, fmt.Errorf("gatehouse: cluster.key: %s does not exist", path)
	}
	k, err := host.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("gatehouse: cluster key: %w", err)
	}
	// With an external bus nothing else has made the data directory yet
	// (the embedded one makes it for its credentials).
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("gatehouse: cluster key: %w", err)
	}
	if err := host.WriteKey(path, k); err != nil {
		return nil, fmt.Errorf("gatehouse: cluster key: %w", err)
	}
	g.log.Info("generated cluster key", "path", path, "public_key", host.PublicKeyString(k.Public().(ed25519.PublicKey)))
	return k, nil
}

// metricsHandler serves reg's metrics. A collector that fails (the process
// collector out of file descriptors, say) loses its own series, is logged
// and counted in promhttp_metric_handler_errors_total, and the scrape
// still answers the rest: by promhttp's default one error made the whole
// scrape a 500, leaving an operator blind when the gateway is in trouble.
func metricsHandler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:      reg,
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      scrapeLog{log},
	})
}

// scrapeLog is promhttp's Logger over slog.
type scrapeLog struct{ log *slog.Logger }

func (l scrapeLog) Println(v ...any) {
	l.log.Warn("metrics: a scrape went on without what failed", "error", strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}

// managementMux serves the management listener's own routes: /healthz
// outside everything, /metrics, the dashboard, and the control API once it
// exists (503 until then, so status works while the rest boots).
func (g *Gatehouse) managementMux(api *atomic.Pointer[http.Handler]) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", metricsHandler(g.reg, g.log))
	dash := dashboard.Handler()
	for _, p := range []string{"/{$}", "/dashboard/dashboard.js", "/dashboard/dashboard.css"} {
		mux.Handle("GET "+p, dash)
	}
	// Errors the gateway answers itself are problems (DESIGN §2), so the
	// mux's own plain-text 404 and 405 are never reached.
	for _, p := range []string{"/healthz", "/metrics", "/{$}", "/dashboard/dashboard.js", "/dashboard/dashboard.css"} {
		mux.HandleFunc(p, problem.GetOnly)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusNotFound, "the management listener serves no such path")
	})
	apiH := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := api.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		// The API is JSON only, its errors problems (DESIGN §2, §7): a
		// client such as gatehouse ctl reads this 503 like any other; and
		// no cache keeps it, as none keeps any answer of the API.
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", "1")
		problem.Write(w, http.StatusServiceUnavailable, "the gateway is starting")
	})
	mux.Handle("/api/", apiH)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every path under /api/ goes to the API as sent: the mux would
		// redirect one with "." or ".." segments to the path cleaned,
		// another item (records/./.. is the zone), and a client that
		// follows a 307 would DELETE that. The API answers such a path
		// 400 after its credential check. A path that is under /api only
		// once cleaned ("//api/…", "/x/../api/…", "/api") is a control
		// path too: left to the mux, it would be redirected, unchecked.
		if p := r.URL.Path; strings.HasPrefix(p, "/api/") || strings.HasPrefix(path.Clean(p)+"/", "/api/") {
			apiH.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// zoneGateways is what a seeded zone's wildcard answers: the https
// listener's address when it names one, else loopback. It is written as
// the control API writes gateways: an IPv4-mapped address as IPv4 (the
// DNS server answers such an address neither A nor AAAA) and without an
// interface zone, which no record carries.
func zoneGateways(httpsAddr string) []string {
	h, _, err := net.SplitHostPort(httpsAddr)
	if err == nil {
		if a, err := netip.ParseAddr(h); err == nil {
			if a = a.Unmap().WithZone(""); !a.IsUnspecified() {
				return []string{a.String()}
			}
		}
	}
	return []string{"127.0.0.1"}
}

// seedZone creates the -zone zone at first start; an existing zone is left
// as the operator last wrote it. A zone whose gateways are all loopback
// (seeded so because the https listener names no address, or names a
// loopback one) would answer the internet's queries with 127.0.0.1: every
// start warns, saying how to set the gateways' public addresses, until
// they are set. A zone under localhost is loopback by definition (RFC
// 6761), as the demo's is, and is not warned about.
func seedZone(ctx context.Context, st zoneStore, log *slog.Logger, name, httpsAddr string) error {
	if name == "" {
		return nil
	}
	z, err := st.GetZone(ctx, name)
	seeded := err != nil
	if seeded {
		z = &route.Zone{Name: name, Gateways: zoneGateways(httpsAddr), TTL: 60}
		if err := st.PutZone(ctx, z); err != nil {
			return err
		}
	}
	local := name == "localhost" || strings.HasSuffix(name, ".localhost")
	if allLoopback(z.Gateways) && !local {
		log.Warn("zone's gateways are all loopback: its names resolve to "+strings.Join(z.Gateways, ", ")+" until the gateways' public addresses are set",
			"zone", name, "gateways", z.Gateways, "seeded", seeded,
			"set_with", fmt.Sprintf(`gatehouse ctl zones put %s '{"gateways":["<public IP>"]}'`, name))
		return nil
	}
	if seeded {
		log.Info("zone seeded", "zone", name, "gateways", z.Gateways)
	}
	return nil
}

// allLoopback reports whether gws holds addresses and all are loopback.
func allLoopback(gws []string) bool {
	for _, g := range gws {
		if a, err := netip.ParseAddr(g); err != nil || !a.IsLoopback() {
			return false
		}
	}
	return len(gws) > 0
}

type zoneStore interface {
	GetZone(ctx context.Context, name string) (*route.Zone, error)
	PutZone(ctx context.Context, z *route.Zone) error
}

func joinURLs(urls []string) string { return strings.Join(urls, ",") }

// trimScheme turns the bus's client URL into the host:port a demo host or
// test dials.
func trimScheme(u string) string {
	u, _, _ = strings.Cut(u, ",")
	u = strings.TrimPrefix(u, "nats://")
	return strings.TrimPrefix(u, "tls://")
}

func decodeKey(s string) (ed25519.PublicKey, error) { return host.ParsePublicKey(s) }
