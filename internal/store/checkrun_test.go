package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
)

// While a check waits on JetStream (a stream leader election, a slow
// server), changes are still applied: the table does not stall behind
// the check. The first check is held (the checking hook, as a real
// server cannot be made slow on these requests alone) until the test
// lets it go; the change must be in the table while it is still held.
func TestChangesFlowWhileCheckHeld(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})    // closed once the first check is held
	release := make(chan struct{}) // closed to let it go
	var holding atomic.Bool
	var calls atomic.Int32 // checks that reached the apps bucket
	c := startHooked(t, 20*time.Millisecond, func(s *Store) {
		s.checking = func(ctx context.Context, bucket string) error {
			if bucket != bucketApps || calls.Add(1) > 1 {
				return nil
			}
			holding.Store(true)
			defer holding.Store(false)
			close(held)
			select {
			case <-release:
				return nil
			case <-ctx.Done(): // the check's timeout, or Run ended
				return ctx.Err()
			}
		}
	})
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no check started")
	}
	mustNil(t, c.s.PutApp(t.Context(), &route.App{ID: "during"}))
	testutil.WaitFor(t, 10*time.Second, func() bool { return c.live.Load().App("during") != nil }, "the change never arrived")
	if !holding.Load() {
		t.Fatal("the change was applied only once the held check let go")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d checks reached the apps bucket while the first was held, want 1", n)
	}
	close(release)
	// The held check saw the apps stream ahead of what it snapshotted
	// (the change came after): behind, not a difference. A later one
	// finds the table matching.
	before := c.logged("the table matches the store")
	testutil.WaitFor(t, 10*time.Second, func() bool { return c.logged("the table matches the store") > before }, "no check passed after the held one")
	if got := c.loads(); !slices.Equal(got, []string{reasonStart}) {
		t.Fatalf("full loads %v, want the first only", got)
	}
}

// A check that fails (no responders, a timeout) is logged and tried
// again; it neither ends the watch nor reloads the table, and changes
// keep being applied.
func TestFailedCheckDoesNotReload(t *testing.T) {
	t.Parallel()
	failed := make(chan struct{}) // closed once the first check failed
	var calls atomic.Int32
	c := startHooked(t, 20*time.Millisecond, func(s *Store) {
		s.checking = func(_ context.Context, bucket string) error {
			if bucket != bucketApps || calls.Add(1) > 1 {
				return nil
			}
			defer close(failed)
			return fmt.Errorf("test: %w", nats.ErrNoResponders)
		}
	})
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("no check started")
	}
	mustNil(t, c.s.PutApp(t.Context(), &route.App{ID: "after"}))
	testutil.WaitFor(t, 10*time.Second, func() bool { return c.live.Load().App("after") != nil }, "the change never arrived")
	before := c.logged("the table matches the store")
	testutil.WaitFor(t, 10*time.Second, func() bool { return c.logged("the table matches the store") > before }, "no check passed after the failed one")
	if got := c.loads(); !slices.Equal(got, []string{reasonStart}) {
		t.Fatalf("full loads %v, want the first only", got)
	}
	if c.logged("WARN store: a check of the table failed") != 1 || c.logged(nats.ErrNoResponders.Error()) != 1 {
		t.Fatalf("the failed check was not logged once as a warning with its error: %q", c.logs())
	}
}

// Checks that keep failing for a whole Resync end the watch: the
// gateway keeps its table and reloads once a load succeeds ("retry"),
// having logged each failure before.
func TestChecksFailingForAResyncReload(t *testing.T) {
	t.Parallel()
	const resync = 20 * time.Millisecond
	c := startHooked(t, resync, func(s *Store) {
		s.checking = func(_ context.Context, bucket string) error {
			return fmt.Errorf("test: %w", nats.ErrNoResponders)
		}
	})
	testutil.WaitFor(t, 10*time.Second, func() bool { return slices.Contains(c.loads(), reasonRetry) }, "failing checks never ended the watch")
	logs := c.logs()
	end := slices.IndexFunc(logs, func(m string) bool { return strings.Contains(m, "store watch failed; keeping the last table") })
	if end < 0 {
		t.Fatalf("the ended watch was not logged: %q", logs)
	}
	warned := 0
	for _, m := range logs[:end] {
		if strings.Contains(m, "WARN store: a check of the table failed") {
			warned++
		}
	}
	if want := checkFailures(resync) - 1; warned != want {
		t.Fatalf("%d failed checks logged before the watch ended, want %d: %q", warned, want, logs[:end+1])
	}
}
