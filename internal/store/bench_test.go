package store_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// BenchmarkChangePropagation measures one app put through gateway 1
// until gateway 2's routing table routes it, over TCP on one embedded
// server.
func BenchmarkChangePropagation(b *testing.B) {
	ns := testutil.StartBus(b)
	j1, _ := js(b, ns.ClientURL())
	j2, _ := js(b, ns.ClientURL())
	s1 := open(b, j1, store.Options{})
	s2 := open(b, j2, store.Options{})
	mustPut(b, s1.PutZone(b.Context(), &route.Zone{Name: "bench.test"}))
	g2 := run(b, s2)
	b.ResetTimer()
	for i := range b.N {
		id := "app" + strconv.Itoa(i)
		mustPut(b, s1.PutApp(b.Context(), &route.App{ID: id}))
		deadline := time.Now().Add(5 * time.Second)
		for g2.live.Load().App(id) == nil {
			if time.Now().After(deadline) {
				b.Fatalf("%s never arrived", id)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// BenchmarkPageApps measures one page of 100 apps from the middle of
// 50,000: as the page lists the bucket's keys ("list": no routing table
// follows the store), from the table's names sorted once ("table"), and
// from them after a write to the apps made the table sort them again
// ("table-after-write"; the write itself is not timed).
func BenchmarkPageApps(b *testing.B) {
	const n = 50000
	for _, mode := range []string{"list", "table", "table-after-write"} {
		b.Run(mode, func(b *testing.B) {
			ns := testutil.StartBus(b)
			j, _ := js(b, ns.ClientURL())
			s := open(b, j, store.Options{})
			ctx := b.Context()
			for i := range n {
				mustPut(b, s.PutApp(ctx, &route.App{ID: fmt.Sprintf("app%06d", i)}))
			}
			if mode != "list" {
				run(b, s)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if mode == "table-after-write" {
					b.StopTimer()
					mustPut(b, s.PutApp(ctx, &route.App{ID: fmt.Sprintf("new%06d", i)}))
					b.StartTimer()
				}
				page, more, err := s.PageApps(ctx, "app025000", 100)
				if err != nil || !more || len(page) != 100 || page[0].ID != "app025001" {
					b.Fatalf("page: %d apps, more %v, %v", len(page), more, err)
				}
			}
		})
	}
}
