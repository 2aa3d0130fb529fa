package discovery

import (
	"container/list"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/logcut"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

// queueSize bounds pending verifications and probes. A job that does not
// fit is retried by the sweeper.
const queueSize = 16384

// Discovery tracks the hosts of one cluster. Its methods may be called
// concurrently, before, during and after Run.
type Discovery struct {
	opts  Options
	m     *metrics
	drops *dropLog // dropped bus messages
	fails *dropLog // failed verifications
	// health says a host turning unhealthy and back (the gauge alone left
	// an operator nothing to read in the log), bounded like the others.
	health *dropLog
	ran    atomic.Bool
	// verifySig checks a leave's signature: ed25519.Verify, which tests
	// watch to see d.mu is not held meanwhile.
	verifySig func(pub ed25519.PublicKey, msg, sig []byte) bool

	queue    chan job      // verifications and probes of hosts that verified once
	pendingc chan struct{} // wakes a worker for d.pending; capacity 1
	flushc   chan struct{} // wakes the flusher; capacity 1

	// provenLane and unprovenLane hold the bus messages dispatch
	// queued; provenIDs the ids whose entry has a provenKey, which
	// dispatch reads without d.mu (lanes.go). It is written with d.mu
	// held too.
	provenLane, unprovenLane *lane
	queueFull                prometheus.Counter // dropped{reason="queue_full"}
	provenMu                 sync.RWMutex
	provenIDs                map[string]struct{}

	maxUnproven int // the cap on d.unproven, see unproven.go

	mu    sync.Mutex
	hosts map[string]*entry
	// left holds, per host id, the ts of the last leave accepted under
	// each key, for as long as a leave that old is inside the clock
	// window (the sweeper prunes it): a leave is accepted only if newer
	// than the last one its key signed, so a captured one cannot be
	// replayed. Per key, because a leave signs only host_id and ts: a new
	// run of the host with a new key may leave within the same second as
	// the old run did, and its leave is no replay. It outlives the entry,
	// which host_ttl may remove within that window.
	left    map[string][]leftBy
	dirty   map[string]struct{} // ids whose published host must be rebuilt or deleted
	busDown bool                // the sweeper saw the bus disconnected
	// unproven holds the entries that never verified, in the order of
	// their first announce; pending those of them waiting for a worker,
	// in the order they were queued. Both hold *entry (see unproven.go).
	unproven, pending list.List
	// checking counts the checks in flight per announced address; parked
	// holds, per address, the entries whose check waits for one of them
	// to end (see peraddr.go).
	checking map[string]int
	parked   map[string]*list.List
}

type job struct {
	id    string
	probe bool // an active health probe rather than a verification
	prove bool // a check of the proven claims (see takeProven)
}

// entry is one host's discovery record, guarded by Discovery.mu.
type entry struct {
	ann host.Announce // apps sorted and unique
	pub ed25519.PublicKey
	// gen is bumped by an announce of other claims and by Reverify; a
	// result for an older gen is dropped. An announce of the same claims
	// leaves it alone: it changes nothing a check depends on, and anyone
	// may repeat a host's announce faster than its challenge takes.
	gen    uint64
	health *route.Health

	verified bool // the last verification for this gen passed
	// proven holds the claims that last verified while different ones
	// (ann) are being checked. The host stays routed by its proven claims
	// until the check passes (the new ones take over) or fails (ann goes
	// back to the proven ones), so a forged announce on the bus can never
	// route to an unproven address nor take the host out of rotation.
	proven     *host.Announce
	verifiedAt time.Time
	// provenKey is the key of the claims that last passed a check, nil
	// until one does: a leave must be signed by it. It outlives a failed
	// check, so a host whose re-check failed as it began to shut down is
	// still drained by its leave.
	provenKey ed25519.PublicKey
	// passed is the claims that last passed a check (zero until one
	// does); an enrolment refusal of others does not stop the host being
	// asked to announce (see failed).
	passed host.Announce
	// passedCheckedAt is when the last check of the claims in passed
	// began: an announce that returns to them from others is held to one
	// check a heartbeat interval by it, as a copy is by checkedAt.
	passedCheckedAt time.Time
	// dial is the address (IP:port) at which passed passed: where the
	// host is dialed while routed by those claims. A name in Addr is
	// resolved by the check alone, so pointing it elsewhere later moves
	// nothing until a check passes there (see verify.Pin).
	dial string
	// since is the gateway's clock when the claims the host is routed by
	// passed a check after not being verified (first verification, new
	// claims, recovery from a failed check): when this life of the host
	// began, as far as the gateway can tell. Leaves are weighed against
	// it (see leaveFloor).
	since      time.Time
	lastErr    string
	nextVerify time.Time
	// failed says the last check of these claims failed for a reason an
	// announce may mend (not an enrolment refusal). A forged announce of
	// the same id at another address fails so, and the real host, whose
	// claims it replaced, is then known here and would never be asked to
	// announce again: its heartbeats are answered "announce" while this
	// holds, at most once a heartbeat interval to the same reply inbox
	// (asked, askedReply): per inbox, so that anyone heartbeating the id
	// faster than the host cannot take the host's own replies.
	failed bool
	// refused says the enrolment, as last read, refuses the claims the
	// host last proved (revoked, another key enrolled, an app taken
	// away), not merely claims announced in its name since: published
	// as route.Host.Refused, so the connections still open to it are
	// cut. A check that passes clears it.
	refused    bool
	asked      time.Time
	askedReply string

	lastHB   time.Time
	inflight int64
	stale    bool // no heartbeat for MissedHeartbeats intervals
	// silence is how long the heartbeat that ended a stale spell came
	// after the one before, for the line saying the host recovered.
	silence  time.Duration
	draining bool
	// undrain says something announced the host since it left: the next
	// check that passes ends the drain (a restarted host answered), and
	// until then the host is checked again every heartbeat interval
	// while it heartbeats. Announces are unsigned, so one alone never
	// ends a drain: a host that has begun to leave fails every challenge
	// (the host package answers 503). Only an enrolment refusal, which no
	// retry mends, or a newer leave clears it.
	undrain   bool
	probeFail bool
	nextProbe time.Time

	queued, verifying, probing bool
	checkGen                   uint64    // the gen of the last check started
	checkedAt                  time.Time // when the last check started
	stop                       func()    // cancels the check of gen in flight
	// proof is the check in flight of the claims e is routed by, started
	// while they were verified, if any. An announce of other claims does
	// not cancel it (see proofLocked), Reverify does; no other check of
	// verified claims starts meanwhile.
	proof *started
	// proveQueued says a check of the proven claims waits in the queue.
	proveQueued bool
	state       route.HostState // as last computed and counted in metrics

	// unproven is e's element in Discovery.unproven until e first
	// verifies, and pending its element in Discovery.pending while it
	// waits there for a check; nil otherwise.
	unproven, pending *list.Element
	// parked is e's element in Discovery.parked[parkedAt] (an addrKey)
	// while its check waits for a check at that address to end (e.queued
	// holds); nil otherwise.
	parked   *list.Element
	parkedAt string
}

func (e *entry) compute() route.HostState {
	switch {
	case e.draining:
		return route.HostDraining
	case !e.verified && e.proven == nil:
		return route.HostProvisional
	case e.stale || e.probeFail:
		return route.HostUnhealthy
	}
	return route.HostVerified
}

// New validates opts and registers the collectors on opts.Registry. It
// starts nothing.
func New(opts Options) (*Discovery, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = verify.NewClient()
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("discovery: metrics: %w", err)
	}
	return &Discovery{
		opts:         opts,
		verifySig:    ed25519.Verify,
		m:            m,
		drops:        newDropLog(opts.Logger, dropsNotLogged),
		fails:        newDropLog(opts.Logger, failuresNotLogged),
		health:       newDropLog(opts.Logger, healthNotLogged),
		queue:        make(chan job, queueSize),
		pendingc:     make(chan struct{}, 1),
		flushc:       make(chan struct{}, 1),
		provenLane:   newLane("proven", max(laneMsgs, opts.MaxHosts), laneBytes),
		unprovenLane: newLane("unproven", max(laneMsgs, opts.MaxHosts), laneBytes),
		queueFull:    m.dropped.WithLabelValues(dropQueueFull),
		provenIDs:    map[string]struct{}{},
		maxUnproven:  maxUnproven(opts.MaxHosts),
		hosts:        map[string]*entry{},
		left:         map[string][]leftBy{},
		dirty:        map[string]struct{}{},
		checking:     map[string]int{},
		parked:       map[string]*list.List{},
	}, nil
}

// Run subscribes to the cluster's hosts subjects and runs the workers, the
// flusher and the sweeper until ctx ends. It returns nil then, or an error
// if it cannot subscribe. Run may be called once.
func (d *Discovery) Run(ctx context.Context) error {
	if !d.ran.CompareAndSwap(false, true) {
		return errors.New("discovery: Run called twice")
	}
	sub, err := d.opts.Conn.Subscribe(host.WildcardSubject(d.opts.Cluster), d.dispatch)
	if err != nil {
		return fmt.Errorf("discovery: subscribe: %w", err)
	}
	// A fleet reconnecting at once is a burst; keep it rather than drop
	// it. dispatch takes each message in a scan and a map lookup, so the
	// backlog here stays short even under a flood (the lanes bound what
	// waits for a parse); the limits bound its memory if it does not.
	sub.SetPendingLimits(1<<18, 64<<20)
	defer sub.Unsubscribe()

	var wg sync.WaitGroup
	for _, l := range []*lane{d.provenLane, d.unprovenLane} {
		wg.Go(func() { d.drain(ctx, l) })
	}
	for range d.opts.Workers {
		wg.Go(func() { d.work(ctx) })
	}
	wg.Go(func() { d.flusher(ctx) })
	d.sweeper(ctx)
	wg.Wait()
	return nil
}

// Hosts returns every tracked host, sorted by id.
func (d *Discovery) Hosts() []route.HostInfo {
	now := d.opts.Now()
	d.mu.Lock()
	out := make([]route.HostInfo, 0, len(d.hosts))
	for _, e := range d.hosts {
		out = append(out, e.info(now))
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].HostID < out[j].HostID })
	return out
}

// Host returns one tracked host.
func (d *Discovery) Host(id string) (route.HostInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[id]
	if e == nil {
		return route.HostInfo{}, false
	}
	return e.info(d.opts.Now()), true
}

// Reverify queues a verification of a tracked host now (the control API's
// "check again"). It does not wait for the result.
func (d *Discovery) Reverify(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[id]
	if e == nil {
		return fmt.Errorf("discovery: no host %q", id)
	}
	e.nextVerify = time.Time{}
	// A check already in flight read the enrolment before this call (a
	// revoked key, say): its result must not land after this one's.
	e.gen++
	if p := e.proof; p != nil {
		if p.stop != nil {
			p.stop()
		}
		e.proof = nil
	}
	d.enqueueLocked(id, e)
	return nil
}

func (e *entry) info(now time.Time) route.HostInfo {
	c := e.routed()
	return route.HostInfo{
		HostID:        c.HostID,
		Apps:          slices.Clone(c.Apps),
		Addr:          c.Addr,
		Scheme:        c.Scheme,
		State:         e.state,
		Degraded:      e.health.Degraded(now),
		Inflight:      e.inflight,
		LastHeartbeat: e.lastHB,
		VerifiedAt:    e.verifiedAt,
		LastError:     e.lastErr,
	}
}

// updateLocked recomputes e's state; a change is counted and published.
func (d *Discovery) updateLocked(id string, e *entry) {
	s := e.compute()
	if s == e.state {
		return
	}
	d.m.move(e.state, s)
	switch {
	case s == route.HostUnhealthy:
		why := "health_probe"
		if e.stale {
			why = "missed_heartbeats"
		}
		d.health.warn(d.opts.Now(), "unhealthy", "discovery: host unhealthy, not routed until it recovers",
			"host_id", id, "addr", e.routed().Addr, "reason", why, "last_heartbeat", e.lastHB)
	case e.state == route.HostUnhealthy && s == route.HostVerified && e.silence > 0:
		// Back by a heartbeat after missing three: a host whose
		// -heartbeat is longer than heartbeat_interval does so at every
		// heartbeat, and the two durations side by side say why.
		d.health.info(d.opts.Now(), "healthy", "discovery: host healthy again", "host_id", id, "addr", e.routed().Addr,
			"heartbeat_gap", e.silence.Round(time.Millisecond).String(), "heartbeat_interval", d.opts.HeartbeatInterval.String())
	case e.state == route.HostUnhealthy && s == route.HostVerified:
		d.health.info(d.opts.Now(), "healthy", "discovery: host healthy again", "host_id", id, "addr", e.routed().Addr)
	}
	e.state = s
	d.markLocked(id)
}

// refuseLocked records whether the enrolment refuses the claims e is
// routed by; a change is published, whatever the state does (a draining
// host stays draining).
func (d *Discovery) refuseLocked(id string, e *entry, refused bool) {
	if e.refused != refused {
		e.refused = refused
		d.markLocked(id)
	}
}

// markLocked schedules id's published host for a rebuild (or delete).
func (d *Discovery) markLocked(id string) {
	d.dirty[id] = struct{}{}
	select {
	case d.flushc <- struct{}{}:
	default:
	}
}

// enqueueLocked queues a verification unless one is already queued. A
// host that never verified waits in d.pending, which its cap bounds; the
// others in d.queue, and when that is full the sweeper retries at its next
// tick.
func (d *Discovery) enqueueLocked(id string, e *entry) {
	if e.parked != nil && e.parkedAt != addrKey(e.ann.Addr) {
		d.unparkLocked(e) // announced elsewhere since: wait there, if at all
	}
	if e.queued {
		return
	}
	if e.unproven != nil {
		d.pendLocked(e)
		return
	}
	select {
	case d.queue <- job{id: id}:
		e.queued = true
	default:
		e.nextVerify = time.Time{}
	}
}

// After a table rebuild the flusher waits twice as long as the rebuild
// took (at most maxFlushGap) before the next one: a lone event on a small
// table is published at once, while a burst on a large one (a fleet
// reconnecting) is folded into few rebuilds, each of which sorts every
// host, so rebuilding never takes more than a third of a core.
const maxFlushGap = 50 * time.Millisecond

// flusher publishes dirty hosts to the builder in batches.
func (d *Discovery) flusher(ctx context.Context) {
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-ctx.Done():
			d.flush()
			return
		case <-d.flushc:
		}
		select {
		case <-ctx.Done():
			d.flush()
			return
		case <-gap.C:
		}
		t0 := time.Now()
		d.flush()
		gap.Reset(min(2*time.Since(t0), maxFlushGap))
	}
}

func (d *Discovery) flush() {
	d.mu.Lock()
	var set []*route.Host
	var del []string
	for id := range d.dirty {
		if e := d.hosts[id]; e != nil {
			set = append(set, e.routeHost())
		} else {
			del = append(del, id)
		}
	}
	clear(d.dirty)
	d.mu.Unlock()
	// One flusher: batches reach the builder in the order they were taken.
	d.opts.Builder.ApplyHosts(set, del)
}

// routed is the claims requests are routed by: the proven ones while new
// claims are being checked, else the announced ones.
func (e *entry) routed() *host.Announce {
	if e.proven != nil && !e.verified {
		return e.proven
	}
	return &e.ann
}

func (e *entry) routeHost() *route.Host {
	c := e.routed()
	h := &route.Host{
		ID:      c.HostID,
		Apps:    c.Apps,
		Addr:    c.Addr,
		Dial:    e.dialFor(*c),
		Scheme:  c.Scheme,
		State:   e.state,
		Refused: e.refused,
		Health:  e.health,
	}
	switch c.Scheme {
	case host.SchemeHTTP, host.SchemeH2C:
		h.URL = &url.URL{Scheme: "http", Host: c.Addr}
	case host.SchemeHTTPS:
		h.URL = &url.URL{Scheme: "https", Host: c.Addr}
	}
	return h
}

// dialFor is where claims c are dialed: the address they passed their
// check at, or "" when they are not the claims that last passed (the
// host is then not routable, and nothing dials it).
func (e *entry) dialFor(c host.Announce) string {
	if e.dial == "" || !sameClaims(c, e.passed) {
		return ""
	}
	return e.dial
}

// sweepEvery is the sweeper's period for a heartbeat interval: a quarter
// of it, so a silent host turns unhealthy within a quarter interval of
// its third missed heartbeat.
func sweepEvery(hb time.Duration) time.Duration { return max(hb/4, time.Millisecond) }

func (d *Discovery) sweeper(ctx context.Context) {
	t := time.NewTicker(sweepEvery(d.opts.HeartbeatInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := d.opts.Now()
			d.sweep(now)
			d.drops.summarize(now)
			d.fails.summarize(now)
			d.health.summarize(now)
		}
	}
}

// sweep ages every host and queues due verifications and probes.
func (d *Discovery) sweep(now time.Time) {
	connected := d.opts.Conn.IsConnected()
	tbl := d.opts.Builder.Live().Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !connected {
		d.busDown = true
		return
	}
	if d.busDown {
		// Heartbeats could not reach us; start every host's clock afresh.
		d.busDown = false
		for _, e := range d.hosts {
			e.lastHB = now
		}
	}
	for id, ls := range d.left {
		// The clock window refuses replays of the older ones now.
		ls = slices.DeleteFunc(ls, func(l leftBy) bool { return l.ts < now.Unix()-int64(leaveWindow/time.Second) })
		if len(ls) == 0 {
			delete(d.left, id)
		} else {
			d.left[id] = ls
		}
	}
	stale := time.Duration(d.opts.MissedHeartbeats) * d.opts.HeartbeatInterval
	for id, e := range d.hosts {
		since := now.Sub(e.lastHB)
		if since > d.opts.HostTTL {
			d.removeLocked(id, e, "host_ttl passed without heartbeat")
			continue
		}
		e.stale = since > stale
		d.updateLocked(id, e)
		if e.draining {
			if e.undrain && !e.stale && !e.queued && !e.checkingLocked() && !now.Before(e.nextVerify) {
				d.enqueueLocked(id, e)
			}
			continue
		}
		if !e.queued && !e.verifying && e.proof == nil && !now.Before(e.nextVerify) {
			d.enqueueLocked(id, e)
		}
		if e.proven != nil && !e.verified && e.proof == nil && !e.proveQueued && !now.Before(e.verifiedAt.Add(d.opts.Reverify)) {
			// Routed by claims whose proof is due while others are
			// checked: prove them on their own (see takeProven).
			select {
			case d.queue <- job{id: id, prove: true}:
				e.proveQueued = true
			default:
			}
		}
		// Probe the claims the host is routed by, proven ones included
		// while others are checked: anyone may keep announcing others.
		if (e.verified || e.proven != nil) && !e.stale && !e.probing && !now.Before(e.nextProbe) {
			if _, ok := probeTargets(tbl, e.routed().Apps); ok || e.probeFail {
				select {
				case d.queue <- job{id: id, probe: true}:
					e.probing = true
				default:
				}
			}
		}
	}
}

func (d *Discovery) removeLocked(id string, e *entry, why string) {
	d.deleteLocked(id, e)
	d.opts.Logger.Info("discovery: host removed", "host_id", id, "why", why)
}

func (d *Discovery) deleteLocked(id string, e *entry) {
	d.m.move(e.state, "")
	delete(d.hosts, id)
	d.forgetProvenLocked(id)
	d.unprovenDoneLocked(e)
	d.unparkLocked(e)
	d.markLocked(id)
}

// kind is the last token of a hosts subject: announce, heartbeat, leave.
func (d *Discovery) kind(subject string) string {
	return subject[len(host.WildcardSubject(d.opts.Cluster))-1:]
}

// handleMsg handles one bus message, in its lane or, for a proven host's
// heartbeat, in dispatch: parse (unless dispatch did: hb), update, queue
// checks; never block.
func (d *Discovery) handleMsg(m *nats.Msg, hb *host.Heartbeat) {
	switch d.kind(m.Subject) {
	case host.KindAnnounce:
		a, err := host.ParseAnnounce(m.Data)
		if err != nil {
			d.drop("malformed", m.Subject, err)
			return
		}
		d.announce(a)
	case host.KindHeartbeat:
		if hb == nil {
			p, err := host.ParseHeartbeat(m.Data)
			if err != nil {
				d.drop("malformed", m.Subject, err)
				return
			}
			hb = &p
		}
		// Ask the host to announce when we do not know it or its claims
		// failed, on its inbox only. The reply subject is the sender's
		// choice and we publish with the gateway's full rights: anywhere
		// else ($KV.…, $JS.API.…) a host could make us write what it may
		// not.
		inbox := strings.HasPrefix(m.Reply, nats.InboxPrefix)
		if d.heartbeat(*hb, inbox, m.Reply) && inbox {
			d.opts.Conn.Publish(m.Reply, []byte("announce"))
		}
	case host.KindLeave:
		l, err := host.ParseLeave(m.Data)
		if err != nil {
			d.drop("malformed", m.Subject, err)
			return
		}
		d.leave(l)
	default:
		d.drop("unknown_subject", m.Subject, errors.New("not announce, heartbeat or leave"))
	}
}

// maxErrLog bounds the error text of a dropped message's line: room for
// host's longest, a field quoted at its bound with every byte escaped.
const maxErrLog = 1 << 10

func (d *Discovery) drop(reason, subject string, err error) {
	d.m.dropped.WithLabelValues(reason).Inc()
	// err may quote the message's fields, which a bus client writes as
	// long as a message may be: host's errors bound what they quote, and
	// this bounds the line whatever a later error quotes.
	d.drops.warn(d.opts.Now(), reason, "discovery: dropped bus message", "reason", reason, "subject", subject, "err", logcut.String(err.Error(), maxErrLog))
}

func (d *Discovery) announce(a host.Announce) {
	pub, _ := host.ParsePublicKey(a.PublicKey) // validated by ParseAnnounce
	slices.Sort(a.Apps)
	a.Apps = slices.Compact(a.Apps)
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[a.HostID]
	if e == nil {
		if !d.makeRoomLocked(now, a.HostID) {
			return
		}
		e = &entry{health: new(route.Health)}
		e.unproven = d.unproven.PushBack(e)
		d.hosts[a.HostID] = e
		// Debug: anyone can make one of these per made-up id. A host
		// that proves itself logs "host verified" with the same fields.
		d.opts.Logger.Debug("discovery: host announced", "host_id", a.HostID, "addr", a.Addr, "apps", a.Apps)
	}
	changed := !sameClaims(e.ann, a)
	if changed {
		if e.verified {
			prev := e.ann
			e.proven = &prev // keeps routing to these until a check decides
		}
		e.verified, e.lastErr, e.failed = false, "", false
		e.gen++ // a check in flight is of other claims
		if e.stop != nil {
			e.stop()
		}
		d.markLocked(a.HostID)
	}
	e.ann, e.pub = a, pub
	e.lastHB = now
	// A sign of life, as a heartbeat is; but not of health: a host that
	// failed its health probe stays out until one passes (soon: see
	// nextProbe), or anyone could put it back by copying its announce.
	e.stale = false
	if e.draining {
		// Anyone may copy a leaving host's announce: it stays drained
		// until a challenge passes (see undrain).
		e.undrain = true
	}
	e.nextProbe = time.Time{}
	// Every announce is checked (DESIGN §4), but a check of these very
	// claims already under way answers for this one too; and one begun
	// less than a heartbeat interval ago makes this one wait for the
	// interval to end: anyone may copy a host's announce at bus speed,
	// and each check is a challenge at the host.
	//
	// Claims changed back to those that last passed (the host's own, as
	// far as we know) are held to the same bound, by when they were last
	// checked: else anyone flipping the id between them and another
	// address makes every announce "changed", and each flip a challenge.
	switch due := e.checkedAt.Add(d.opts.HeartbeatInterval); {
	case changed && sameClaims(a, e.passed) && now.Before(e.passedCheckedAt.Add(d.opts.HeartbeatInterval)):
		if !e.nextVerify.IsZero() { // zero: Reverify asked for a check now
			e.nextVerify = e.passedCheckedAt.Add(d.opts.HeartbeatInterval)
		}
	case changed:
		d.enqueueLocked(a.HostID, e)
	case e.checkingLocked():
	case now.Before(due):
		if e.nextVerify.After(due) {
			e.nextVerify = due
		}
	default:
		d.enqueueLocked(a.HostID, e)
	}
	d.updateLocked(a.HostID, e)
}

// checkingLocked reports whether a check of e's current claims is in
// flight.
func (e *entry) checkingLocked() bool { return e.verifying && e.checkGen == e.gen }

func sameClaims(old, a host.Announce) bool {
	return old.Addr == a.Addr && old.Scheme == a.Scheme && old.PublicKey == a.PublicKey && slices.Equal(old.Apps, a.Apps)
}

// heartbeat reports whether the host should be asked to announce: it is
// not known, or its last check failed or it is draining, and it was not
// asked within a heartbeat interval (canAsk: it can be, and will be, asked
// now). A known host is asked at most that often, however many heartbeats
// anyone sends for it.
//
// A host stops heartbeating when it leaves, and its last heartbeats reach
// us before its leave, on the same connection: a heartbeat of a draining
// host is another run of it (or someone pretending), whose announce may
// have come before the old run's leave, and which must announce again to
// be checked and end the drain (see undrain).
func (d *Discovery) heartbeat(hb host.Heartbeat, canAsk bool, reply string) bool {
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[hb.HostID]
	if e == nil {
		return true
	}
	if e.stale {
		e.silence = now.Sub(e.lastHB)
	}
	e.lastHB = now
	e.inflight = hb.Inflight
	e.stale = false
	d.updateLocked(hb.HostID, e)
	e.silence = 0
	if !(e.failed || e.draining) || !canAsk || (now.Sub(e.asked) < d.opts.HeartbeatInterval && reply == e.askedReply) {
		return false
	}
	e.asked, e.askedReply = now, reply
	return true
}

// leaveWindow is how far a leave's ts may be from the gateway's clock,
// either way: the hosts' clocks are trusted no further.
const leaveWindow = 60 * time.Second

// Reasons a leave is refused, as gatehouse_host_messages_dropped_total
// labels.
const (
	dropUnsignedLeave = "unsigned_leave"
	dropBadSignature  = "bad_signature"
	dropStaleLeave    = "stale_leave"
	// dropUnverifiedLeave: a leave of a host that proved no key here
	// (never verified, or unknown). Nothing is routed to it, so there is
	// nothing to drain, and no key to check a forgery by: counted apart
	// from bad_signature, which an operator may alert on, since a host
	// that failed its challenge sends one at every shutdown.
	dropUnverifiedLeave = "unverified_leave"
)

// leave drains a host on a leave signed by the key it last proved. Anyone
// may publish on the leave subject (the embedded bus gives it to clients
// without credentials), and a drained host stays out until it announces
// and passes a challenge again: an unchecked leave would take any host
// out of rotation at will, as often as anyone liked.
func (d *Discovery) leave(l host.Leave) {
	reason, err := d.applyLeave(l)
	if reason == "" {
		return
	}
	d.m.dropped.WithLabelValues(reason).Inc()
	if reason == dropUnverifiedLeave {
		d.drops.info(d.opts.Now(), reason, "discovery: refused leave", "host_id", l.HostID, "reason", reason, "err", err)
		return
	}
	d.drops.warn(d.opts.Now(), reason, "discovery: refused leave", "host_id", l.HostID, "reason", reason, "err", err)
}

// applyLeave drains l's host if l proves itself, else returns why not
// (a dropped-messages reason; "" when it drained the host).
//
// The signature is checked without d.mu: anyone may send leaves at bus
// speed, each costs an Ed25519 verification, and the workers, the flusher,
// the sweeper and the API all wait for d.mu. What the check relied on (the
// entry and its key) is looked at again once d.mu is held back.
func (d *Discovery) applyLeave(l host.Leave) (string, error) {
	if l.Sig == "" {
		return dropUnsignedLeave, errors.New("leave has no sig")
	}
	sig, _ := base64.StdEncoding.DecodeString(l.Sig) // validated by ParseLeave
	msg := host.LeaveMessage(l.HostID, l.TS)
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[l.HostID]
	for tries := 1; ; tries++ {
		pub := e.leaveKey()
		if pub == nil {
			// Unknown, or never verified: nothing routed, and no key the
			// host proved can verify the sig. Refused and counted, apart
			// from a sig that fails a proven key.
			return dropUnverifiedLeave, errors.New("the host never proved a key to verify the sig by")
		}
		d.mu.Unlock()
		ok := d.verifySig(pub, msg, sig)
		d.mu.Lock()
		e2 := d.hosts[l.HostID]
		if e2 == e && pub.Equal(e.leaveKey()) {
			if !ok {
				return dropBadSignature, errors.New("sig does not verify under the host's proven key")
			}
			break
		}
		// Replaced, or it proved another key, meanwhile: check against
		// what it holds now. Keys change only when a check passes, so
		// this ends; the bound is for the worst case anyway.
		if tries == 3 {
			return dropBadSignature, errors.New("the host's proven key kept changing while the sig was checked")
		}
		e = e2
	}
	now := d.opts.Now()
	w := int64(leaveWindow / time.Second)
	if skew := now.Unix() - l.TS; skew > w || skew < -w {
		return dropStaleLeave, fmt.Errorf("ts %d is %ds off the gateway's clock (at most %s either way)", l.TS, skew, leaveWindow)
	}
	pub := e.leaveKey()
	ls := d.left[l.HostID]
	i := slices.IndexFunc(ls, func(b leftBy) bool { return pub.Equal(b.key) })
	if i >= 0 && l.TS <= ls[i].ts {
		return dropStaleLeave, fmt.Errorf("ts %d is not newer than the host's last leave signed by this key (ts %d)", l.TS, ls[i].ts)
	}
	if floor := e.leaveFloor(); l.TS < floor {
		return dropStaleLeave, fmt.Errorf("ts %d is older than the host's current run (from ts %d)", l.TS, floor)
	}
	if i >= 0 {
		ls[i].ts = l.TS
	} else {
		d.left[l.HostID] = append(ls, leftBy{key: pub, ts: l.TS})
	}
	if p := e.proven; p != nil {
		// Claims announced since the host last proved itself were never
		// shown to be its own, and it is going away: drop them.
		e.ann, e.verified, e.proven = *p, true, nil
		e.pub, _ = host.ParsePublicKey(p.PublicKey) // it verified, so it parses
		d.markLocked(l.HostID)
	}
	e.draining, e.undrain = true, false
	// A check in flight may have been answered before the host began to
	// leave; its pass must not end the drain once something announces.
	e.gen++
	d.updateLocked(l.HostID, e)
	d.opts.Logger.Info("discovery: host leaving", "host_id", l.HostID)
	return "", nil
}

// leftBy is the ts of the last leave accepted for a host under one key.
// A host id holds more than one only when its key changed within the
// clock window; each costs an accepted leave, which only the enrolled
// key can sign.
type leftBy struct {
	key ed25519.PublicKey
	ts  int64
}

// leaveKey is the key a leave for e must be signed by: the key of the
// claims that last passed a check (the ones it is routed by, unless its
// latest check failed); nil if e is nil or never verified. Called with
// d.mu held.
func (e *entry) leaveKey() ed25519.PublicKey {
	if e == nil {
		return nil
	}
	return e.provenKey
}

// leaveFloor is the oldest ts a leave of the host's current run may carry.
//
// A leave is signed, but its ts is the host's clock and an announce is not
// signed at all, so the rule must hold whatever announces anyone copies:
//
//   - Replays: a leave is accepted only if its ts is newer than the last
//     leave accepted for the host under the same key (d.left). A captured
//     leave, replayed within the clock window after the host came back,
//     is refused whatever ts the announces carry: under its own key as
//     not newer, under another as not verifying.
//   - The floor: the run the host is routed by began, on the gateway's
//     clock, when its claims passed their check (e.since); any leave of it
//     is signed later. The host's clock may be up to leaveWindow behind
//     the gateway's, so the floor is its announce's ts (the host's own
//     clock, and exact for an honest host) held within
//     [since-leaveWindow, since]. Anyone may republish that announce with
//     any ts: a huge one raises the floor to since, which refuses only a
//     leave signed within the host's clock lag of its check; a tiny one
//     lowers it to where the clock window already refuses.
//
// What neither rule refuses is a leave of an earlier run this gateway
// never accepted (it was down, or the leave never reached it), replayed
// within a minute of being signed against a host that came back within
// that minute and whose announce someone copied with an old ts. Closing
// that would take a signed announce.
func (e *entry) leaveFloor() int64 {
	since := e.since.Unix()
	return min(max(e.routed().TS, since-int64(leaveWindow/time.Second)), since)
}
