package limit

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a hand-moved clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

var q600 = Quota{Limit: 600, Window: time.Minute}

func TestKeyFor(t *testing.T) {
	cases := []struct {
		a, b string
		same bool
	}{
		{"192.0.2.1", "192.0.2.1", true},
		{"192.0.2.1", "192.0.2.2", false},
		{"192.0.2.1", "::ffff:192.0.2.1", true},
		{"2001:db8:1::1", "2001:db8:1:ffff::2", true},
		{"2001:db8:1::1", "2001:db8:2::1", false},
		{"2001:db8:1::1%eth0", "2001:db8:1::9", true},
	}
	for _, c := range cases {
		ka := KeyFor("app", netip.MustParseAddr(c.a))
		kb := KeyFor("app", netip.MustParseAddr(c.b))
		if (ka == kb) != c.same {
			t.Errorf("KeyFor(%s) == KeyFor(%s): %v, want %v (%s vs %s)", c.a, c.b, ka == kb, c.same, ka, kb)
		}
	}
	if KeyFor("a", netip.MustParseAddr("192.0.2.1")) == KeyFor("b", netip.MustParseAddr("192.0.2.1")) {
		t.Error("different scopes share a key")
	}
	if got := KeyFor("x", netip.MustParseAddr("2001:db8:1:2::3")).String(); got != "x|2001:db8:1::/48" {
		t.Errorf("String = %q", got)
	}
}

func TestWindowSliding(t *testing.T) {
	clk := newClock()
	w, err := NewWindow(WindowOptions{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	k := KeyFor("app", netip.MustParseAddr("192.0.2.7"))
	q := Quota{Limit: 10, Window: 10 * time.Second}
	// Align to a window start so the arithmetic below is exact.
	clk.Add(-time.Duration(clk.ns.Load() % int64(q.Window)))

	type step struct {
		advance   time.Duration
		n         int
		allowed   bool
		remaining int
		reset     time.Duration
		retry     time.Duration
	}
	steps := []step{
		{0, 1, true, 9, 0, 0},
		{0, 8, true, 1, 0, 0},
		// full: one more fits once 10×(1−e/10) ≤ 9 in the next window: 10 s + 1 s
		{0, 1, true, 0, 11 * time.Second, 0},
		{0, 1, false, 0, 11 * time.Second, 11 * time.Second},
		{5 * time.Second, 1, false, 0, 6 * time.Second, 6 * time.Second},
		// next window: 10 carried at weight 1 - e/10; at e=1s, 9 carried: one fits.
		{6 * time.Second, 1, true, 0, time.Second, 0},
		{0, 1, false, 0, time.Second, time.Second},
		// e=5s: carried 5, cur 1 -> 4 remaining
		{4 * time.Second, 0, true, 4, 0, 0},
		{0, 5, false, 4, 0, time.Second},
		{0, 4, true, 0, time.Second, 0},
		{0, 11, false, 0, time.Second, 10 * time.Second}, // more than the limit never fits
		// two windows later, nothing is carried
		{25 * time.Second, 10, true, 0, 11 * time.Second, 0},
	}
	for i, s := range steps {
		clk.Add(s.advance)
		r, err := w.Charge(k, s.n, q)
		if err != nil {
			t.Fatal(err)
		}
		want := Result{Allowed: s.allowed, Limit: 10, Remaining: s.remaining, Reset: s.reset, RetryAfter: s.retry}
		if r != want {
			t.Errorf("step %d: got %+v, want %+v", i, r, want)
		}
	}
}

func TestWindowQuotaChangeStartsOver(t *testing.T) {
	clk := newClock()
	w, _ := NewWindow(WindowOptions{Now: clk.Now})
	k := Key{Scope: "a"}
	for range 5 {
		w.Charge(k, 1, Quota{Limit: 5, Window: time.Minute})
	}
	if r, _ := w.Charge(k, 1, Quota{Limit: 5, Window: time.Minute}); r.Allowed {
		t.Fatal("sixth request allowed")
	}
	if r, _ := w.Charge(k, 1, Quota{Limit: 5, Window: 30 * time.Second}); !r.Allowed {
		t.Fatal("a new window length did not start over")
	}
	if _, err := w.Charge(k, 1, Quota{}); err == nil {
		t.Fatal("zero quota accepted")
	}
}

func TestWindowConcurrentBurstAdmitsExactly(t *testing.T) {
	clk := newClock()
	w, _ := NewWindow(WindowOptions{Now: clk.Now})
	k := KeyFor("app", netip.MustParseAddr("2001:db8::1"))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if r, _ := w.Charge(k, 1, q600); r.Allowed {
				admitted.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got != 600 {
		t.Fatalf("admitted %d of 1000 against 600", got)
	}
}

func TestWindowBoundedKeys(t *testing.T) {
	clk := newClock()
	w, _ := NewWindow(WindowOptions{Now: clk.Now, MaxKeys: 64})
	for i := range 10_000 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		w.Charge(KeyFor("app", a), 1, q600)
	}
	if n := w.Len(); n > 64 {
		t.Fatalf("holds %d keys, bound 64", n)
	}
	// The most recently used key survives a flood smaller than its shard.
	hot := KeyFor("app", netip.MustParseAddr("192.0.2.1"))
	for range 5 {
		w.Charge(hot, 1, Quota{Limit: 5, Window: time.Minute})
	}
	if r, _ := w.Charge(hot, 1, Quota{Limit: 5, Window: time.Minute}); r.Allowed {
		t.Fatal("hot key was evicted by its own use")
	}
	if _, err := NewWindow(WindowOptions{MaxKeys: -1}); err == nil {
		t.Fatal("negative MaxKeys accepted")
	}
}

// TestWindowHugeMaxKeys: a bound near the int range means "hold them all"
// to whoever set it. Split over the shards by (max + 31)/32, it overflowed
// to one key per shard: a 33rd client evicted another's counter, and every
// client flooding from a few addresses got a fresh budget.
func TestWindowHugeMaxKeys(t *testing.T) {
	for _, max := range []int{math.MaxInt, math.MaxInt - 30, math.MaxInt / 64} {
		clk := newClock()
		w, err := NewWindow(WindowOptions{Now: clk.Now, MaxKeys: max})
		if err != nil {
			t.Fatal(err)
		}
		q := Quota{Limit: 1, Window: time.Minute}
		for i := range 1000 {
			w.Charge(KeyFor("app", netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})), 1, q)
		}
		if n := w.Len(); n != 1000 {
			t.Fatalf("MaxKeys %d: holds %d of 1000 keys", max, n)
		}
		if r, _ := w.Charge(KeyFor("app", netip.MustParseAddr("10.0.0.0")), 1, q); r.Allowed {
			t.Fatalf("MaxKeys %d: the first client's spent budget was forgotten", max)
		}
	}
}

func TestQuotaValidate(t *testing.T) {
	for _, q := range []Quota{{0, time.Minute}, {-1, time.Minute}, {1, 0}, {1, 25 * time.Hour}} {
		if q.Validate() == nil {
			t.Errorf("%+v validated", q)
		}
	}
	if err := q600.Validate(); err != nil {
		t.Error(err)
	}
}

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-1, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {59500 * time.Millisecond, 60}} {
		if got := Seconds(c.d); got != c.want {
			t.Errorf("Seconds(%s) = %d, want %d", c.d, got, c.want)
		}
	}
}
