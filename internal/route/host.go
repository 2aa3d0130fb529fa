package route

import (
	"net/url"
	"sync/atomic"
	"time"
)

// HostState is where a host stands in discovery (DESIGN §4).
type HostState string

const (
	HostProvisional HostState = "provisional" // announced, not yet verified: never routed to
	HostVerified    HostState = "verified"    // routable
	HostUnhealthy   HostState = "unhealthy"   // missed heartbeats or failed checks: not routed to
	HostDraining    HostState = "draining"    // sent leave: in-flight requests finish, no new ones
)

// Host is one backend as a table snapshot sees it. Everything but Health is
// immutable once published; discovery publishes a new *Host when any of it
// changes.
type Host struct {
	ID   string
	Apps []string
	Addr string // host:port as announced
	// Dial is the IP:port every connection to the host goes to: the
	// address that passed its challenge (DESIGN §4). Addr may name the
	// host, and a name is resolved only by the challenge, never at a
	// dial, so one pointed elsewhere since does not move the host's
	// traffic; URL (and so the TLS server name) keeps the name. Empty
	// means Addr (hosts built by hand in tests); discovery sets it on
	// every host it publishes as routable.
	Dial   string
	Scheme string // http, h2c, https or tls
	// URL is the base URL requests are proxied to; nil for tls hosts.
	URL   *url.URL
	State HostState
	// Refused says the host's enrolment no longer allows the claims it
	// last proved (revoked, another key enrolled, an app taken away;
	// never claims someone else announced in its name):
	// its state is then provisional or draining, and the connections
	// still open to it are closed ([Conns]).
	Refused bool
	// Health is the passive health shared by every snapshot of this host, so
	// that a failure seen on one request is seen by the next without a
	// table rebuild. Never nil in a published table.
	Health *Health
}

// DialAddr is the address connections to h go to: Dial, else Addr.
func (h *Host) DialAddr() string {
	if h.Dial != "" {
		return h.Dial
	}
	return h.Addr
}

// Routable reports whether new requests may be sent to h.
func (h *Host) Routable() bool { return h.State == HostVerified }

// Health is a host's passive health: the data plane marks connect failures
// and the selector skips a host while it cools down. Safe for concurrent use.
type Health struct {
	degradedUntil atomic.Int64 // unix nanos; 0 = not degraded
	lastFail      atomic.Int64 // unix nanos of the most recent failure
	fails         atomic.Int32 // consecutive failures, for back-off
	timeouts      atomic.Int32 // consecutive answers that never began
	answeredSent  atomic.Int64 // unix nanos: when the latest answered request was sent (to answerGrain)
}

// answerGrain is how finely Answered records when an answered request was
// sent: a store at most that often, not one per answer on a shared cache
// line. Far under any deadline (at least 1 s), so an answer to a request
// sent that long after a timed-out one is always seen.
const answerGrain = 100 * time.Millisecond

// timeoutsToCool is how many requests in a row a host must leave
// unanswered past their deadline, with no answer between, before it
// cools down as a host refusing connects does. One is not enough: a slow
// endpoint, which any client may call, would take a healthy host out of
// turn. A host that accepts connections and answers nothing (hung, or
// its process stopped) otherwise kept its share of requests, each one
// waiting out the deadline for a 504 (nginx's max_fails counts a timeout
// at once; Envoy's consecutive_gateway_failure waits for 5).
const timeoutsToCool = 3

// Cool-down bounds for a degraded host: it doubles with each consecutive
// failure so a dead host is retried ever less often, and a restarted one
// still recovers by itself.
const (
	minCoolDown = 1 * time.Second
	maxCoolDown = 30 * time.Second
)

// Fail records a connect or transport failure at now and returns how long
// the host now cools down.
func (h *Health) Fail(now time.Time) time.Duration {
	n := h.fails.Add(1)
	d := minCoolDown
	for i := int32(1); i < n && d < maxCoolDown; i++ {
		d *= 2
	}
	d = min(d, maxCoolDown)
	h.lastFail.Store(now.UnixNano())
	h.degradedUntil.Store(now.Add(d).UnixNano())
	return d
}

// Timeout records at now a request sent at sent whose answer did not begin
// within its deadline, and reports how long the host now cools down: zero
// until timeoutsToCool such requests have come in a row. A request the
// host answered that was sent after this one means the host is not hung,
// and this one is not counted: requests sent together to a slow endpoint
// time out together, after whatever the host answered meanwhile, so any
// client could otherwise cool a healthy host by calling one three times at
// once.
func (h *Health) Timeout(now, sent time.Time) time.Duration {
	if h.answeredSent.Load() > sent.UnixNano() {
		return 0
	}
	if h.timeouts.Add(1) < timeoutsToCool {
		return 0
	}
	return h.Fail(now)
}

// Answered records a request sent at sent that the host answered: OK, and
// the time Timeout weighs its unanswered requests against.
func (h *Health) Answered(sent time.Time) {
	h.OK()
	s := sent.UnixNano()
	if old := h.answeredSent.Load(); s-old >= int64(answerGrain) {
		h.answeredSent.CompareAndSwap(old, s)
	}
}

// OK records a success: the host is no longer degraded.
func (h *Health) OK() {
	if h.fails.Load() != 0 {
		h.fails.Store(0)
	}
	if h.timeouts.Load() != 0 {
		h.timeouts.Store(0)
	}
	if h.degradedUntil.Load() != 0 {
		h.degradedUntil.Store(0)
	}
}

// Degraded reports whether the host is cooling down at now.
func (h *Health) Degraded(now time.Time) bool {
	u := h.degradedUntil.Load()
	return u != 0 && now.UnixNano() < u
}

// LastFail is the time of the most recent failure, or zero.
func (h *Health) LastFail() time.Time {
	n := h.lastFail.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// HostInfo is a host's discovery record as GET /api/v3/hosts shows it.
type HostInfo struct {
	HostID        string    `json:"host_id"`
	Apps          []string  `json:"apps"`
	Addr          string    `json:"addr"`
	Scheme        string    `json:"scheme"`
	State         HostState `json:"state"`
	Degraded      bool      `json:"degraded"`
	Inflight      int64     `json:"inflight"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	VerifiedAt    time.Time `json:"verified_at,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
}
