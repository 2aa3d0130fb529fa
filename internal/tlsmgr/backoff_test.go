package tlsmgr

import (
	"testing"
	"time"
)

// TestFailuresWindow: each failure opens a window twice the last, up to
// backoffMax; clear starts afresh; a record whose window ended more than
// backoffMax ago is forgotten at the next failure of any name.
func TestFailuresWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var f failures
	now := t0
	for _, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour} {
		r := f.fail("a.test", now)
		if r.wait != want || !r.until.Equal(now.Add(want)) {
			t.Fatalf("window %v until %v, want %v from %v", r.wait, r.until, want, now)
		}
		for _, step := range []struct {
			at      time.Time
			blocked bool
		}{{now, true}, {r.until.Add(-time.Nanosecond), true}, {r.until, false}} {
			if _, b := f.blocked("a.test", step.at); b != step.blocked {
				t.Fatalf("blocked at %v = %v, want %v (until %v)", step.at, b, step.blocked, r.until)
			}
		}
		now = r.until
	}
	if _, b := f.blocked("b.test", now); b {
		t.Fatal("a name that never failed is blocked")
	}
	f.clear("a.test")
	if r := f.fail("a.test", now); r.wait != time.Minute {
		t.Fatalf("after clear: window %v, want %v", r.wait, time.Minute)
	}
	f.fail("b.test", now.Add(time.Minute+backoffMax+time.Second))
	if _, ok := f.m["a.test"]; ok {
		t.Fatal("a record whose window ended over backoffMax ago was kept")
	}
}
