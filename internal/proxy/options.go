package proxy

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
)

// Options configures a [Proxy]. The zero value is usable: every zero field
// has the default its comment names.
type Options struct {
	// ClusterID is this gateway's cluster, sent upstream as
	// X-Gatehouse-Cluster and set on every response. Empty sends no header.
	ClusterID string
	// Logger receives upstream failures (never payloads). Nil discards.
	Logger *slog.Logger
	// Metrics receives upstream errors by reason. Nil: an unregistered set.
	Metrics *metrics.Set
	// Now is the clock for health cool-downs. Nil means time.Now.
	Now func() time.Time

	// DialTimeout bounds connecting (and the TLS handshake) to a host.
	// Zero means 5 s; negative is invalid.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a host's response headers
	// once the request is sent (http, https and h2c hosts). Zero means 30 s;
	// negative means no limit (the request's context still applies).
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout is how long an idle upstream connection is kept for
	// reuse. Zero means 90 s; negative is invalid.
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool size per host. Zero means
	// 64; negative is invalid.
	MaxIdleConnsPerHost int

	// DisableFastPath sends every request through httputil.ReverseProxy.
	// By default GET and HEAD requests without a body to plain-http hosts
	// take the proxy's own HTTP/1.1 fast path (fast.go), which sends and
	// answers the same bytes with far less work per request.
	DisableFastPath bool

	// Fallback is called when the local attempt cannot serve the request —
	// no routable host ([ErrNoHost], [ErrNoRoutableHost]) or every tried
	// host unreachable ([ErrUnreachable]) — before anything was written to
	// w. If it returns true it has answered; otherwise the proxy writes its
	// own 502/503. cause is one of those errors (test with errors.Is). It is
	// never called for timeouts or failures after the request was sent.
	// Nil means no fallback.
	Fallback func(w http.ResponseWriter, r *http.Request, cause error) bool

	// OwnFields are response fields the handler in front of the proxy sets
	// itself, with one value each (the gateway's X-RateLimit-*): a host's
	// response, and its 1xx, may not add a second value, so the host's
	// are dropped.
	// Names in canonical form.
	OwnFields []string
}

func (o *Options) fill() error {
	switch {
	case o.DialTimeout < 0:
		return errors.New("proxy: DialTimeout must not be negative")
	case o.IdleConnTimeout < 0:
		return errors.New("proxy: IdleConnTimeout must not be negative")
	case o.MaxIdleConnsPerHost < 0:
		return errors.New("proxy: MaxIdleConnsPerHost must not be negative")
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ResponseHeaderTimeout == 0 {
		o.ResponseHeaderTimeout = 30 * time.Second
	} else if o.ResponseHeaderTimeout < 0 {
		o.ResponseHeaderTimeout = 0
	}
	if o.IdleConnTimeout == 0 {
		o.IdleConnTimeout = 90 * time.Second
	}
	if o.MaxIdleConnsPerHost == 0 {
		o.MaxIdleConnsPerHost = 64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		m, err := metrics.New(nil)
		if err != nil {
			return err
		}
		o.Metrics = m
	}
	return nil
}
