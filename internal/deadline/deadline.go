// Package deadline owns a connection's per-request time bound kept by one
// timer that is not reset per request.
//
// Why: a bound set when a request starts and stopped when it ends (a read
// deadline, a time.AfterFunc) is two runtime timer operations per request,
// almost all for a bound that never runs out. A Timer leaves a timer
// pending from an earlier request to fire; when it does, it waits out what
// is left of the running request's bound, or finds none running and stays
// off. A busy connection's timer fires about once per bound, not twice per
// request.
package deadline

import (
	"sync"
	"time"
)

// Timer calls f when a bound begun with Start runs out before End. Start
// and End are called by the connection's goroutine, one bound at a time;
// f runs on a goroutine of its own, never for a bound that End ended
// first.
type Timer struct {
	f     func()
	clock Clock

	mu      sync.Mutex
	t       *time.Timer
	start   time.Time
	bound   time.Duration // the running bound; 0: none
	pending bool          // t is set
	due     time.Time     // when t fires, while pending
	fired   bool          // f was called for the running bound
	stopped bool
}

// New returns a Timer that calls f. No timer exists until the first Start.
func New(f func()) *Timer { return &Timer{f: f, clock: NewClock()} }

// Start begins a bound of d (> 0) from now, ending any running one.
func (t *Timer) Start(d time.Duration) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.start, t.bound, t.fired = now, d, false
	due := now.Add(d)
	if t.pending && !t.due.After(due) {
		return // it fires first, and waits out the rest
	}
	t.pending, t.due = true, due
	if t.t == nil {
		t.t = time.AfterFunc(d, t.fire)
	} else {
		t.t.Reset(d)
	}
}

// End ends the running bound and reports whether it ran out (f was or is
// being called for it).
func (t *Timer) End() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	fired := t.fired
	t.bound, t.fired = 0, false
	return fired
}

// Stop ends the running bound and the timer: f is not called again.
func (t *Timer) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped, t.bound = true, 0
	if t.t != nil {
		t.t.Stop()
	}
}

func (t *Timer) fire() {
	t.mu.Lock()
	t.pending = false
	if t.bound == 0 || t.fired || t.stopped {
		t.mu.Unlock()
		return
	}
	now := t.clock.Now()
	if left := t.bound - now.Sub(t.start); left > 0 {
		t.pending, t.due = true, now.Add(left)
		t.t.Reset(left)
		t.mu.Unlock()
		return
	}
	t.fired = true
	t.mu.Unlock()
	t.f()
}
