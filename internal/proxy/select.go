package proxy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// robins holds one round-robin counter per app, so that apps sharing a
// gateway do not share a rhythm (with one global counter, two apps taking
// turns would each always land on the same host). An entry lives until
// the app leaves the routing table: [Proxy.ForgetApp].
type robins struct{ m sync.Map } // app id -> *atomic.Uint32

func (r *robins) next(app string) uint32 {
	c, ok := r.m.Load(app)
	if !ok {
		c, _ = r.m.LoadOrStore(app, new(atomic.Uint32))
	}
	return c.(*atomic.Uint32).Add(1) - 1
}

// pick chooses a host from pool, round robin from start: the first that
// speaks HTTP, is not in skip and is not cooling down at now. If every
// candidate cools down it returns the one that failed longest ago, so a
// whole pool marked degraded is still tried rather than refused. nil
// means pool holds no candidate at all.
func pick(pool []*route.Host, start uint32, now time.Time, skip []*route.Host) *route.Host {
	n := uint32(len(pool))
	var oldest *route.Host
	for i := range n {
		h := pool[(start+i)%n]
		if h.URL == nil || !h.Routable() || skipped(h, skip) {
			continue
		}
		if !h.Health.Degraded(now) {
			return h
		}
		if oldest == nil || h.Health.LastFail().Before(oldest.Health.LastFail()) {
			oldest = h
		}
	}
	return oldest
}

func skipped(h *route.Host, skip []*route.Host) bool {
	for _, s := range skip {
		if h == s {
			return true
		}
	}
	return false
}

// HeldApps calls f with each app id the proxy keeps a round-robin counter
// for. With ForgetApp it makes the proxy a route.AppState.
func (p *Proxy) HeldApps(f func(id string) bool) {
	p.robins.m.Range(func(k, _ any) bool { return f(k.(string)) })
}

// ForgetApp drops app's round-robin counter. A request routed to app
// after it starts a new one, which the next sweep forgets again.
func (p *Proxy) ForgetApp(app string) { p.robins.m.Delete(app) }
