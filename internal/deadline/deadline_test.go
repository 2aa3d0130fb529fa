package deadline

import (
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
// and checks how often f ran, when, and what End said. "when" is measured
// from the last Start; the bounds are long enough for a busy machine to
// tell early from on time, and late is allowed generously.
func TestTimer(t *testing.T) {
	// u is the scripts' unit of time: 5 ms, so that a busy machine (CI runs
	// the packages side by side, under -race) still tells early from on
	// time. Each script takes 1-2 s.
	const u = 5 * time.Millisecond
	type step struct {
		start time.Duration // Start(start) when > 0
		end   bool          // End(), want endFired
		stop  bool
		wait  time.Duration
		// endFired is what End must report.
		endFired bool
	}
	tests := []struct {
		name  string
		steps []step
		calls int
		// after is the least time from the last Start to the last call.
		after time.Duration
	}{
		{"runs out", []step{{start: 60 * u, wait: 250 * u}, {end: true, endFired: true}}, 1, 60 * u},
		{"ended in time", []step{{start: 100 * u, wait: 20 * u}, {end: true}, {wait: 200 * u}}, 0, 0},
		// The first bound's timer fires 40 units into the second bound and
		// must wait out its remaining 60.
		{"pending timer waits out the rest", []step{
			{start: 100 * u, wait: 10 * u}, {end: true}, {wait: 50 * u},
			{start: 100 * u, wait: 300 * u}, {end: true, endFired: true}}, 1, 100 * u},
		// A shorter bound after a longer one is not held to the longer
		// one's timer.
		{"shorter bound after longer", []step{
			{start: 2 * time.Second, wait: 10 * u}, {end: true},
			{start: 50 * u, wait: 250 * u}, {end: true, endFired: true}}, 1, 50 * u},
		{"once per bound", []step{
			{start: 30 * u, wait: 150 * u}, {end: true, endFired: true},
			{start: 30 * u, wait: 150 * u}, {end: true, endFired: true}}, 2, 30 * u},
		// The first bound's timer fires inside the second and waits out
		// the rest; 400 ms pass between the two Starts and its coming due.
		{"restart without end", []step{{start: 100 * u, wait: 20 * u}, {start: 100 * u, wait: 300 * u}}, 1, 100 * u},
		{"stop", []step{{start: 50 * u, wait: 10 * u}, {stop: true}, {start: 20 * u, wait: 200 * u}, {end: true}}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r recorder
			tm := New(r.f)
			defer tm.Stop()
			var last time.Time
			for i, s := range tc.steps {
				switch {
				case s.start > 0:
					last = time.Now()
					tm.Start(s.start)
				case s.end:
					if got := tm.End(); got != s.endFired {
						t.Fatalf("step %d: End() = %v, want %v", i, got, s.endFired)
					}
				case s.stop:
					tm.Stop()
				}
				time.Sleep(s.wait)
			}
			calls, at := r.get()
			if calls != tc.calls {
				t.Fatalf("f ran %d times, want %d", calls, tc.calls)
			}
			if calls > 0 && at.Sub(last) < tc.after {
				t.Fatalf("f ran %v after the last Start, want at least %v", at.Sub(last), tc.after)
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
