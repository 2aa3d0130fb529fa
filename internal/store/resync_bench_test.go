//go:build unix

package store

import (
	"context"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// cost is what one phase of a resync took: CPU of the whole process
// (the gateway and the embedded NATS server it reads from), wall time,
// and bytes allocated.
type cost struct {
	cpu, wall time.Duration
	bytes     uint64
}

type sample struct {
	cpu   time.Duration
	wall  time.Time
	bytes uint64
}

func now(tb testing.TB) sample {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return sample{cpu: cpu, wall: time.Now(), bytes: ms.TotalAlloc}
}

func (c *cost) add(from, to sample) {
	c.cpu += to.cpu - from.cpu
	c.wall += to.wall.Sub(from.wall)
	c.bytes += to.bytes - from.bytes
}

func (c *cost) report(b *testing.B, what string) {
	n := float64(b.N)
	b.ReportMetric(float64(c.cpu.Microseconds())/1e3/n, what+"-cpu-ms")
	b.ReportMetric(float64(c.wall.Microseconds())/1e3/n, what+"-wall-ms")
	b.ReportMetric(float64(c.bytes)/(1<<20)/n, what+"-MB")
}

// resyncStore is a store on an embedded server holding apps apps (and
// one zone), written concurrently.
func resyncStore(b *testing.B, apps int) *Store {
	ns := testutil.StartBus(b)
	js, err := jetstream.New(testutil.Connect(b, ns.ClientURL()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	s, err := Open(ctx, js, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.PutZone(ctx, &route.Zone{Name: "bench.test"}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(64)
	for i := range apps {
		g.Go(func() error {
			return s.PutApp(ctx, &route.App{ID: "app" + strconv.Itoa(i), Mode: route.ModeHTTP, Status: route.StatusActive,
				CORS:      route.CORS{Origins: []string{"https://app" + strconv.Itoa(i) + ".example.com"}},
				RateLimit: route.RateLimit{Requests: 600, Window: route.Duration(time.Minute)}})
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %d apps in %s", apps, time.Since(start).Round(time.Millisecond))
	return s
}

// resyncSizes are the table sizes the resync benchmarks measure: under
// -short (make bench, CI's one run that keeps them compiling and
// running) only the smaller, as filling 100,000 apps takes longer than
// everything else the benchmarks do.
func resyncSizes() []int {
	if testing.Short() {
		return []int{10000}
	}
	return []int{10000, 100000}
}

// BenchmarkResync measures what one full resync costs a gateway holding
// 10,000 and 100,000 apps: the load (new watchers reading every value of
// every routing bucket) and the Replace of the whole table, apart.
// CPU counts the whole process, the embedded NATS server included, as
// the server's work is paid for on every resync of every gateway.
//
//	go test -run '^$' -bench Resync -benchmem -benchtime 5x ./internal/store/
func BenchmarkResync(b *testing.B) {
	for _, apps := range resyncSizes() {
		b.Run("apps="+strconv.Itoa(apps), func(b *testing.B) {
			s := resyncStore(b, apps)
			bld := route.NewBuilder(new(route.Live))
			var load, replace cost
			for b.Loop() {
				feeds := s.feeds()
				t0 := now(b)
				ws := make([]jetstream.KeyWatcher, 0, len(feeds))
				for _, f := range feeds {
					w, err := f.kv.WatchAll(b.Context())
					if err != nil {
						b.Fatal(err)
					}
					ws = append(ws, w)
				}
				st, _, _, err := s.loadState(b.Context(), feeds, ws)
				if err != nil {
					b.Fatal(err)
				}
				t1 := now(b)
				bld.Replace(st)
				t2 := now(b)
				load.add(t0, t1)
				replace.add(t1, t2)
				b.StopTimer()
				for _, w := range ws {
					stopWatch(s.js.Conn(), w)
				}
				if n := bld.Live().Load().Apps(); n != apps {
					b.Fatalf("table holds %d apps, want %d", n, apps)
				}
				b.StartTimer()
			}
			load.report(b, "load")
			replace.report(b, "replace")
		})
	}
}

// BenchmarkResyncCheck measures what replaced the 30 s full resync of
// BenchmarkResync in the steady state: one check of a table that follows
// every change, with 10,000 and 100,000 apps.
//
//	go test -run '^$' -bench ResyncCheck -benchmem ./internal/store/
func BenchmarkResyncCheck(b *testing.B) {
	for _, apps := range resyncSizes() {
		b.Run("apps="+strconv.Itoa(apps), func(b *testing.B) {
			s := resyncStore(b, apps)
			feeds := s.feeds()
			before := make([]*jetstream.StreamInfo, len(feeds))
			ws := make([]jetstream.KeyWatcher, 0, len(feeds))
			for i, f := range feeds {
				var err error
				if before[i], err = s.streamInfo(b.Context(), f.bucket); err != nil {
					b.Fatal(err)
				}
				w, err := f.kv.WatchAll(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				defer stopWatch(s.js.Conn(), w)
				ws = append(ws, w)
			}
			_, revs, dead, err := s.loadState(b.Context(), feeds, ws)
			if err != nil {
				b.Fatal(err)
			}
			f := s.follower(route.NewBuilder(new(route.Live)), feeds, revs, dead, before)
			var c cost
			for b.Loop() {
				t0 := now(b)
				f.snapshot()
				err := f.fetch(b.Context())
				var reason string
				var behind bool
				if err == nil {
					reason, behind = f.compare(b.Context())
				}
				c.add(t0, now(b))
				if err != nil || reason != "" || behind {
					b.Fatalf("check: %q, behind %v, %v", reason, behind, err)
				}
			}
			c.report(b, "check")
		})
	}
}
