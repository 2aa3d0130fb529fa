package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// BenchmarkList measures the lists, which ask the stream leader for the
// latest entry under their filter before they read their watch: RecordsAt
// at a name of one record set, on one server ("records-at") and on a
// 3-node cluster, R3, through a node that leads no bucket
// ("records-at-r3"), and every app of 1000 on one server ("apps-1000").
func BenchmarkList(b *testing.B) {
	b.Run("records-at", func(b *testing.B) {
		ns := testutil.StartBus(b)
		j, _ := js(b, ns.ClientURL())
		benchRecordsAt(b, open(b, j, store.Options{}))
	})
	b.Run("records-at-r3", func(b *testing.B) {
		servers := testutil.StartCluster(b, 3)
		j, _ := js(b, testutil.ClusterURLs(servers))
		open(b, j, store.Options{Replicas: 3})
		var url string
		testutil.WaitFor(b, 10*time.Second, func() bool {
			for _, ns := range servers {
				if !ns.JetStreamIsStreamLeader("$G", "KV_gatehouse_records") {
					url = ns.ClientURL()
					return true
				}
			}
			return false
		}, "no server follows the records bucket")
		j, _ = js(b, url)
		benchRecordsAt(b, open(b, j, store.Options{Replicas: 3}))
	})
	b.Run("apps-1000", func(b *testing.B) {
		ns := testutil.StartBus(b)
		j, _ := js(b, ns.ClientURL())
		s := open(b, j, store.Options{})
		ctx := b.Context()
		for i := range 1000 {
			mustPut(b, s.PutApp(ctx, &route.App{ID: fmt.Sprintf("app%04d", i)}))
		}
		b.ResetTimer()
		for range b.N {
			if apps, err := s.ListApps(ctx); err != nil || len(apps) != 1000 {
				b.Fatalf("list: %d apps, %v", len(apps), err)
			}
		}
	})
}

func benchRecordsAt(b *testing.B, s *store.Store) {
	ctx := b.Context()
	mustPut(b, s.PutRecord(ctx, &route.Record{Zone: "z.test", Name: "www", Type: "TXT", Values: []string{"v"}}))
	b.ResetTimer()
	for range b.N {
		if recs, err := s.RecordsAt(ctx, "z.test", "www"); err != nil || len(recs) != 1 {
			b.Fatalf("records at: %d, %v", len(recs), err)
		}
	}
}
