package store

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// DomainsNaming answers from the table only once the table holds every
// change the bucket held when it was asked: a mapping whose change the
// follower has not applied yet is waited for, not missed (the control
// API's app DELETE relies on it, recheckAppRefs), and one the table lost
// makes it say it cannot answer, after catchUpWait, so that the caller
// lists the bucket.
func TestDomainsNamingWaitsForTheTable(t *testing.T) {
	t.Parallel()
	const held, lost = "held.customer.example", "lost.customer.example"
	release := make(chan struct{})
	var once sync.Once
	c := startChecked(t, time.Hour, func(bucket, key string, rev uint64) bool {
		switch key {
		case held:
			<-release // the follower is slow on this change, then applies it
		case lost:
			return true
		}
		return false
	})
	defer once.Do(func() { close(release) })
	ctx := t.Context()
	if err := c.s.PutDomain(ctx, &route.Domain{Domain: "other.customer.example", App: "kept", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	names, ok, err := c.s.DomainsNaming(ctx, "kept")
	if err != nil || !ok || !slices.Equal(names, []string{"other.customer.example"}) {
		t.Fatalf("DomainsNaming: %q, %v, %v; want the mapping just written", names, ok, err)
	}

	if err := c.s.PutDomain(ctx, &route.Domain{Domain: held, App: "kept", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		names []string
		ok    bool
		err   error
	}
	got := make(chan answer, 1)
	go func() {
		names, ok, err := c.s.DomainsNaming(ctx, "kept")
		got <- answer{names, ok, err}
	}()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		c.s.applied.mu.Lock()
		defer c.s.applied.mu.Unlock()
		return c.s.applied.waiting > 0
	}, "DomainsNaming never waited for the follower")
	once.Do(func() { close(release) })
	a := <-got
	slices.Sort(a.names)
	if a.err != nil || !a.ok || !slices.Equal(a.names, []string{held, "other.customer.example"}) {
		t.Fatalf("DomainsNaming: %q, %v, %v; want both mappings, once the follower applied the second", a.names, a.ok, a.err)
	}

	if err := c.s.PutDomain(ctx, &route.Domain{Domain: lost, App: "kept", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	names, ok, err = c.s.DomainsNaming(ctx, "kept")
	if err != nil || ok {
		t.Fatalf("DomainsNaming with a change lost: %q, %v, %v; want not ok", names, ok, err)
	}
	if d := time.Since(start); d < catchUpWait {
		t.Errorf("gave up after %s, before catchUpWait", d)
	}
}
