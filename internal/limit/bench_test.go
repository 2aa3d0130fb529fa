package limit

import (
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// BenchmarkCharge is one request's cost against a warm key.
func BenchmarkCharge(b *testing.B) {
	w, _ := NewWindow(WindowOptions{})
	k := KeyFor("app", netip.MustParseAddr("192.0.2.1"))
	q := Quota{Limit: 1 << 30, Window: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		w.Charge(k, 1, q)
	}
}

// BenchmarkChargeParallel is the same with b.RunParallel (run with -cpu 2
// for two cores contending), each goroutine on its own client address.
func BenchmarkChargeParallel(b *testing.B) {
	w, _ := NewWindow(WindowOptions{})
	q := Quota{Limit: 1 << 30, Window: time.Minute}
	b.ReportAllocs()
	var next int32
	b.RunParallel(func(pb *testing.PB) {
		next++
		k := KeyFor("app", netip.AddrFrom4([4]byte{192, 0, 2, byte(next)}))
		for pb.Next() {
			w.Charge(k, 1, q)
		}
	})
}

// BenchmarkChargeParallelSameKey has every goroutine charge one key: the
// worst case, one shard lock.
func BenchmarkChargeParallelSameKey(b *testing.B) {
	w, _ := NewWindow(WindowOptions{})
	k := KeyFor("app", netip.MustParseAddr("192.0.2.1"))
	q := Quota{Limit: 1 << 30, Window: time.Minute}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Charge(k, 1, q)
		}
	})
}

// BenchmarkMemory fills a limiter with 1,000,000 distinct IPv4 clients and
// reports the live heap per key.
func BenchmarkMemory(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		w, _ := NewWindow(WindowOptions{MaxKeys: n + n/10}) // headroom: shards fill unevenly
		q := Quota{Limit: 600, Window: time.Minute}
		for i := range n {
			a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			w.Charge(KeyFor("app", a), 1, q)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if w.Len() != n {
			b.Fatalf("holds %d keys", w.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
		runtime.KeepAlive(w)
	}
}

// BenchmarkChargeFixedClock is BenchmarkCharge without the clock read, to
// tell the limiter's own cost from time.Now's (which is slow on some VMs).
func BenchmarkChargeFixedClock(b *testing.B) {
	t0 := time.Now()
	w, _ := NewWindow(WindowOptions{Now: func() time.Time { return t0 }})
	k := KeyFor("app", netip.MustParseAddr("192.0.2.1"))
	q := Quota{Limit: 1 << 30, Window: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		w.Charge(k, 1, q)
	}
}

// BenchmarkTimeNow is the cost of the clock read alone, for comparison.
func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}
