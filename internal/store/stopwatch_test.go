package store

import (
	"errors"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The store's last calls on a watch or a lock: with the bus up they
// still remove what they made there (the watch's consumer, the lock's
// key) before returning; with the bus down they return at once instead
// of waiting out the JetStream API timeout (5 s) on a call that cannot
// arrive, which held up a gateway's stop.
func TestLastCallsDoNotWaitForADownBus(t *testing.T) {
	for _, tc := range []struct {
		name string
		down bool
	}{
		{"bus up", false},
		{"bus down", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := testutil.StartBus(t)
			js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
			if err != nil {
				t.Fatal(err)
			}
			nc := js.Conn()
			ctx := t.Context()
			s, err := Open(ctx, js, Options{})
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(ctx, bucketApps)
			if err != nil {
				t.Fatal(err)
			}
			w, err := kv.WatchAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Certs().Lock(ctx, "sweep-test"); err != nil {
				t.Fatal(err)
			}
			if tc.down {
				ns.Shutdown()
				ns.WaitForShutdown()
				testutil.WaitFor(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "client saw the bus go")
			}

			began := time.Now()
			stopWatch(nc, w)
			uerr := s.Certs().Unlock(ctx, "sweep-test")
			if took := time.Since(began); took > time.Second {
				t.Fatalf("stopWatch and Unlock took %v", took)
			}
			if _, open := <-w.Updates(); open {
				t.Fatal("watch still delivers after stopWatch")
			}
			if tc.down {
				if !errors.Is(uerr, nats.ErrDisconnected) {
					t.Fatalf("Unlock with the bus down = %v, want a disconnected error", uerr)
				}
				return
			}
			if uerr != nil {
				t.Fatalf("Unlock: %v", uerr)
			}
			st, err := js.Stream(ctx, "KV_"+bucketApps)
			if err != nil {
				t.Fatal(err)
			}
			if n := st.CachedInfo().State.Consumers; n != 0 {
				t.Fatalf("%d consumers left on the apps stream after stopWatch", n)
			}
			locks, err := js.KeyValue(ctx, bucketLocks)
			if err != nil {
				t.Fatal(err)
			}
			key, err := lockKey("sweep-test")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := locks.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("lock key after Unlock: %v, want it gone", err)
			}
		})
	}
}

// TestUnlockWithBusDownDoesNotWaitForARefresh: a lock held while the bus
// is down is refreshed every LockTTL/3, each refresh a publish that
// waited up to LockTTL/3 (20 s by default) for a bus it could not reach,
// and Unlock (a gateway's stop, ending a sweep) waited for the one in
// flight. A refresh now fails at once then, and Unlock returns at once.
func TestUnlockWithBusDownDoesNotWaitForARefresh(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ttl = 3 * time.Second // a refresh every second, each bounded by a second
	s, err := Open(ctx, js, Options{LockTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Certs().Lock(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	// Past the first refresh (at ttl/3), well before its bound ends: a
	// refresh that waits for the bus is in flight now. Nothing to wait
	// on but the refresher's own clock.
	time.Sleep(ttl/3 + ttl/6)
	began := time.Now()
	err = s.Certs().Unlock(ctx, "held")
	if took := time.Since(began); took > 200*time.Millisecond {
		t.Fatalf("Unlock with the bus down took %v", took)
	}
	if !errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("Unlock with the bus down = %v, want a disconnected error", err)
	}
}
