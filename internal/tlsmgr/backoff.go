package tlsmgr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Why on-demand orders back off: certmagic retries a failed order (after
// 1 minute, then 2) for up to 180 s, and when it gives up, the next
// handshake for the name orders again. A verified domain whose validation
// cannot succeed (its DNS names another server, an AAAA record the CA
// prefers) would so cost orders and failed validations for as long as
// clients come, and a real CA counts those per account: a few broken
// domains could stall every other name's issuance. So a failed order is
// ended at once (its handshakes get the bootstrap certificate), and the
// name is refused, before any storage or ACME traffic, until its window
// ends.
const (
	backoffFirst = time.Minute // window after a first failure; doubles per failure
	backoffMax   = time.Hour
)

// failures remembers the on-demand names whose last order failed. Safe
// for concurrent use; its methods take now from the caller.
type failures struct {
	mu sync.Mutex
	m  map[string]failure // lower-case name
}

type failure struct {
	until time.Time     // no order for the name before this
	wait  time.Duration // the window that ends at until
}

// blocked reports whether name's window is still open at now, and until
// when.
func (f *failures) blocked(name string, now time.Time) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.m[name]
	return r.until, ok && now.Before(r.until)
}

// fail records a failed order for name and returns the window it opens:
// backoffFirst, or twice the last one up to backoffMax. A record whose
// window ended more than backoffMax ago is forgotten here, so the map
// holds only names that failed lately.
func (f *failures) fail(name string, now time.Time) failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, r := range f.m {
		if now.Sub(r.until) > backoffMax {
			delete(f.m, n)
		}
	}
	r := failure{wait: backoffFirst}
	if last, ok := f.m[name]; ok {
		r.wait = min(2*last.wait, backoffMax)
	}
	r.until = now.Add(r.wait)
	if f.m == nil {
		f.m = map[string]failure{}
	}
	f.m[name] = r
	return r
}

// clear forgets name: after a certificate arrived, or when the decision
// refused the name (a mapping deleted or no longer verified starts
// afresh when it comes back).
func (f *failures) clear(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, name)
}

// handshakeObtain marks the context of an on-demand order, under which
// certmagic may order; its value ends that context, so that certmagic's
// retry loop returns as soon as the order failed (onEvent). The value is
// a context.CancelFunc for orderOnDemand's context, or a handshakeEnd for
// GetCertificate's.
type handshakeObtain struct{}

// handshakeEnd is handshakeObtain's value in the context GetCertificate
// hands certmagic for a custom domain's handshake. The decision refuses
// an allowed name that is not cached with errOrderInBackground there, and
// GetCertificate waits for orderOnDemand instead. certmagic still orders
// in that context in one case, without asking the decision: a cached
// certificate due for renewal whose stored items are gone; a failure
// there backs off as any on-demand order's.
type handshakeEnd context.CancelFunc

// errOrderInBackground is the decision's answer to a handshake for an
// allowed name that is not cached: not a refusal, but "not in this
// context".
var errOrderInBackground = errors.New("tlsmgr: on-demand certificate is loaded or ordered in the background")

// errLoadOnly is the decision's answer to a handshake for a name kept
// without orders (ErrNoNewOrder) that is not cached: GetCertificate loads
// it from storage, or serves the bootstrap certificate. It wraps
// errOrderInBackground, which the paths that take that as "no answer in
// this context" (orderOnDemand's retries, noteUnloaded) see alike.
var errLoadOnly = fmt.Errorf("%w: stored certificate only, no order", errOrderInBackground)

// handshakeObtainBudget bounds how long a handshake waits for its name's
// on-demand order: under the listeners' 10 s handshake bound
// (read_header_timeout), so that the handshake has time left to get the
// bootstrap certificate when the order is slower; unbounded, the wait
// would not end (crypto/tls gives Handshake a background context). The
// order goes on without it (onDemandOrderBudget).
const handshakeObtainBudget = 8 * time.Second

// onDemandOrderBudget bounds an on-demand order, which runs under Run's
// context, not the handshake's: a CA that validates from several vantage
// points, or retries a validation, takes longer than a handshake may
// wait, and an order cut at the handshake's budget failed, opened the
// backoff window, and was cut again at the next attempt, so such a
// domain never got a certificate. 3 minutes is what certmagic itself
// gives an on-demand order (obtainOnDemandCertificate), and bounds a CA
// that hangs.
const onDemandOrderBudget = 3 * time.Minute

// maxOnDemandOrders bounds the on-demand orders in flight: each holds a
// goroutine, ACME traffic and the CA's rate limits. Only names the
// decision allows get one, but a platform may map many. A name beyond it
// gets the bootstrap certificate, and its next handshake tries again;
// nothing queues. A certificate in storage is read by the handshake
// itself, outside this bound (loadOrOrder).
const maxOnDemandOrders = 16

// withHandshakeObtain returns ctx, bounded by budget, carrying its own
// cancel under handshakeObtain. The caller calls the returned cancel when
// done.
func withHandshakeObtain(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	return context.WithValue(ctx, handshakeObtain{}, cancel), cancel
}

// withHandshakeWait is withHandshakeObtain for a handshake: its value is
// a handshakeEnd.
func withHandshakeWait(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	return context.WithValue(ctx, handshakeObtain{}, handshakeEnd(cancel)), cancel
}

// orders are the on-demand orders running in the background, at most
// one per name and maxOnDemandOrders in all, under Run's context: open
// while Run runs, closed (orders ended and waited for) when it returns.
// Safe for concurrent use.
type orders struct {
	mu     sync.Mutex
	ctx    context.Context // nil before open and after close
	cancel context.CancelFunc
	m      map[string]chan struct{} // lower-case name: closed when its order ends
	wg     sync.WaitGroup
	max    int // orders in flight at most; 0: maxOnDemandOrders (tests lower it)
}

// open starts taking orders under ctx.
func (o *orders) open(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ctx, o.cancel = context.WithCancel(ctx)
	o.m = map[string]chan struct{}{}
}

// close ends the orders running, waits for them, and takes no more.
func (o *orders) close() {
	o.mu.Lock()
	if o.cancel != nil {
		o.cancel()
	}
	o.ctx, o.cancel = nil, nil
	o.mu.Unlock()
	o.wg.Wait()
}

// running returns the channel closed when name's order ends; nil when
// none runs.
func (o *orders) running(name string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[name]
}

// start runs order(ctx) for name in a goroutine, unless one runs for name
// already, and returns a channel closed when that order ends; nil (no
// order) when closed or maxOnDemandOrders run.
func (o *orders) start(name string, order func(ctx context.Context)) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ctx == nil {
		return nil
	}
	if done, ok := o.m[name]; ok {
		return done
	}
	limit := maxOnDemandOrders
	if o.max > 0 {
		limit = o.max
	}
	if len(o.m) >= limit {
		return nil
	}
	done := make(chan struct{})
	o.m[name] = done
	o.wg.Add(1)
	go func(ctx context.Context) {
		defer o.wg.Done()
		defer close(done)
		defer func() {
			o.mu.Lock()
			delete(o.m, name)
			o.mu.Unlock()
		}()
		order(ctx)
	}(o.ctx)
	return done
}

// maxUnloaded bounds the custom domains noted between two checks of
// checkStored: only names the decision allows are noted, but a platform
// may map many.
const maxUnloaded = 1000

// unloaded is the set of custom domains whose handshake the decision
// allowed and certmagic still answered with an error (checkUnloaded).
// Safe for concurrent use.
type unloaded struct {
	mu sync.Mutex
	m  map[string]bool // lower-case name
}

// add notes name, unless maxUnloaded names are noted already.
func (u *unloaded) add(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]bool{}
	}
	if len(u.m) < maxUnloaded {
		u.m[name] = true
	}
}

// take returns the names noted and forgets them.
func (u *unloaded) take() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	names := make([]string, 0, len(u.m))
	for n := range u.m {
		names = append(names, n)
	}
	u.m = nil
	return names
}

// heldMissWait is how long a custom domain kept without orders
// (ErrNoNewOrder) that had no certificate to serve (none stored, the
// stored one expired, or the store did not answer) is answered the
// bootstrap certificate without a look in the storage (loadHeld). Any
// client can send the name at the rate it likes, and nothing orders one
// meanwhile, so the storage is read once a window, not once a handshake;
// short, as another gateway's store write or a store back up is then seen
// within it.
const heldMissWait = time.Minute

// maxHeldMisses bounds the names heldMisses remembers: only names Allow
// keeps without orders get there, but a platform may map many. Past it, a
// name's handshakes read the storage as before.
const maxHeldMisses = 1000

// heldMisses remembers, for heldMissWait, the names loadHeld found no
// certificate to serve for. Safe for concurrent use; its methods take now
// from the caller.
type heldMisses struct {
	mu sync.Mutex
	m  map[string]time.Time // lower-case name: no look in the storage before this
}

// recent reports whether name missed less than heldMissWait before now.
func (h *heldMisses) recent(name string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.m[name]
	return ok && now.Before(until)
}

// miss notes that name had no certificate to serve at now. Windows that
// ended are forgotten here, so the map holds only recent misses.
func (h *heldMisses) miss(name string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]time.Time{}
	}
	if len(h.m) >= maxHeldMisses {
		for n, until := range h.m {
			if !now.Before(until) {
				delete(h.m, n)
			}
		}
	}
	if _, ok := h.m[name]; ok || len(h.m) < maxHeldMisses {
		h.m[name] = now.Add(heldMissWait)
	}
}
