package store

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
)

// checked is a gateway's store under test: the reasons of its full
// loads (Options.OnResync) and its log, counted.
type checked struct {
	s    *Store
	js   jetstream.JetStream
	live *route.Live

	mu      sync.Mutex
	reasons []string
	msgs    []string // level, message and attributes of each record
}

func (c *checked) Enabled(context.Context, slog.Level) bool { return true }
func (c *checked) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *checked) WithGroup(string) slog.Handler            { return c }
func (c *checked) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	c.msgs = append(c.msgs, b.String())
	return nil
}

func (c *checked) logged(sub string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

func (c *checked) logs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func (c *checked) loads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reasons)
}

// startChecked opens a store that checks every resync and never
// reloads on its own interval, with lose as its test hook, and runs it
// until t ends.
func startChecked(t *testing.T, resync time.Duration, lose func(bucket, key string, rev uint64) bool) *checked {
	t.Helper()
	return startHooked(t, resync, func(s *Store) { s.lose = lose })
}

// startHooked is startChecked with hook setting the store's test hooks
// before it runs.
func startHooked(t *testing.T, resync time.Duration, hook func(*Store)) *checked {
	t.Helper()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	c := newChecked(t, js, resync)
	hook(c.s)
	ctx := t.Context()
	if err := c.s.PutZone(ctx, &route.Zone{Name: "z.test"}); err != nil {
		t.Fatal(err)
	}
	if err := c.s.PutApp(ctx, &route.App{ID: "kept"}); err != nil {
		t.Fatal(err)
	}
	c.run(t)
	return c
}

// newChecked opens a store on js that checks every resync, never
// reloads on its own interval, and records each reload's reason.
func newChecked(t *testing.T, js jetstream.JetStream, resync time.Duration) *checked {
	t.Helper()
	c := &checked{js: js, live: new(route.Live)}
	var err error
	c.s, err = Open(t.Context(), js, Options{Resync: resync, FullResync: time.Hour, Logger: slog.New(c),
		OnResync: func(reason string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.reasons = append(c.reasons, reason)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs c's store into c.live until t ends, and returns once the
// app "kept", which the caller stored, is in the table.
func (c *checked) run(t *testing.T) {
	t.Helper()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.s.Run(runCtx, route.NewBuilder(c.live)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testutil.WaitFor(t, 20*time.Second, func() bool { return c.live.Load().App("kept") != nil }, "the store never loaded")
}

// A table that missed a change, or holds what the store no longer does,
// is reloaded by the next check (the full interval is an hour here),
// which says why.
func TestCheckRepairsTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// lost is the app whose changes the gateway loses, once loaded.
		lost string
		// change writes the change, around the gateway or not.
		change func(t *testing.T, c *checked)
		// repaired says whether tbl shows the change.
		repaired func(tbl *route.Table) bool
		reason   string
	}{{
		name: "a new app lost, a later change seen",
		lost: "lost",
		change: func(t *testing.T, c *checked) {
			mustNil(t, c.s.PutApp(t.Context(), &route.App{ID: "lost"}))
			mustNil(t, c.s.PutApp(t.Context(), &route.App{ID: "after"}))
			testutil.WaitFor(t, 5*time.Second, func() bool { return c.live.Load().App("after") != nil }, "the later change never arrived")
		},
		repaired: func(tbl *route.Table) bool { return tbl.App("lost") != nil },
		reason:   reasonKeys,
	}, {
		name: "the last change lost: the watch stalls",
		lost: "kept",
		change: func(t *testing.T, c *checked) {
			mustNil(t, c.s.PutApp(t.Context(), &route.App{ID: "kept", Status: route.StatusSuspended}))
		},
		repaired: func(tbl *route.Table) bool {
			a := tbl.App("kept")
			return a != nil && a.Status == route.StatusSuspended
		},
		reason: reasonStalled,
	}, {
		name: "a live key's message removed around the store",
		change: func(t *testing.T, c *checked) {
			st, err := c.js.Stream(t.Context(), "KV_"+bucketApps)
			mustNil(t, err)
			mustNil(t, st.Purge(t.Context(), jetstream.WithPurgeSubject("$KV."+bucketApps+".kept")))
		},
		repaired: func(tbl *route.Table) bool { return tbl.App("kept") == nil },
		reason:   reasonKeys,
	}, {
		// Nothing is missing here, but a count cannot tell a swept marker
		// from a live key's message removed: the check reloads.
		name: "a delete marker swept",
		change: func(t *testing.T, c *checked) {
			mustNil(t, c.s.PutApp(t.Context(), &route.App{ID: "gone"}))
			mustNil(t, c.s.DeleteApp(t.Context(), "gone"))
			n, err := c.s.sweepBucket(t.Context(), bucketApps, time.Now().Add(time.Hour), nil)
			mustNil(t, err)
			if n != 1 {
				t.Fatalf("swept %d markers, want 1", n)
			}
		},
		repaired: func(tbl *route.Table) bool { return tbl.App("gone") == nil && tbl.App("kept") != nil },
		reason:   reasonSwept,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var lost atomic.Value
			lost.Store("")
			c := startChecked(t, 100*time.Millisecond, func(bucket, key string, _ uint64) bool {
				return bucket == bucketApps && key == lost.Load()
			})
			lost.Store(tc.lost)
			tc.change(t, c)
			testutil.WaitFor(t, 10*time.Second, func() bool { return slices.Contains(c.loads(), tc.reason) }, "no reload for "+tc.reason)
			testutil.WaitFor(t, 5*time.Second, func() bool { return tc.repaired(c.live.Load()) }, "the table was never repaired")
			if got := c.loads(); got[0] != reasonStart || slices.Contains(got, reasonInterval) {
				t.Fatalf("full loads %v", got)
			}
		})
	}
}

// A table that follows every change is checked against the store, and
// never reloaded (the full interval is an hour here): the table a
// request reads stays the one published by the last change.
func TestSteadyTableNotReloaded(t *testing.T) {
	t.Parallel()
	c := startChecked(t, 20*time.Millisecond, nil)
	ctx := t.Context()
	mustNil(t, c.s.PutDomain(ctx, &route.Domain{Domain: "kept.example.com", App: "kept"}))
	mustNil(t, c.s.PutRecord(ctx, &route.Record{Zone: "z.test", Name: "www", Type: "A", Values: []string{"192.0.2.1"}}))
	mustNil(t, c.s.PutApp(ctx, &route.App{ID: "gone"}))
	mustNil(t, c.s.DeleteApp(ctx, "gone")) // a marker stays: a known key
	for i := range 50 {
		// Changes in flight at a check are not a difference.
		mustNil(t, c.s.PutApp(ctx, &route.App{ID: "busy", RateLimit: route.RateLimit{Requests: i + 1}}))
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		a := c.live.Load().App("busy")
		return a != nil && a.RateLimit.Requests == 50 && c.live.Load().App("gone") == nil
	}, "the changes never arrived")
	tbl := c.live.Load()
	before := c.logged("the table matches the store")
	testutil.WaitFor(t, 10*time.Second, func() bool { return c.logged("the table matches the store") >= before+5 }, "no check passed")
	if got := c.loads(); !slices.Equal(got, []string{reasonStart}) {
		t.Fatalf("full loads %v, want the first only", got)
	}
	if c.live.Load() != tbl {
		t.Fatal("the table was published again with no change in the store")
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A routing bucket made by another tool with more history than the
// store asks for (Open keeps an existing bucket as it is) holds several
// messages per key: a table that follows every change is still not
// reloaded by the check.
func TestCheckBucketWithHistory(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	mustNil(t, err)
	_, err = js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: bucketApps, History: 5, Storage: jetstream.FileStorage})
	mustNil(t, err)
	c := newChecked(t, js, 20*time.Millisecond)
	ctx := t.Context()
	mustNil(t, c.s.PutApp(ctx, &route.App{ID: "kept"}))
	mustNil(t, c.s.PutApp(ctx, &route.App{ID: "kept", RateLimit: route.RateLimit{Requests: 1}}))
	c.run(t)
	mustNil(t, c.s.PutApp(ctx, &route.App{ID: "kept", RateLimit: route.RateLimit{Requests: 2}}))
	mustNil(t, c.s.PutApp(ctx, &route.App{ID: "gone"}))
	mustNil(t, c.s.DeleteApp(ctx, "gone"))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		a := c.live.Load().App("kept")
		return a != nil && a.RateLimit.Requests == 2
	}, "the change never arrived")
	before := c.logged("the table matches the store")
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return c.logged("the table matches the store") >= before+5 || len(c.loads()) > 3
	}, "no check passed")
	if got := c.loads(); !slices.Equal(got, []string{reasonStart}) {
		t.Fatalf("full loads %v, want the first only", got)
	}
}
