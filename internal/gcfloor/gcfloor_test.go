package gcfloor

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// The tests change the process's GOGC, so none runs in parallel, and
// each leaves GOGC as it found it.

func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates total bytes of garbage in 64 KiB pieces and returns how
// many collections ran meanwhile.
func churn(total int) uint64 {
	before := cycles()
	for range total >> 16 {
		sink = make([]byte, 64<<10)
	}
	sink = nil
	return cycles() - before
}

// settle runs collections until the floor has seen one (its cleanup runs
// on the runtime's cleanup goroutine, after the cycle).
func settle(t *testing.T, f *Floor, want func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !want(f.Percent()) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC stays %d", f.Percent())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func TestFloorSpacesCollections(t *testing.T) {
	defer debug.SetGCPercent(GOGC())
	runtime.GC()
	without := churn(256 << 20)

	f := Start(context.Background(), 64<<20)
	defer f.Stop()
	settle(t, f, func(p int) bool { return p > 100 })
	with := churn(256 << 20)
	t.Logf("collections while allocating 256 MiB: %d without a floor, %d with 64 MiB (GOGC %d)", without, with, f.Percent())
	// The test binary's live heap is a few MB: without a floor the goal is
	// about 4-8 MB (30+ collections), with it about 64 MB (4-5).
	if without < 24 {
		t.Fatalf("without a floor: %d collections, want 24 or more (is GOGC set in the environment?)", without)
	}
	if with > 8 {
		t.Fatalf("with a 64 MiB floor: %d collections, want 8 or fewer", with)
	}
	if got := f.Percent(); GOGC() != got {
		t.Fatalf("Percent() = %d, runtime GOGC = %d", got, GOGC())
	}
}

func TestFloorStepsAsideForALargeHeap(t *testing.T) {
	defer debug.SetGCPercent(GOGC())
	f := Start(context.Background(), 16<<20)
	defer f.Stop()
	settle(t, f, func(p int) bool { return p > 100 })

	// 48 MiB live: the ordinary goal (96 MiB) is above the floor.
	live := make([][]byte, 48)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	settle(t, f, func(p int) bool { return p == 100 })
	if got := GOGC(); got != 100 {
		t.Fatalf("GOGC = %d with 48 MiB live over a 16 MiB floor, want 100", got)
	}
	runtime.KeepAlive(live)
	live = nil
	settle(t, f, func(p int) bool { return p > 100 })
}

func TestStopRestoresGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	ctx, cancel := context.WithCancel(context.Background())
	f := Start(ctx, 64<<20)
	settle(t, f, func(p int) bool { return p > 150 })
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for GOGC() != 150 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d after the context ended, want 150 back", GOGC())
		}
		time.Sleep(time.Millisecond)
	}
	// Later collections change nothing.
	for range 3 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond)
	if got := GOGC(); got != 150 {
		t.Fatalf("GOGC = %d after collections past Stop, want 150", got)
	}
	f.Stop() // twice is fine
}

func TestFloorLeavesGOGCAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gogc  int
		floor uint64
	}{
		{"zero floor", 100, 0},
		{"GOGC off", -1, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer debug.SetGCPercent(debug.SetGCPercent(tc.gogc))
			f := Start(context.Background(), tc.floor)
			defer f.Stop()
			runtime.GC()
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
			if got := GOGC(); got != tc.gogc {
				t.Fatalf("GOGC = %d, want %d untouched", got, tc.gogc)
			}
		})
	}
}

func TestGOGCReadsWithoutSetting(t *testing.T) {
	for _, want := range []int{150, -1, 100} {
		old := debug.SetGCPercent(want)
		got := GOGC()
		debug.SetGCPercent(old)
		if got != want {
			t.Errorf("GOGC() = %d after SetGCPercent(%d)", got, want)
		}
	}
}

func TestPercentFor(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		live, floor uint64
		base, want  int
	}{
		{0, 64 * mb, 100, 1600},       // before any mark: the 4 MiB heap minimum × 16 = 64 MiB
		{4 * mb, 64 * mb, 100, 1600},  // at the minimum: the same
		{2 * mb, 2 * mb, 100, 100},    // the minimum is above the floor already
		{5 * mb, 64 * mb, 100, 1180},  // ceil(1280) - 100
		{32 * mb, 64 * mb, 100, 100},  // 32 × 2 = 64: the ordinary goal already
		{300 * mb, 64 * mb, 100, 100}, // a large heap: base
		{10 * mb, 64 * mb, 800, 800},  // 10 × 9 = 90 MiB: base
		{10 * mb, 64 * mb, 50, 540},   // a lower base is raised too
		{1, 1 << 40, 100, maxPercent}, // capped
		{8 * mb, 8*mb + 1, 0, 1},      // GOGC=0 base: just past the floor
	} {
		if got := percentFor(tc.live, tc.floor, tc.base); got != tc.want {
			t.Errorf("percentFor(%d, %d, %d) = %d, want %d", tc.live, tc.floor, tc.base, got, tc.want)
		}
	}
}
