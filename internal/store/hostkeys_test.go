package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

const testHostKey = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="

// seenIDs collects the host ids WatchHostKeys reports.
type seenIDs struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seenIDs) add(id string)       { s.mu.Lock(); s.ids[id]++; s.mu.Unlock() }
func (s *seenIDs) count(id string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.ids[id] }
func (s *seenIDs) has(id string) func() bool {
	return func() bool { return s.count(id) > 0 }
}

func watchHostKeys(t *testing.T, s *store.Store) *seenIDs {
	t.Helper()
	seen := &seenIDs{ids: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.WatchHostKeys(ctx, seen.add) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHostKeys: %v", err)
		}
	})
	return seen
}

// A host key changed right after the bus came back reaches discovery at
// once, as before it went away: the watch used to resume only when the
// library noticed its consumer's heartbeats missing, some 20 s later, so
// a revoked host stayed in the pool that long (DESIGN §4 reverifies
// otherwise only every 10 min).
func TestWatchHostKeysAcrossReconnect(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	dir := t.TempDir()
	srv := startBusAt(t, addr, dir)
	j, _ := js(t, gatewayURL(t, dir, addr))
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "old", PublicKey: testHostKey, Apps: []string{"a"}}))
	seen := watchHostKeys(t, s)
	// Only changes from now on count; wait until the watch is up.
	testutil.WaitFor(t, 5*time.Second, func() bool {
		mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "h1", PublicKey: testHostKey, Apps: []string{"a"}}))
		return seen.has("h1")()
	}, "h1 not seen")
	if seen.has("old")() {
		t.Fatal("a key written before the watch was reported")
	}

	srv.Close()
	time.Sleep(time.Second) // the watch's consumer is gone with the server
	srv = startBusAt(t, addr, dir)
	defer srv.Close()
	n := seen.count("h1")
	start := time.Now()
	testutil.WaitFor(t, 10*time.Second, func() bool { return s.DeleteHostKey(ctx, "h1") == nil }, "delete fails after the bus came back")
	testutil.WaitFor(t, 5*time.Second, func() bool { return seen.count("h1") > n }, "a change right after the bus came back was not reported at once")
	t.Logf("reported %s after the bus came back", time.Since(start).Round(time.Millisecond))
}

// The host key bucket deleted and made again under a running watch (an
// operator's slip with the nats CLI): enrolments written to the new
// bucket reach discovery at once, as before. The library's watch of the
// deleted stream waited for the new one and resumed at the old one's
// revision, so it reported nothing until the new bucket had as many
// writes as the old: a revoked or replaced key stayed routable until
// discovery's periodic check, for as long as that took.
func TestWatchHostKeysBucketMadeAgain(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j := mustJS(t, ns.ClientURL())
	s := open(t, j, store.Options{Resync: 100 * time.Millisecond})
	ctx := t.Context()
	// The old bucket is some writes ahead of the new one.
	for range 5 {
		mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "old", PublicKey: testHostKey, Apps: []string{"a"}}))
	}
	seen := watchHostKeys(t, s)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "h1", PublicKey: testHostKey, Apps: []string{"a"}}))
		return seen.has("h1")()
	}, "h1 not seen")

	if err := j.DeleteKeyValue(ctx, "gatehouse_hostkeys"); err != nil {
		t.Fatal(err)
	}
	again := open(t, j, store.Options{})
	mustPut(t, again.PutHostKey(ctx, &route.HostKey{HostID: "h2", PublicKey: testHostKey, Apps: []string{"a"}}))
	testutil.WaitFor(t, 5*time.Second, seen.has("h2"), "an enrolment in the bucket made again was not reported")
	mustPut(t, again.DeleteHostKey(ctx, "h2"))
	testutil.WaitFor(t, 5*time.Second, func() bool { return seen.count("h2") >= 2 }, "a revocation in the bucket made again was not reported")
	if seen.has("old")() {
		t.Fatal("a key of the old bucket, written before the watch, was reported")
	}
}
