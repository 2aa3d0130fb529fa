package gcfloor

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapMinimum is the Go runtime's smallest heap goal at GOGC=100 (its
// defaultHeapMinimum); the runtime scales it with GOGC.
const heapMinimum = 4 << 20

// maxPercent bounds the GOGC a Floor sets: a goal this many times the
// live heap is already far past any floor worth asking for.
const maxPercent = 1 << 16

const (
	liveMetric = "/gc/heap/live:bytes"
	gogcMetric = "/gc/gogc:percent"
)

// GOGC is the collector's percentage in force now (-1 for off), read
// without setting it, as debug.SetGCPercent would.
func GOGC() int {
	s := []metrics.Sample{{Name: gogcMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	// The runtime reports off as -1 stored in the uint64.
	return int(int64(s[0].Value.Uint64()))
}

// Floor holds the heap goal at or above its floor until its context ends
// or Stop is called.
type Floor struct {
	floor uint64
	base  int // GOGC when the floor started

	mu      sync.Mutex
	stopped bool
	percent int // GOGC as the floor last set it
	sample  []metrics.Sample
}

// sentinel is allocated once per collection cycle; its cleanup, run after
// the cycle that found it unreachable, is the Floor's cue to look at the
// heap again. It holds a pointer so that it is never batched with other
// small objects (which would keep it alive past its cycle).
type sentinel struct {
	_ *byte
	_ [8]byte
}

// Start holds the heap goal at or above floor bytes until ctx ends or Stop
// is called, then restores GOGC. A zero floor, or GOGC=off, makes a Floor
// that does nothing.
func Start(ctx context.Context, floor uint64) *Floor {
	f := &Floor{floor: floor, base: GOGC(), sample: []metrics.Sample{{Name: liveMetric}}}
	f.percent = f.base
	if floor == 0 || f.base < 0 {
		f.stopped = true
		return f
	}
	f.mu.Lock()
	f.adjustLocked()
	f.mu.Unlock()
	f.arm()
	context.AfterFunc(ctx, f.Stop)
	return f
}

// Stop ends the floor and restores the GOGC in force when it started.
// It is safe to call more than once.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	if f.percent != f.base {
		debug.SetGCPercent(f.base)
		f.percent = f.base
	}
}

// Percent is the GOGC the floor last set (its base when it is idle or
// stopped).
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) { f.cycle() }, f)
}

// cycle runs once after each collection.
func (f *Floor) cycle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.adjustLocked()
	f.arm()
}

func (f *Floor) adjustLocked() {
	metrics.Read(f.sample)
	var live uint64
	if v := f.sample[0].Value; v.Kind() == metrics.KindUint64 {
		live = v.Uint64()
	}
	p := percentFor(live, f.floor, f.base)
	// Small moves are not worth a pacer update each cycle.
	if d := p - f.percent; d != 0 && (p == f.base || max(d, -d) > f.percent/16) {
		debug.SetGCPercent(p)
		f.percent = p
	}
}

// percentFor is the GOGC that makes the goal of a heap with live bytes
// marked at least floor, and never below base. The runtime's goal is the
// larger of live × (1 + GOGC/100) and its heap minimum scaled by GOGC/100,
// so a heap at or under that minimum needs only the latter at the floor.
func percentFor(live, floor uint64, base int) int {
	var p uint64
	if live <= heapMinimum {
		if heapMinimum*uint64(max(base, 0))/100 >= floor {
			return base
		}
		p = (floor*100 + heapMinimum - 1) / heapMinimum // ceil(floor / heapMinimum × 100)
	} else {
		if live*uint64(100+base)/100 >= floor {
			return base
		}
		p = (floor*100+live-1)/live - 100 // ceil(floor / live × 100) - 100
	}
	return int(min(max(p, uint64(base)), maxPercent))
}
