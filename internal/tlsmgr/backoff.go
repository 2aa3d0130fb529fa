package tlsmgr

import (
	"context"
	"sync"
	"time"
)

// Why on-demand orders back off: certmagic obtains a custom domain's
// certificate inside the handshake that asked for it and retries a failed
// order there (after 1 minute, then 2) for up to 180 s, holding that
// handshake, and every other one for the name, meanwhile; when it gives
// up, the next handshake orders again. A verified domain whose validation
// cannot succeed (its DNS names another server, an AAAA record the CA
// prefers) would so cost orders and failed validations for as long as
// clients come, and a real CA counts those per account: a few broken
// domains could stall every other name's issuance. So a failed order
// ends the handshake that placed it (the client gets the bootstrap
// certificate), and the name is refused, before any storage or ACME
// traffic, until its window ends.
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

// handshakeObtain marks the context GetCertificate hands certmagic; its
// value ends that context, so that certmagic's retry loop returns as soon
// as the order failed instead of holding the handshake.
type handshakeObtain struct{}

// handshakeObtainBudget bounds an order a handshake waits for: under the
// listeners' 10 s handshake bound (read_header_timeout), so that a CA
// that hangs fails the order, opens the name's backoff window and leaves
// the handshake time to get the bootstrap certificate. Unbounded, the
// handshake's context never ended (crypto/tls gives Handshake a
// background one), and certmagic's retries held the connection ~90 s.
const handshakeObtainBudget = 8 * time.Second

// withHandshakeObtain returns ctx, bounded by handshakeObtainBudget,
// carrying its own cancel under handshakeObtain. The caller calls the
// returned cancel when done.
func withHandshakeObtain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, handshakeObtainBudget)
	return context.WithValue(ctx, handshakeObtain{}, cancel), cancel
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
