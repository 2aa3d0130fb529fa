package discovery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// metrics are discovery's collectors:
//
//	gatehouse_hosts{state}                               gauge: hosts by state
//	gatehouse_host_verification_failures_total{reason}  counter: unenrolled, key_mismatch,
//	    app_not_allowed, bad_claim, unreachable, timeout, bad_response, bad_signature, other
//	gatehouse_host_messages_dropped_total{reason}       counter: oversized, malformed, unknown_subject, too_many_hosts,
//	    too_many_unverified (a never-verified host's announce, forgotten for a newer one),
//	    unsigned_leave, bad_signature, unverified_leave, stale_leave (a leave that may not drain its host),
//	    queue_full (a message that found its lane full, see lanes.go)
type metrics struct {
	hosts    *prometheus.GaugeVec
	failures *prometheus.CounterVec
	dropped  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		hosts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gatehouse_hosts", Help: "Known hosts by discovery state.",
		}, []string{"state"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatehouse_host_verification_failures_total", Help: "Host verifications that failed, by reason.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gatehouse_host_messages_dropped_total", Help: "Host bus messages dropped unread, by reason.",
		}, []string{"reason"}),
	}
	for _, s := range []route.HostState{route.HostProvisional, route.HostVerified, route.HostUnhealthy, route.HostDraining} {
		m.hosts.WithLabelValues(string(s))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.hosts, m.failures, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// move accounts a host changing state; "" is "not tracked".
func (m *metrics) move(from, to route.HostState) {
	if from == to {
		return
	}
	if from != "" {
		m.hosts.WithLabelValues(string(from)).Dec()
	}
	if to != "" {
		m.hosts.WithLabelValues(string(to)).Inc()
	}
}
