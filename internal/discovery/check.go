package discovery

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

// Enrolment failures, checked before any challenge is sent.
var (
	errUnenrolled    = errors.New("discovery: no enrolment for host id")
	errKeyMismatch   = errors.New("discovery: announced key is not the enrolled key")
	errAppNotAllowed = errors.New("discovery: enrolment does not allow app")
	errKeysDown      = errors.New("discovery: enrolment lookup failed while the bus or the store is down")
)

func reason(err error) string {
	switch {
	case errors.Is(err, errUnenrolled):
		return "unenrolled"
	case errors.Is(err, errKeyMismatch):
		return "key_mismatch"
	case errors.Is(err, errAppNotAllowed):
		return "app_not_allowed"
	}
	return verify.Reason(err)
}

// notEnrolled reports whether err says the enrolment refuses the claims,
// which no retry can change until an operator enrols them.
//
// Anyone may announce on the bus, and heartbeat what they announced, so a
// host that never verified is forgotten on such a failure rather than kept
// until host_ttl: entries for made-up ids must not pile up. Forgetting
// costs a real host enrolled later one heartbeat interval: its next
// heartbeat is answered "announce" and it announces again. A host that
// once verified keeps its entry, and its LastError in the API after a
// revocation, as before: there is at most one such entry per enrolled id,
// so no bus client can multiply them.
func notEnrolled(err error) bool {
	return errors.Is(err, errUnenrolled) || errors.Is(err, errKeyMismatch) || errors.Is(err, errAppNotAllowed)
}

// work runs queued verifications and probes until ctx ends.
func (d *Discovery) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-d.queue:
			switch {
			case j.probe:
				d.probe(ctx, j.id)
			case j.prove:
				d.verifyHost(ctx, d.takeProven(j.id))
			default:
				d.verifyHost(ctx, d.take(j.id))
			}
		case <-d.pendingc:
			d.verifyHost(ctx, d.takePending())
		}
	}
}

// started is a verification a worker has taken: the entry, and the
// claims and gen it is checking.
type started struct {
	id  string
	e   *entry
	ann host.Announce
	pub ed25519.PublicKey
	gen uint64
	// proof says the claims checked are the verified ones, which the
	// host is routed by (see entry.proof); stop cancels such a check.
	// proven says they are e.proven, not e.ann (see takeProven).
	proof, proven bool
	stop          func()
}

// startLocked marks e as being verified (so it is not evicted meanwhile)
// and counts the check at its address.
func (d *Discovery) startLocked(id string, e *entry) *started {
	e.queued, e.verifying, e.checkGen = false, true, e.gen
	e.checkedAt = d.opts.Now()
	if sameClaims(e.ann, e.passed) {
		e.passedCheckedAt = e.checkedAt
	}
	d.startedLocked(e.ann.Addr)
	s := &started{id: id, e: e, ann: e.ann, pub: e.pub, gen: e.gen, proof: e.verified}
	if s.proof {
		e.proof = s
	}
	return s
}

// take starts the verification of host id; nil if it is not tracked, if
// it is parked until a check at its address ends (see peraddr.go), or if
// a check of its verified claims already under way answers for this one.
func (d *Discovery) take(id string) *started {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[id]
	if e == nil || e.parked != nil {
		return nil
	}
	if e.verified && e.proof != nil {
		e.queued = false
		return nil
	}
	if due := e.passedCheckedAt.Add(d.opts.HeartbeatInterval); sameClaims(e.ann, e.passed) && !e.nextVerify.IsZero() && d.opts.Now().Before(due) {
		// Queued for other claims, since announced back to those that
		// last passed, which were checked less than an interval ago:
		// they wait for its end. (Reverify, which is not to wait,
		// clears nextVerify.)
		e.queued, e.nextVerify = false, due
		return nil
	}
	if d.fullLocked(e) {
		d.parkLocked(e)
		return nil
	}
	return d.startLocked(id, e)
}

// takeProven starts a check of the claims host id is routed by while
// other claims it announced are checked (e.proven): their proof must not
// wait for those, which anyone may keep announcing, to be settled. nil if
// there is none to start. It is not counted in e.verifying, which is for
// checks of e.ann, and not parked at a busy address (see peraddr.go): it
// is at most one per host, at the address the host proved.
func (d *Discovery) takeProven(id string) *started {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.hosts[id]
	if e == nil {
		return nil
	}
	e.proveQueued = false
	if e.proven == nil || e.verified || e.proof != nil {
		return nil
	}
	p := *e.proven
	pub, _ := host.ParsePublicKey(p.PublicKey) // it verified, so it parses
	d.startedLocked(p.Addr)
	if sameClaims(p, e.passed) {
		e.passedCheckedAt = d.opts.Now()
	}
	s := &started{id: id, e: e, ann: p, pub: pub, gen: e.gen, proof: true, proven: true}
	e.proof = s
	return s
}

// verifyHost runs s, if not nil, and applies its result.
func (d *Discovery) verifyHost(ctx context.Context, s *started) {
	if s == nil {
		return
	}
	id, e, ann, pub, gen := s.id, s.e, s.ann, s.pub, s.gen
	vctx, cancel := context.WithTimeout(ctx, d.opts.VerifyTimeout)
	d.mu.Lock()
	switch {
	case s.proof:
		s.stop = cancel // only a newer check of the same claims ends it
	case e.gen == gen:
		e.stop = cancel // a newer gen makes this check moot: free the worker
	default:
		cancel()
	}
	d.mu.Unlock()
	k, dial, err := d.check(vctx, ann, pub)
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.doneLocked(ann.Addr)
	if ctx.Err() != nil {
		return
	}
	now := d.opts.Now()
	if d.hosts[id] != e {
		// Removed meanwhile, and maybe announced afresh: a new entry's gen
		// starts over, so only its identity tells this check was of other
		// claims.
		return
	}
	if e.checkGen == gen && !s.proven {
		e.verifying = false // else a later check is still in flight
	}
	if s.proof {
		if e.proof != s {
			return // Reverify started a newer check of these claims
		}
		e.proof = nil
	}
	if e.gen != gen || s.proven {
		if s.proof {
			d.proofLocked(now, s, dial, err)
		}
		return // re-announced meanwhile: a newer verification is queued
	}
	switch {
	case errors.Is(err, errKeysDown):
		// Says nothing about the host; keep what we had and try again.
		e.nextVerify = now.Add(d.opts.HeartbeatInterval)
		return
	case err != nil:
		e.verified = false
		// Refused if, and only if, the enrolment this check read refuses
		// the claims the host itself last proved: the ones checked here
		// may be anyone's (another key, an app the host does not serve,
		// the newly enrolled key at an address nobody answers), and
		// neither close the host's connections nor reopen a refusal.
		d.refuseLocked(id, e, !e.verifiedAt.IsZero() && allows(k, e.passed, e.provenKey) != nil)
		// An enrolment refusal of claims nobody proved (a forged announce
		// with another key, or an app the host does not serve) says nothing
		// of the host's own claims, which it replaced: ask the host too.
		// So does another key enrolled under proven claims: the key was
		// rotated, and a run of the host with the new key (started before
		// the enrolment, and refused then) may be heartbeating.
		e.failed = !notEnrolled(err) || !sameClaims(ann, e.passed) || errors.Is(err, errKeyMismatch)
		e.lastErr = err.Error()
		e.nextVerify = now.Add(min(d.opts.Reverify, 6*d.opts.HeartbeatInterval))
		if e.draining && e.undrain {
			if !notEnrolled(err) {
				// A restarted host may fail its first check (its app not
				// up yet): it is back within a few heartbeats.
				e.nextVerify = now.Add(d.opts.HeartbeatInterval)
			} else {
				e.undrain = false // no retry mends an enrolment refusal
			}
		}
		d.m.failures.WithLabelValues(reason(err)).Inc()
		// A bus client can cause these at will (a made-up id, a forged
		// announce), so they are bounded like dropped messages.
		forget := e.verifiedAt.IsZero() && notEnrolled(err)
		d.fails.warn(now, reason(err), "discovery: host verification failed",
			"host_id", id, "addr", ann.Addr, "reason", reason(err), "err", err, "forgotten", forget)
		if forget {
			d.deleteLocked(id, e)
			return
		}
		if p := e.proven; p != nil {
			// New claims failed: keep the proven ones, and prove them again
			// now (the host may really have moved); unless the enrolment
			// this check read refuses them too (revoked, or another key
			// enrolled meanwhile): else every announce of other claims
			// would put them back until their own check.
			e.proven = nil
			e.ann, e.gen = *p, e.gen+1
			e.pub, _ = host.ParsePublicKey(p.PublicKey)
			d.markLocked(id)
			refused := allows(k, *p, e.pub)
			d.refuseLocked(id, e, refused != nil)
			if refused != nil {
				e.failed = errors.Is(refused, errKeyMismatch) // rotated: as above
				e.lastErr = "the enrolment no longer allows the proven claims: " + refused.Error()
				break
			}
			// Not sooner than a heartbeat interval after their last
			// check: a stream of failing claims, which anyone may
			// announce, must not make each failure a challenge.
			e.verified, e.failed, e.nextVerify = true, false, e.passedCheckedAt.Add(d.opts.HeartbeatInterval)
			e.lastErr = "rejected new claims (addr " + ann.Addr + "): " + err.Error()
		}
	default:
		back := e.proven != nil && sameClaims(*e.proven, ann)
		if e.proven != nil {
			e.proven = nil
			d.markLocked(id) // publish the new claims
		}
		d.unprovenDoneLocked(e)
		if !e.verified && !back {
			d.opts.Logger.Info("discovery: host verified", "host_id", id, "addr", ann.Addr, "dial", dial, "apps", ann.Apps)
			e.since = now
		}
		if e.draining && e.undrain {
			// Announced since it left, and answered a challenge since: a
			// new run of the host (one leaving answers none).
			e.draining, e.undrain = false, false
			e.since = now
			d.opts.Logger.Info("discovery: host back from draining", "host_id", id, "addr", ann.Addr)
		}
		e.verified, e.failed = true, false
		d.refuseLocked(id, e, false)
		if e.dial != dial {
			d.markLocked(id) // re-pinned: publish where it is dialed now
		}
		e.provenKey, e.passed, e.dial = pub, ann, dial
		d.provenLocked(id)
		e.verifiedAt = now
		e.lastErr = ""
		e.nextVerify = now.Add(d.opts.Reverify)
		e.health.OK() // the challenge just reached it
	}
	d.updateLocked(id, e)
}

// proofLocked applies the result of a check of the claims a host is
// routed by that other claims, announced meanwhile, overtook. Those other
// claims are checked on their own, but the host stays routed by the ones
// checked here until they pass: so this check's result still counts for
// them. Were it thrown away, a stream of announces of other claims
// (anyone may send them) would keep a host routed at an address that no
// longer answers its challenge, past every Reverify.
func (d *Discovery) proofLocked(now time.Time, s *started, dial string, err error) {
	id, e := s.id, s.e
	if e.draining || errors.Is(err, errKeysDown) || !(e.verified || e.proven != nil) || !sameClaims(*e.routed(), s.ann) {
		return // not routed, or routed by other claims now
	}
	if err == nil {
		if e.dial != dial {
			d.markLocked(id) // re-pinned: publish where it is dialed now
		}
		e.provenKey, e.passed, e.dial, e.verifiedAt = s.pub, s.ann, dial, now
		d.provenLocked(id)
		if e.proven == nil {
			e.nextVerify = now.Add(d.opts.Reverify)
		}
		e.health.OK()
		return
	}
	d.m.failures.WithLabelValues(reason(err)).Inc()
	d.fails.warn(now, reason(err), "discovery: host verification failed",
		"host_id", id, "addr", s.ann.Addr, "reason", reason(err), "err", err, "forgotten", false)
	e.lastErr = "proven claims failed their check (addr " + s.ann.Addr + "): " + err.Error()
	d.refuseLocked(id, e, notEnrolled(err))
	if e.proven != nil {
		e.proven = nil // the claims being checked are all it has now
	} else {
		e.verified, e.failed = false, !notEnrolled(err)
		e.nextVerify = now.Add(min(d.opts.Reverify, 6*d.opts.HeartbeatInterval))
	}
	d.markLocked(id)
	d.updateLocked(id, e)
}

// check verifies the enrolment, then the challenge at the announced addr,
// and returns the address (IP:port) that passed it: a host name in addr
// is resolved here, and only here (see verify.Pin). It also returns the
// enrolment it read (nil if there is none), which judges the claims the
// host proved before as well.
func (d *Discovery) check(ctx context.Context, a host.Announce, pub ed25519.PublicKey) (*route.HostKey, string, error) {
	k, err := d.opts.Keys.GetHostKey(ctx, a.HostID)
	if err != nil || k == nil {
		// The bus connected is not the store answering: JetStream may
		// be disabled or without quorum. A verified host must not go out
		// of the pool, nor a new one be forgotten, for that.
		if !d.opts.Conn.IsConnected() || (err != nil && d.opts.KeysUnavailable != nil && d.opts.KeysUnavailable(err)) {
			return nil, "", errKeysDown
		}
		return nil, "", fmt.Errorf("%w %q: %v", errUnenrolled, a.HostID, err)
	}
	if err := allows(k, a, pub); err != nil {
		return k, "", err
	}
	dial, err := verify.Pin(ctx, d.opts.HTTPClient, d.opts.Resolver, verify.Claim{HostID: a.HostID, Addr: a.Addr, Scheme: a.Scheme}, d.opts.GatewayID, pub)
	return k, dial, err
}

// allows reports why enrolment k (nil: none) refuses claims a made with
// key pub, or nil if it allows them.
func allows(k *route.HostKey, a host.Announce, pub ed25519.PublicKey) error {
	if k == nil {
		return fmt.Errorf("%w %q", errUnenrolled, a.HostID)
	}
	enrolled, err := host.ParsePublicKey(k.PublicKey)
	if err != nil || !enrolled.Equal(pub) {
		return fmt.Errorf("%w (host %q)", errKeyMismatch, a.HostID)
	}
	for _, app := range a.Apps {
		if !slices.Contains(k.Apps, app) {
			return fmt.Errorf("%w %q (host %q)", errAppNotAllowed, app, a.HostID)
		}
	}
	return nil
}

// defaultProbeInterval applies to an app health check without interval.
const defaultProbeInterval = 10 * time.Second

// probeTargets returns the health check paths of apps and the shortest
// interval among them; false if none has a check.
func probeTargets(t *route.Table, apps []string) ([]probeTarget, bool) {
	var out []probeTarget
	for _, id := range apps {
		if a := t.App(id); a != nil && a.Health != nil && a.Health.Path != "" {
			iv := time.Duration(a.Health.Interval)
			if iv <= 0 {
				iv = defaultProbeInterval
			}
			out = append(out, probeTarget{path: a.Health.Path, every: iv})
		}
	}
	return out, len(out) > 0
}

type probeTarget struct {
	path  string
	every time.Duration
}

// probe runs a verified host's active health checks: any failure makes it
// unhealthy until a later probe passes.
func (d *Discovery) probe(ctx context.Context, id string) {
	d.mu.Lock()
	e := d.hosts[id]
	if e == nil {
		d.mu.Unlock()
		return
	}
	// The claims requests go by: while other claims, which anyone may
	// announce, are checked, the proven ones.
	ann := *e.routed()
	dial := e.dialFor(ann)
	if dial == "" {
		// Claims announced since the host verified, not checked yet: a
		// probe of them says nothing of the host, and they have no
		// address to probe at (a name is never resolved to dial it).
		e.probing = false
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	targets, ok := probeTargets(d.opts.Builder.Live().Load(), ann.Apps)

	var err error
	every := defaultProbeInterval
	for _, t := range targets {
		every = min(every, t.every)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, min(d.opts.VerifyTimeout, t.every))
			err = d.get(pctx, ann, dial, t.path)
			cancel()
		}
	}
	if ctx.Err() != nil {
		return
	}
	now := d.opts.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts[id] != e {
		return // removed meanwhile; see verifyHost
	}
	e.probing = false
	if !sameClaims(*e.routed(), ann) || e.dialFor(ann) != dial {
		// Routed by other claims, or dialed elsewhere, now. Not the gen:
		// every announce of other claims bumps it, and a stream of them
		// would throw every probe of the routed claims away.
		return
	}
	if !ok {
		// The app's check was removed: nothing holds the host back.
		e.probeFail = false
		d.updateLocked(id, e)
		return
	}
	e.nextProbe = now.Add(every)
	if err != nil {
		if !e.probeFail {
			d.opts.Logger.Warn("discovery: host failed its health probe", "host_id", id, "err", err)
		}
		e.lastErr = err.Error()
	} else if e.probeFail {
		e.lastErr = ""
	}
	e.probeFail = err != nil
	d.updateLocked(id, e)
}

// get fetches path from the host at dial, the address its claims a
// passed their check at (never by resolving a's name again); 2xx and 3xx
// pass.
func (d *Discovery) get(ctx context.Context, a host.Announce, dial, path string) error {
	scheme := "http"
	if a.Scheme == host.SchemeHTTPS || a.Scheme == host.SchemeTLS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+a.Addr+path, nil)
	if err != nil {
		return fmt.Errorf("discovery: health probe: %v", err)
	}
	c := *d.opts.HTTPClient
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if dial != a.Addr {
		tr := verify.PinnedTransport(c.Transport, dial)
		if tr == nil {
			return fmt.Errorf("discovery: health probe: the client's transport (%T) cannot be held to %s", c.Transport, dial)
		}
		defer tr.CloseIdleConnections()
		c.Transport = tr
	}
	if a.Scheme == host.SchemeH2C {
		// Probe the way requests reach it: an h2c-only host refuses HTTP/1.1.
		if tr := verify.H2CTransport(c.Transport); tr != nil {
			defer tr.CloseIdleConnections()
			c.Transport = tr
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("discovery: health probe: %v", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("discovery: health probe %s: status %d", path, resp.StatusCode)
	}
	return nil
}
