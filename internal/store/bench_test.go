package store_test

import (
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
