package deadline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder counts f's calls and when the latest came.
type recorder struct {
	mu    sync.Mutex
	calls int
	at    time.Time
}

func (r *recorder) f() {
	r.mu.Lock()
	r.calls++
	r.at = time.Now()
	r.mu.Unlock()
}

func (r *recorder) get() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.at
}

// TestTimer runs each script of Starts, Ends and waits on a fresh Timer
// and checks how often f ran, that it never ran before its bound was out
// (measured from the last Start), and what End said.
//
// Nothing is asserted of how late f runs, which a busy machine decides:
// a bound that must run out is waited for (fired), for up to
// firedWithin. What a script needs to have happened in time (an End, a
// second Start, a Stop before the bound ran out) is checked against the
// test's own clock (by, and each End that reports a bound run out): a
// step that came too late, the machine being busy, is no failure of the
// Timer's but leaves the script unexercised, and the script is run again
// with a longer unit.
func TestTimer(t *testing.T) {
	// A step's durations are in units: 5 ms on a first attempt, doubled
	// on each of the next.
	type step struct {
		start int  // Start(start units) when > 0
		end   bool // End(), want endFired
		stop  bool
		// fired > 0 waits until f has run that many times in all.
		fired int
		wait  int
		// by > 0: the step must be over within by units of the Start
		// before it, or the script was not run as meant.
		by int
		// endFired is what End must report.
		endFired bool
	}
	tests := []struct {
		name  string
		steps []step
		calls int
		// after is the least time, in units, from the last Start to the
		// last call.
		after int
	}{
		{"runs out", []step{{start: 60}, {fired: 1}, {end: true, endFired: true, wait: 40}}, 1, 60},
		{"ended in time", []step{{start: 100, wait: 20}, {end: true}, {wait: 200}}, 0, 0},
		// The first bound's timer fires 40 units into the second bound and
		// must wait out its remaining 60.
		{"pending timer waits out the rest", []step{
			{start: 100, wait: 10}, {end: true}, {wait: 50},
			{start: 100, by: 100}, {fired: 1}, {end: true, endFired: true, wait: 40}}, 1, 100},
		// A shorter bound after a longer one is not held to the longer
		// one's timer: a minute or more, where firedWithin fails first.
		{"shorter bound after longer", []step{
			{start: 12000, wait: 10}, {end: true},
			{start: 50}, {fired: 1}, {end: true, endFired: true, wait: 40}}, 1, 50},
		{"once per bound", []step{
			{start: 30}, {fired: 1}, {end: true, endFired: true, wait: 30},
			{start: 30}, {fired: 2}, {end: true, endFired: true, wait: 40}}, 2, 30},
		// The first bound's timer fires inside the second and waits out
		// the rest.
		{"restart without end", []step{{start: 100, wait: 20}, {start: 100, by: 100}, {fired: 1, wait: 100}}, 1, 100},
		{"stop", []step{{start: 50, wait: 10}, {stop: true, by: 50}, {start: 20, wait: 200}, {end: true}}, 0, 0},
	}
	const firedWithin = 10 * time.Second
	const attempts = 3
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// run runs the script once, with unit u, and says why it was not
			// run as meant, if it was not.
			run := func(u time.Duration) (late string) {
				var r recorder
				tm := New(r.f)
				defer tm.Stop()
				var last time.Time // just before the last Start
				var bound time.Duration
				stopped := false
				for i, s := range tc.steps {
					prev := last
					switch {
					case s.start > 0:
						last, bound = time.Now(), time.Duration(s.start)*u
						tm.Start(bound)
					case s.end:
						got := tm.End()
						// Once stopped in time (by), a Timer has no bound
						// to run out, however late End comes.
						if got && !s.endFired && !stopped {
							if since := time.Since(last); since < bound {
								t.Fatalf("step %d: End() = true %v after a Start of %v", i, since, bound)
							}
							return fmt.Sprintf("step %d: End came after the bound of %v", i, bound)
						}
						if got != s.endFired {
							t.Fatalf("step %d: End() = %v, want %v", i, got, s.endFired)
						}
					case s.stop:
						tm.Stop()
						stopped = true
					case s.fired > 0:
						for wait := time.Now().Add(firedWithin); ; time.Sleep(u / 5) {
							if calls, _ := r.get(); calls >= s.fired {
								break
							}
							if time.Now().After(wait) {
								calls, _ := r.get()
								t.Fatalf("step %d: f ran %d times in %v, want %d", i, calls, firedWithin, s.fired)
							}
						}
					}
					if since := time.Since(prev); s.by > 0 && since >= time.Duration(s.by)*u {
						return fmt.Sprintf("step %d was over %v after the Start before it, not within %d units", i, since, s.by)
					}
					time.Sleep(time.Duration(s.wait) * u)
				}
				calls, at := r.get()
				if calls != tc.calls {
					t.Fatalf("f ran %d times, want %d", calls, tc.calls)
				}
				if after := time.Duration(tc.after) * u; calls > 0 && at.Sub(last) < after {
					t.Fatalf("f ran %v after the last Start, want at least %v", at.Sub(last), after)
				}
				return ""
			}
			u := 5 * time.Millisecond
			for i := range attempts {
				late := run(u)
				if late == "" {
					return
				}
				if i == attempts-1 {
					t.Fatalf("the machine was too busy to run the script as meant, with a unit of up to %v: %s", u, late)
				}
				t.Logf("unit %v: %s; again with a longer unit", u, late)
				u *= 2
			}
		})
	}
}

// TestTimerRaces begins and ends bounds about as long as the waits between
// them, so that the timer fires while Start and End run: f must run
// exactly once for each bound End says ran out, and never for one it
// ended first.
func TestTimerRaces(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	tm := New(func() { calls.Add(1) })
	defer tm.Stop()
	ranOut := int64(0)
	for i := range 2000 {
		tm.Start(time.Duration(50+i%7*20) * time.Microsecond)
		time.Sleep(time.Duration(i%5*30) * time.Microsecond)
		if tm.End() {
			ranOut++
		}
	}
	// An f that End saw begin may still be on its way: wait for them all,
	// then a little more for any f that should not have run at all.
	for wait := time.Now().Add(5 * time.Second); calls.Load() < ranOut && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := calls.Load(); got != ranOut {
		t.Fatalf("f ran %d times; End reported %d bounds run out", got, ranOut)
	}
	if ranOut == 0 || ranOut == 2000 {
		t.Logf("every bound ended the same way (%d ran out): the races were not exercised", ranOut)
	}
}

// BenchmarkStartEnd is a busy connection's cost per request: a bound
// begun and ended well before it runs out, with the timer pending from an
// earlier one.
func BenchmarkStartEnd(b *testing.B) {
	tm := New(func() {})
	defer tm.Stop()
	b.ReportAllocs()
	for b.Loop() {
		tm.Start(time.Second)
		if tm.End() {
			b.Fatal("a bound ended in time reported it ran out")
		}
	}
}
