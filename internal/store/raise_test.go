package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// Gateways started together against buckets made with one replica all
// raise them to three at once. nats-server answers an update only from
// the stream's leader as it applies it, and an update that lands while
// another's raise has the stream between leaders is applied with no
// answer: its gateway's Open waited out its whole context (one Open in
// four, or more, failed so), and a gateway with no deadline the API
// timeout, then started over. Every Open must come back, in far less
// than its context, with the buckets raised.
func TestConcurrentRaisesAnswer(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	first, _ := js(t, testutil.ClusterURLs(servers))
	open(t, first, store.Options{}) // every bucket with one replica
	const gateways = 4
	const bound = 20 * time.Second
	var wg sync.WaitGroup
	took := make([]time.Duration, gateways)
	errs := make([]error, gateways)
	for i := range gateways {
		j, _ := js(t, servers[i%len(servers)].ClientURL())
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			defer cancel()
			start := time.Now()
			_, errs[i] = store.Open(ctx, j, store.Options{Replicas: 3})
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range gateways {
		t.Logf("open %d: %s", i, took[i].Round(time.Millisecond))
		if errs[i] != nil || took[i] > bound/2 {
			t.Errorf("open %d of %d raising at once: %v after %s", i, gateways, errs[i], took[i].Round(time.Millisecond))
		}
	}
	for _, name := range []string{"gatehouse_apps", "gatehouse_records", "gatehouse_locks"} {
		kv, err := first.KeyValue(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r := st.Config().Replicas; r != 3 {
			t.Errorf("%s after the raises: %d replicas", name, r)
		}
	}
}
