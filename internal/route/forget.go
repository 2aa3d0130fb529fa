package route

import (
	"context"
	"time"
)

// AppState is state kept per app id outside the table, which the request
// path creates on an app's first request and which would otherwise stay
// after the app is deleted: metric series, round-robin counters.
type AppState interface {
	// HeldApps calls f with each app id it keeps state for, until f
	// returns false.
	HeldApps(f func(id string) bool)
	// ForgetApp drops what it keeps for id. A request that uses id
	// afterwards may create the state again: [Forget] sees it held and
	// forgets it again.
	ForgetApp(id string)
}

// Forget drops the per-app state of apps gone from a table: see [Forget.Sweep].
// It is not safe for concurrent use; Run owns it.
type Forget struct {
	live   *Live
	grace  time.Duration
	states []AppState
	gone   map[string]time.Time // held app ids absent from the table, since when
}

// Default timing of [Forget.Run].
const (
	// ForgetGrace is how long an app is gone before its state is
	// forgotten: requests routed to it before it left still finish, and
	// an app deleted and put back (a store resync, a redeploy) keeps its
	// counters.
	ForgetGrace = time.Minute
	// ForgetEvery is how often Run sweeps.
	ForgetEvery = 15 * time.Second
)

// NewForget returns a Forget for the apps of live's tables and the state
// in states. grace 0 means ForgetGrace.
func NewForget(live *Live, grace time.Duration, states ...AppState) *Forget {
	if grace <= 0 {
		grace = ForgetGrace
	}
	return &Forget{live: live, grace: grace, states: states, gone: map[string]time.Time{}}
}

// Sweep forgets, in every state, each app id held there that has been
// absent from the current table since a sweep at least grace before now,
// and was absent at every sweep in between: one that is back is kept.
// It asks the states what they hold, rather than watching deletions go
// by, so an app created and deleted between two sweeps, or state a
// request made again after its app was forgotten, is forgotten too. It
// returns how many apps it forgot.
//
// The work is a pass over the held ids and a table lookup each, off the
// request path: requests keep their state without a lock or a check.
func (f *Forget) Sweep(now time.Time) int {
	t := f.live.Load()
	held := make(map[string]bool, len(f.gone))
	for _, s := range f.states {
		s.HeldApps(func(id string) bool {
			if t.App(id) == nil {
				held[id] = true
			}
			return true
		})
	}
	n := 0
	for id, since := range f.gone {
		if !held[id] {
			delete(f.gone, id) // back in the table, or no longer held
			continue
		}
		if now.Sub(since) >= f.grace {
			for _, s := range f.states {
				s.ForgetApp(id)
			}
			delete(f.gone, id)
			delete(held, id) // a state made again is timed from the next sweep
			n++
		}
	}
	for id := range held {
		if _, ok := f.gone[id]; !ok {
			f.gone[id] = now
		}
	}
	return n
}

// Run sweeps every every (0: ForgetEvery) until ctx ends.
func (f *Forget) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		every = ForgetEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			f.Sweep(now)
		}
	}
}
