package gateway

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
)

// EdgeOptions configures the protection layers: CORS (cors.go), rate
// limits (limit.go), edge tokens (auth.go) and path policy (policy.go),
// DESIGN §2 steps 3 and 5-8. The per-app settings live on route.App and
// apply live with each table snapshot; these are the gateway-wide ones.
type EdgeOptions struct {
	// RateLimit and RateWindow are the budget per (app, client address)
	// for apps with no rate_limit of their own. Zero means 600 per 60 s.
	RateLimit  int
	RateWindow time.Duration
	// UnknownRateLimit and UnknownRateWindow are the budget per client
	// address for requests to unknown hosts. Zero means 100 per 60 s.
	UnknownRateLimit  int
	UnknownRateWindow time.Duration
	// MaxRateKeys bounds each limiter's key population (LRU eviction).
	// Zero means limit.DefaultMaxKeys (100,000).
	MaxRateKeys int
	// Auth configures edge tokens: the issuers, claim limits and
	// auth.max_subjects. Its zero value verifies nothing: an app that
	// requires auth then answers 401 to everything.
	Auth auth.Options
	// Registry is where the edge counters (gatehouse_policy_denied_total,
	// gatehouse_rate_limited_total) are registered. Nil leaves them
	// unregistered.
	Registry prometheus.Registerer
	// Now is the limiters' clock. Nil means the gateway's clock.
	Now func() time.Time
}

// edgeState is what the protection layers keep between requests. Every
// field is safe for concurrent use.
type edgeState struct {
	quota    limit.Quota // default per (app, client)
	unknownQ limit.Quota // per client, unknown hosts
	apps     *limit.Window
	unknown  *limit.Window // its own population: an unknown-host flood cannot evict app keys
	verifier *auth.Verifier
	claims   bool
	subjects *limit.Subjects
	denied   *prometheus.CounterVec
	limited  *prometheus.CounterVec
}

// Edge defaults (DESIGN §2).
const (
	defaultRateLimit    = 600
	defaultUnknownLimit = 100
	defaultRateWindow   = 60 * time.Second
)

// initEdge builds g.edge from opts; New calls it once. It validates every
// field and, besides loading the issuers' key files, has no side effect but
// registering the edge counters on opts.Registry.
func (g *Gateway) initEdge(opts EdgeOptions) error {
	now := opts.Now
	if now == nil {
		now = g.now
	}
	if now == nil {
		now = time.Now
	}
	q, err := quota("", opts.RateLimit, opts.RateWindow, defaultRateLimit)
	if err != nil {
		return err
	}
	uq, err := quota("Unknown", opts.UnknownRateLimit, opts.UnknownRateWindow, defaultUnknownLimit)
	if err != nil {
		return err
	}
	apps, err := limit.NewWindow(limit.WindowOptions{MaxKeys: opts.MaxRateKeys, Now: now})
	if err != nil {
		return fmt.Errorf("gateway: edge: %w", err)
	}
	unknown, _ := limit.NewWindow(limit.WindowOptions{MaxKeys: opts.MaxRateKeys, Now: now})
	ao := opts.Auth
	if ao.Now == nil {
		ao.Now = now
	}
	v, err := auth.New(ao)
	if err != nil {
		return fmt.Errorf("gateway: edge: %w", err)
	}
	subjects, err := limit.NewSubjects(limit.SubjectsOptions{MaxSubjects: ao.MaxSubjects, Now: now})
	if err != nil {
		return fmt.Errorf("gateway: edge: %w", err)
	}
	e := edgeState{quota: q, unknownQ: uq, apps: apps, unknown: unknown, verifier: v, claims: ao.ClaimLimits, subjects: subjects,
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatehouse_policy_denied_total", Help: "Requests refused 403 by an app's path policy.",
		}, []string{"app"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatehouse_rate_limited_total", Help: "Requests refused 429 by a rate limit (app, unknown host, or token claims).",
		}, []string{"app", "limit"}),
	}
	if opts.Registry != nil {
		for _, c := range []prometheus.Collector{e.denied, e.limited} {
			if err := opts.Registry.Register(c); err != nil {
				return fmt.Errorf("gateway: edge: metrics: %w", err)
			}
		}
	}
	g.edge = e
	return nil
}

// HeldApps calls f with each app id the gateway keeps state for: its
// metrics (every request is counted there, the limited and denied ones
// included, so an app with edge counters is among them) and its proxy's
// round-robin counters. With ForgetApp it makes the gateway a
// route.AppState, for the table's sweep (route.Forget).
func (g *Gateway) HeldApps(f func(id string) bool) {
	more := true
	g.metrics.HeldApps(func(id string) bool { more = f(id); return more })
	if more {
		g.proxy.HeldApps(f)
	}
}

// ForgetApp deletes app's series (requests, duration, upstream errors,
// policy denied, rate limited) and drops its round-robin counter. A
// request that finishes after it records into series made again, and is
// counted in the metrics again, so the sweep forgets it again later.
func (g *Gateway) ForgetApp(app string) {
	g.metrics.ForgetApp(app)
	g.edge.denied.DeleteLabelValues(app)
	// The limit label's values are the limiters' names, not a fixed set
	// here; the vector holds a series only per app and limit that
	// refused a request, so the scan is short.
	g.edge.limited.DeletePartialMatch(prometheus.Labels{"app": app})
	g.proxy.ForgetApp(app)
}

// quota resolves one budget option pair against its defaults.
func quota(name string, n int, w time.Duration, def int) (limit.Quota, error) {
	if n == 0 {
		n = def
	}
	if w == 0 {
		w = defaultRateWindow
	}
	q := limit.Quota{Limit: n, Window: w}
	if err := q.Validate(); err != nil {
		return q, fmt.Errorf("gateway: edge: %sRateLimit/%sRateWindow: %w", name, name, err)
	}
	return q, nil
}
