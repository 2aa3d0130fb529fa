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
	"sync/atomic"
	"time"
)

// Timer calls f when a bound begun with Start runs out before End. Start
// and End are called by the connection's goroutine, one bound at a time;
// f runs on a goroutine of its own, never for a bound that End ended
// first.
//
// Start and End take no lock: on a busy connection they are a clock read
// and a few atomic operations (two mutex round trips and a wall-clock read
// cost ~3 times as much, three timers a request). The lock is taken to arm
// the timer and when it fires.
type Timer struct {
	f    func()
	base time.Time // the origin of the nanosecond readings below (monotonic)

	// run is the running bound's start (nanoseconds since base, at least
	// 1), 0 when none runs, or ranOut once fire took it to call f.
	run   atomic.Int64
	bound atomic.Int64 // the running bound's length in nanoseconds
	// due is when the pending timer fires (nanoseconds since base), or 0
	// when none may be. A nonzero due is always a firing to come.
	due     atomic.Int64
	stopped atomic.Bool

	mu sync.Mutex // arms t; fire holds it
	t  *time.Timer
}

// ranOut is run's value once f is called for the running bound.
const ranOut = -1

// New returns a Timer that calls f. No timer exists until the first Start.
func New(f func()) *Timer { return &Timer{f: f, base: time.Now()} }

// now is the time since t.base in nanoseconds, at least 1 (0 means no
// bound), from the monotonic clock alone: cheaper than time.Now.
func (t *Timer) now() int64 { return int64(time.Since(t.base)) + 1 }

// Start begins a bound of d (> 0) from now, ending any running one.
func (t *Timer) Start(d time.Duration) {
	if t.stopped.Load() {
		return
	}
	now := t.now()
	// bound before run: fire reads them the other way round, so a run it
	// sees comes with its bound.
	t.bound.Store(int64(d))
	t.run.Store(now)
	if due := t.due.Load(); due != 0 && due <= now+int64(d) {
		return // the pending timer fires first, and waits out the rest
	}
	t.arm(now+int64(d), d)
}

// arm makes the timer fire at due (d from now) unless it fires sooner.
func (t *Timer) arm(due int64, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	if cur := t.due.Load(); cur != 0 && cur <= due {
		return
	}
	t.due.Store(due)
	if t.t == nil {
		t.t = time.AfterFunc(d, t.fire)
	} else {
		t.t.Reset(d)
	}
}

// End ends the running bound and reports whether it ran out (f was or is
// being called for it).
func (t *Timer) End() bool {
	return t.run.Swap(0) == ranOut
}

// Stop ends the running bound and the timer: f is not called again.
func (t *Timer) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped.Store(true)
	t.run.Store(0)
	t.due.Store(0)
	if t.t != nil {
		t.t.Stop()
	}
}

// fire runs when the timer does (and, rarely, once more after a Reset
// that raced it): it waits out what is left of the running bound, or
// calls f when it has run out.
func (t *Timer) fire() {
	t.mu.Lock()
	// Nothing is pending from here until this re-arms. due goes to 0
	// before run is read: a Start that stored its run after that read
	// finds due 0 and arms the timer itself (it waits for the lock).
	t.due.Store(0)
	if t.stopped.Load() {
		t.mu.Unlock()
		return
	}
	for {
		v := t.run.Load()
		if v == 0 || v == ranOut {
			t.mu.Unlock()
			return // no bound running: stay off until a Start
		}
		now := t.now()
		if left := v + t.bound.Load() - now; left > 0 {
			t.due.Store(now + left)
			t.t.Reset(time.Duration(left))
			t.mu.Unlock()
			return
		}
		if t.run.CompareAndSwap(v, ranOut) {
			t.mu.Unlock()
			t.f()
			return
		}
		// A Start or an End came in between: look again.
	}
}
