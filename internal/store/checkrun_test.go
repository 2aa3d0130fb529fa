package store

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
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
