package route

import (
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The lookup benchmarks run against one table of benchApps apps under one
// zone plus benchDomains verified custom domains, built once per process
// with Builder.Replace (about 2-4 s), so `go test -bench . -benchtime=1x`
// stays cheap. Targets (issue 6): under 100 ns and zero allocations per
// lookup, O(1) in the number of apps and domains, and a 1,000,000-app
// table under 300 MB.
const (
	benchApps    = 1_000_000
	benchDomains = 1_000_000
	benchZone    = "apps.example.com"
	// benchProbe is how many distinct names a benchmark cycles through: a
	// spread across the whole table, so the numbers include cache misses
	// rather than one hot entry.
	benchProbe = 1 << 16
)

type bigTable struct {
	live       Live
	b          *Builder
	buildApps  time.Duration // Replace of the zone + benchApps apps
	buildAll   time.Duration // Replace of the zone, apps and domains
	appBytes   uint64        // heap held by the zone + benchApps apps
	totalBytes uint64        // heap held by the table with the domains too
	appNames   []string
	domNames   []string
	unknown    []string
}

var (
	bigOnce sync.Once
	big     *bigTable
)

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapNow() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// name is prefix + i as 7 zero-padded digits + suffix, built with one
// allocation so that the heap measured while building holds no garbage.
func name(prefix string, i int, suffix string) string {
	var buf [96]byte
	b := append(buf[:0], prefix...)
	for d := 1_000_000; d > 0; d /= 10 {
		b = append(b, byte('0'+i/d%10))
	}
	return string(append(b, suffix...))
}

func benchAppID(i int) string    { return name("app-", i, "") }
func benchDomain(i int) string   { return name("www.customer-", i, ".com") }
func benchDomApp(i int) string   { return benchAppID((i * 7919) % benchApps) }
func benchStride(i, n int) int   { return (i * 104729) % n } // spread probes over the table
func benchUnknown(i int) string  { return name("nope-", i, "."+benchZone) }
func benchZoneName(i int) string { return name("app-", i, "."+benchZone) }

// loadBig builds the shared table once. Apps look like real ones (active,
// an origin, a rate limit) so bytes per app are not flattered by empty
// structs.
func loadBig() *bigTable {
	bigOnce.Do(func() {
		t := &bigTable{}
		b := NewBuilder(&t.live)
		base := heapInUse()
		// No collections while building: the heap only grows here, and
		// each cycle would re-mark everything built so far.
		defer debug.SetGCPercent(debug.SetGCPercent(-1))

		zones := []*Zone{{Name: benchZone, Gateways: []string{"192.0.2.1"}, TTL: 60}}
		apps := make([]*App, benchApps)
		for i := range apps {
			id := benchAppID(i)
			apps[i] = &App{ID: id, Mode: ModeHTTP, Status: StatusActive,
				CORS:      CORS{Origins: []string{"https://" + id + ".example.org"}},
				RateLimit: RateLimit{Requests: 600, Window: Duration(60e9)}}
		}
		t0 := time.Now()
		b.Replace(State{Zones: zones, Apps: apps})
		t.buildApps = time.Since(t0)
		// With collection off and nothing built here being garbage yet
		// but the apps slice itself, the heap growth is the apps' cost;
		// this saves a full mark of the big heap.
		t.appBytes = heapNow() - base - uint64(cap(apps))*8

		domains := make([]*Domain, benchDomains)
		for i := range domains {
			domains[i] = &Domain{Domain: benchDomain(i), App: benchDomApp(i), Token: name("tok-", i, "-0123456789"), Verified: true}
		}
		t0 = time.Now()
		b.Replace(State{Zones: zones, Apps: apps, Domains: domains})
		t.buildAll = time.Since(t0)
		// The State slices are garbage once Replace returns; only the
		// maps and what they point at stay.
		apps, domains = nil, nil
		t.totalBytes = heapInUse() - base

		for i := 0; i < benchProbe; i++ {
			t.appNames = append(t.appNames, benchZoneName(benchStride(i, benchApps)))
			t.domNames = append(t.domNames, benchDomain(benchStride(i, benchDomains)))
			t.unknown = append(t.unknown, benchUnknown(i))
		}
		t.b = b
		big = t
	})
	return big
}

// BenchmarkLookup measures Table.Lookup on the 1M-app, 1M-domain table.
// Each sub-benchmark first checks a sample of answers and that a lookup
// allocates nothing, so a regression fails the (CI, -benchtime=1x) run
// rather than only showing up as a number.
func BenchmarkLookup(b *testing.B) {
	t := loadBig()
	tbl := t.live.Load()
	if tbl.Apps() != benchApps {
		b.Fatalf("table has %d apps, want %d", tbl.Apps(), benchApps)
	}
	routes := float64(benchApps + benchDomains)
	// The same lookups on a 1,024-app table that fits in cache: the gap to
	// the 1M table is memory latency, not work that grows with the table.
	var smallLive Live
	smallApps := make([]*App, 1024)
	smallNames := make([]string, 1024)
	for i := range smallApps {
		smallApps[i] = &App{ID: benchAppID(i), Status: StatusActive}
		smallNames[i] = benchZoneName(i)
	}
	NewBuilder(&smallLive).Replace(State{Zones: []*Zone{{Name: benchZone}}, Apps: smallApps})
	// The -chained cases look up a name that depends on the previous
	// answer, so that no two lookups overlap: one lookup's latency, where
	// the others measure throughput, lookups overlapping their misses as a
	// busy gateway's do.
	cases := []struct {
		name    string
		tbl     *Table
		hosts   []string
		kind    Kind
		chained bool
	}{
		{"zone-app-1k-table", smallLive.Load(), smallNames, KindApp, false},
		{"zone-app", tbl, t.appNames, KindApp, false},
		{"zone-app-chained", tbl, t.appNames, KindApp, true},
		{"custom-domain", tbl, t.domNames, KindApp, false},
		{"custom-domain-chained", tbl, t.domNames, KindApp, true},
		{"unknown", tbl, t.unknown, KindUnknown, false},
		{"api", tbl, []string{"api." + benchZone}, KindAPI, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			tbl := c.tbl
			for _, h := range c.hosts[:min(len(c.hosts), 64)] {
				if m := tbl.Lookup(h); m.Kind != c.kind {
					b.Fatalf("Lookup(%q).Kind = %v, want %v", h, m.Kind, c.kind)
				}
			}
			if n := testing.AllocsPerRun(100, func() { tbl.Lookup(c.hosts[0]) }); n != 0 {
				b.Fatalf("Lookup(%q) allocates %v times, want 0", c.hosts[0], n)
			}
			mask := len(c.hosts) - 1 // a power of two, or 0
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			var sink Kind
			if c.chained {
				j := 0
				for i := 0; i < b.N; i++ {
					j += int(tbl.Lookup(c.hosts[j&mask]).Kind) // KindApp is 1
				}
				sink = Kind(j)
			} else {
				for i := 0; i < b.N; i++ {
					sink += tbl.Lookup(c.hosts[i&mask]).Kind
				}
			}
			cpu := processCPU() - cpu0
			b.StopTimer()
			_ = sink
			// ns/op is wall time, which a busy machine inflates; CPU time
			// of the process per lookup is the steadier figure there.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(t.totalBytes)/routes, "B/route")
			b.ReportMetric(float64(t.appBytes)/benchApps, "B/app")
			b.ReportMetric(float64(t.appBytes)/(1<<20), "MB/1M-apps")
			b.ReportMetric(float64(t.totalBytes)/(1<<20), "MB/table")
			b.ReportMetric(float64(t.buildApps.Milliseconds()), "ms-build-apps")
			b.ReportMetric(float64(t.buildAll.Milliseconds()), "ms-build-all")
		})
	}
}

// BenchmarkEdit measures one store change on the 1M-app, 1M-domain table:
// each publishes a new snapshot, so this is the copy-on-write cost a store
// watcher pays per event. A host change must not copy the name index.
func BenchmarkEdit(b *testing.B) {
	t := loadBig()
	bl := t.b
	cases := []struct {
		name string
		f    func(i int)
	}{
		{"put-existing-app", func(i int) {
			id := benchAppID(benchStride(i, benchApps))
			bl.PutApp(&App{ID: id, Mode: ModeHTTP, Status: StatusActive})
		}},
		{"put-domain", func(i int) {
			d := benchDomain(benchStride(i, benchDomains))
			bl.PutDomain(&Domain{Domain: d, App: benchDomApp(benchStride(i, benchDomains)), Verified: true})
		}},
		{"put-zone", func(i int) { bl.PutZone(&Zone{Name: benchZone, Gateways: []string{"192.0.2.1"}, TTL: 60}, uint64(i)) }},
		{"set-host", func(i int) {
			bl.SetHost(&Host{ID: "h1", Apps: []string{benchAppID(i % benchApps)}, State: HostVerified})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c.f(i)
			}
		})
	}
	// The store's follower applies a burst of changes under one Hold: an
	// op is still one change, published with the 63 others of its burst.
	b.Run("put-existing-app-in-burst-of-64", func(b *testing.B) {
		b.ReportAllocs()
		release := bl.Hold()
		for i := 0; i < b.N; i++ {
			if i%64 == 63 {
				release()
				release = bl.Hold()
			}
			cases[0].f(i)
		}
		release()
	})
	if bl.Live().Load().Apps() != benchApps {
		b.Fatalf("edits changed the number of apps to %d", bl.Live().Load().Apps())
	}
}

// BenchmarkNormalizeHost covers the names that are not already clean: a
// port, upper case, a trailing dot. Only the clean case must be free.
func BenchmarkNormalizeHost(b *testing.B) {
	for _, h := range []string{"app-0000001.apps.example.com", "App-0000001.Apps.Example.com:8443", "app-0000001.apps.example.com."} {
		b.Run(h, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := NormalizeHost(h); !ok {
					b.Fatalf("NormalizeHost(%q) failed", h)
				}
			}
		})
	}
}

// BenchmarkDomainsOf measures finding one app's mappings among the
// 1,000,000 of the big table (the control API's app DELETE asks it twice).
func BenchmarkDomainsOf(b *testing.B) {
	t := loadBig().live.Load()
	want := 0
	for i := range benchDomains {
		if benchDomApp(i) == benchAppID(7) {
			want++
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := len(t.DomainsOf(benchAppID(7))); got != want {
			b.Fatalf("%d mappings, want %d", got, want)
		}
	}
}

// BenchmarkSortedNames measures sorting every app id of the big table,
// what the store's pages do once per version of the apps.
func BenchmarkSortedNames(b *testing.B) {
	t := loadBig().live.Load()
	b.ReportAllocs()
	for b.Loop() {
		if got := len(t.AppIDs()); got != benchApps {
			b.Fatalf("%d ids", got)
		}
	}
}
