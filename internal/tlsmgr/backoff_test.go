package tlsmgr

import (
	"context"
	"fmt"
	"sync/atomic"
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

// TestOrdersBounded: at most one background order per name (a second
// handshake for it gets the same order to wait on) and maxOnDemandOrders
// in all (beyond, no order and nothing queued: the name gets the
// bootstrap certificate); none before open or after close, and close ends
// the orders running (their context) and waits for them.
func TestOrdersBounded(t *testing.T) {
	var o orders
	var ran atomic.Int32
	block := func(ctx context.Context) { ran.Add(1); <-ctx.Done() }
	if o.start("a.test", block) != nil {
		t.Fatal("an order before open")
	}
	o.open(context.Background())
	first := make([]<-chan struct{}, maxOnDemandOrders)
	for i := range first {
		if first[i] = o.start(fmt.Sprintf("n%d.test", i), block); first[i] == nil {
			t.Fatalf("order %d refused, want %d in flight", i, maxOnDemandOrders)
		}
	}
	if again := o.start("n0.test", block); again != first[0] {
		t.Fatal("a second order for a name in flight, want the same one")
	}
	if o.start("one-too-many.test", block) != nil {
		t.Fatalf("order %d accepted, want at most %d", maxOnDemandOrders+1, maxOnDemandOrders)
	}
	o.close()
	for i, done := range first {
		select {
		case <-done:
		default:
			t.Fatalf("order %d still running after close", i)
		}
	}
	if n := ran.Load(); n != maxOnDemandOrders {
		t.Fatalf("%d orders ran, want %d", n, maxOnDemandOrders)
	}
	if o.start("a.test", block) != nil {
		t.Fatal("an order after close")
	}
}

// TestOrdersFreeTheirSlot: an order that ended frees its name and its
// place in the bound.
func TestOrdersFreeTheirSlot(t *testing.T) {
	var o orders
	o.open(context.Background())
	defer o.close()
	for i := 0; i < 2*maxOnDemandOrders; i++ {
		done := o.start("a.test", func(context.Context) {})
		if done == nil {
			t.Fatalf("order %d refused after the ones before ended", i)
		}
		<-done
	}
}
