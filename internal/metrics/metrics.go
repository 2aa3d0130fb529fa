package metrics

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Label values for requests that did not reach an app.
const (
	AppUnknown = "_unknown" // the Host matched nothing
	AppAPI     = "_api"     // api.{zone}: the gateway's own API
	AppNone    = "_none"    // answered before routing (healthz)
)

// Upstream error reasons, the values of the reason label.
const (
	ReasonDial     = "dial"     // could not connect: the host is unreachable
	ReasonTimeout  = "timeout"  // no response in time
	ReasonCanceled = "canceled" // the client went away
	ReasonNoHost   = "no_host"  // no routable host for the app
	ReasonBadBody  = "bad_body" // the client's request body could not be read
	ReasonOther    = "other"    // any other transport error
)

// reasons are every Reason* value, for [Set.ForgetApp].
var reasons = [...]string{ReasonDial, ReasonTimeout, ReasonCanceled, ReasonNoHost, ReasonBadBody, ReasonOther}

// Results of a forward to a peer cluster, the values of the result label
// of ClusterForwards.
const (
	ForwardAnswered    = "answered"    // the peer's answer went to the client
	ForwardUnreachable = "unreachable" // could not connect, or cooling down after that
	ForwardFailed      = "failed"      // answered 5xx, skipped for the next candidate
	ForwardNoHost      = "no_host"     // the owner proved no host of its saw the request
	ForwardDeadline    = "deadline"    // cluster.deadline passed first
	ForwardCanceled    = "canceled"    // the client went away
)

// Set is the collectors the request path shares. Every field is non-nil in
// a Set returned by [New]. The collectors are safe for concurrent use.
type Set struct {
	// Requests counts answered requests by app, code class ("2xx"...) and
	// method (folded by [Method]).
	Requests *prometheus.CounterVec
	// Duration is the request latency in seconds, by app.
	Duration *prometheus.HistogramVec
	// UpstreamErrors counts failed upstream attempts by app and reason.
	UpstreamErrors *prometheus.CounterVec
	// ActiveConnections is the number of open client connections; the
	// listeners (internal/edge) drive it and drain waits for zero.
	ActiveConnections prometheus.Gauge
	// FastPathHandoffs counts HTTP/1.1 connections the fast path
	// (internal/lane) handed to net/http, by the reason of the request
	// that made it.
	FastPathHandoffs *prometheus.CounterVec
	// ConnectionsRefused counts client connections closed as soon as they
	// were accepted because listeners.max_connections were open.
	ConnectionsRefused prometheus.Counter
	// ClusterForwards counts requests sent to peer clusters' gateways
	// (DESIGN §5.2), by cluster, why (owner: affinity; failover) and
	// how the attempt ended (see the Forward* constants).
	ClusterForwards *prometheus.CounterVec
	// ForwardMarksRefused counts forward marks (DESIGN §5.3) that did not
	// verify, by the cluster they name: a known peer's id, or "_unknown"
	// for one that names no peer (a client's forgery; its id is not a
	// label, as anyone can make one up).
	ForwardMarksRefused *prometheus.CounterVec
	// TLSHellos counts the https listener's connections by how their
	// ClientHello ended (internal/edge's Hello* values: ok, timeout,
	// malformed, plain_http, closed, refused_posture, no_route).
	TLSHellos *prometheus.CounterVec

	apps sync.Map // app id -> *App, see [Set.App]
}

// New builds a Set and registers it on reg. A nil reg leaves the
// collectors unregistered (tests, benchmarks). It fails if reg already
// holds collectors of the same names.
func New(reg prometheus.Registerer) (*Set, error) {
	s := &Set{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "http_requests_total",
			Help: "Requests answered, by app, status class and method.",
		}, []string{"app", "code", "method"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gatehouse", Name: "http_request_duration_seconds",
			Help:    "Time from the request's arrival to the end of its response, by app.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"app"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "upstream_errors_total",
			Help: "Failed upstream attempts, by app and reason (dial, timeout, canceled, no_host, bad_body, other).",
		}, []string{"app", "reason"}),
		ActiveConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gatehouse", Name: "active_connections",
			Help: "Open client connections on every listener; drain waits for zero.",
		}),
		FastPathHandoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "fast_path_handoffs_total",
			Help: "HTTP/1.1 connections the fast path handed to net/http, by why (method, version, target, header, host, framing, upgrade, expect, size, line_ending).",
		}, []string{"reason"}),
		ConnectionsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "connections_refused_total",
			Help: "Client connections closed as soon as they were accepted, because listeners.max_connections were open, or listeners.max_connections_per_source from their source.",
		}),
		ClusterForwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "cluster_forwards_total",
			Help: "Requests sent to peer clusters' gateways, by cluster, kind (owner, failover) and result (answered, unreachable, failed, no_host, deadline, canceled).",
		}, []string{"cluster", "kind", "result"}),
		ForwardMarksRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "forward_marks_refused_total",
			Help: "Forward marks (X-Gatehouse-Forwarded, X-Gatehouse-Client) that did not verify, by the peer cluster they name (_unknown: none).",
		}, []string{"from"}),
		TLSHellos: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gatehouse", Name: "tls_hellos_total",
			Help: "Connections to the https listener, by the outcome of their ClientHello (ok, timeout, malformed, plain_http, closed, refused_posture, no_route).",
		}, []string{"outcome"}),
	}
	if reg == nil {
		return s, nil
	}
	// DESIGN §3 names the drain signal "active_connections" on /metrics,
	// and a platform's drain automation may look for exactly that name;
	// dashboards built on the namespaced name keep it. Both read one gauge.
	design := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "active_connections",
		Help: "Open client connections on every listener; drain waits for zero (DESIGN's name for gatehouse_active_connections).",
	}, func() float64 {
		var m dto.Metric
		if s.ActiveConnections.Write(&m) != nil {
			return 0
		}
		return m.GetGauge().GetValue()
	})
	for _, c := range []prometheus.Collector{s.Requests, s.Duration, s.UpstreamErrors, s.ActiveConnections, design, s.FastPathHandoffs, s.ConnectionsRefused, s.ClusterForwards, s.ForwardMarksRefused, s.TLSHellos} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return s, nil
}

// NewRegistry returns a registry with the Go runtime and process
// collectors, for the management listener's /metrics.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// classes and methods are every value [Class] and [Method] return, for
// [Set.ForgetApp].
var (
	classes = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}
	methods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace, "OTHER"}
)

// Class folds a status code to its class label, "1xx" to "5xx"; anything
// out of range (499 included, which is 4xx) stays bounded.
func Class(code int) string {
	switch {
	case code < 200:
		return "1xx"
	case code < 300:
		return "2xx"
	case code < 400:
		return "3xx"
	case code < 500:
		return "4xx"
	default:
		return "5xx"
	}
}

// Method folds a request method to a bounded label: the standard methods
// keep their name, anything else is "OTHER".
func Method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}
