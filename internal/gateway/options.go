package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// Options configures a [Gateway]. Required: ClusterID and Live. Every other
// zero field has the default its comment names.
type Options struct {
	// ClusterID is this gateway's cluster (a DNS label, DESIGN §1): the
	// X-Gatehouse-Cluster value sent to hosts and on every response.
	ClusterID string
	// Live is the routing table every request reads (one Load per
	// request).
	Live *route.Live
	// API serves api.{zone} (DESIGN §7), after header hygiene. Nil answers
	// those names 404.
	API http.Handler
	// TrustedProxies are the peers (load balancers) whose Forwarded and
	// X-Forwarded-* headers are believed; the client IP is then the
	// rightmost X-Forwarded-For hop outside these prefixes. Empty trusts
	// no peer: those headers are stripped.
	TrustedProxies []netip.Prefix
	// Logger receives the access log (when AccessLog) and errors. Nil
	// discards.
	Logger *slog.Logger
	// Registry is where the request metrics are registered when Metrics is
	// nil. Nil leaves them unregistered.
	Registry prometheus.Registerer
	// Metrics is the collector set to use, shared with the listeners that
	// drive its ActiveConnections gauge. Nil: New builds one on Registry.
	Metrics *metrics.Set
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Proxy configures dispatch. Its zero ClusterID, Logger, Metrics and
	// Now are taken from the fields above; a nil Fallback is filled by the
	// cluster layer (peer failover) when it provides one.
	Proxy proxy.Options
	// Edge configures CORS, rate limits, edge tokens and policy (edge.go).
	Edge EdgeOptions
	// Cluster configures owner affinity and failover (affinity.go).
	Cluster ClusterOptions
	// AccessLog writes one slog line per request at Info level (no
	// payload). False writes none.
	AccessLog bool
	// TunnelIdleTimeout closes a connection upgraded after a 101
	// (WebSocket), both sides, once it has carried no byte in either
	// direction for this long. Zero: never; negative is refused.
	TunnelIdleTimeout time.Duration
	// Conns, if not nil, holds every connection upgraded after a 101
	// until it ends, so that route.Conns.Cut closes, both sides, those
	// of an app suspended, retired or deleted, or of a host revoked.
	// nil: a table change never closes one.
	Conns *route.Conns
}

func (o *Options) validate() error {
	switch {
	case o.ClusterID == "":
		return errors.New("gateway: ClusterID is required")
	case !route.ValidLabel(o.ClusterID):
		return fmt.Errorf("gateway: ClusterID %q is not a DNS label", o.ClusterID)
	case o.Live == nil:
		return errors.New("gateway: Live routing table is required")
	}
	if o.TunnelIdleTimeout < 0 {
		return fmt.Errorf("gateway: TunnelIdleTimeout must not be negative, got %s", o.TunnelIdleTimeout)
	}
	for i, p := range o.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("gateway: TrustedProxies[%d] is not a valid prefix", i)
		}
	}
	return nil
}
