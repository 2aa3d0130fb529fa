package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func TestUnavailable(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{store.ErrNotFound, false},
		{fmt.Errorf("store: put: %w", store.ErrBadValue), false},
		{errors.New("wrong last sequence"), false},
		{fmt.Errorf("store: get: %w", nats.ErrNoResponders), true},
		{fmt.Errorf("store: put: %w", jetstream.ErrNoStreamResponse), true},
		{fmt.Errorf("store: list: %w", context.DeadlineExceeded), true},
		{nats.ErrConnectionReconnecting, true},
		{fmt.Errorf("store: stream of gatehouse_apps has no leader: %w", store.ErrNoQuorum), true},
		// What nats.go's legacy JetStream layer (under a KV watch) says
		// for a stream without quorum.
		{fmt.Errorf("store: list: %w", &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{fmt.Errorf("store: put: %w", &nats.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}), false},
	} {
		if got := store.Unavailable(tt.err); got != tt.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// With the bus down, every call fails at once with an error the control
// API answers 503: it does not wait out JetStream's API timeout in
// nats.go's reconnect buffer first.
func TestBusDownFailsAtOnce(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "shop"}))
	ns.Shutdown()
	ns.WaitForShutdown()
	testutil.WaitFor(t, 10*time.Second, func() bool { return !nc.IsConnected() }, "the client never saw the bus go")

	for name, call := range map[string]func() error{
		"get":    func() error { _, err := s.GetApp(ctx, "shop"); return err },
		"list":   func() error { _, err := s.ListApps(ctx); return err },
		"put":    func() error { return s.PutApp(ctx, &route.App{ID: "cart"}) },
		"delete": func() error { return s.DeleteApp(ctx, "shop") },
		"update": func() error {
			return s.UpdateApp(ctx, "shop", func(a *route.App) (*route.App, error) { return a, nil })
		},
	} {
		err := call()
		if !errors.Is(err, nats.ErrDisconnected) || !store.Unavailable(err) {
			t.Errorf("%s with the bus down: %v, want a disconnected error at once", name, err)
		}
	}
}

// TestBusDownFailsAtOnceFollowing: while a routing table follows the
// store, the calls that take names from it (pages of apps and domains,
// DomainsNaming) fail at once with the bus down too, as the key lists
// they replace did, rather than wait in the reconnect buffer for a
// stream's state.
func TestBusDownFailsAtOnceFollowing(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "shop"}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "shop.example", App: "shop", Token: "t"}))
	run(t, s)
	ns.Shutdown()
	ns.WaitForShutdown()
	testutil.WaitFor(t, 10*time.Second, func() bool { return !nc.IsConnected() }, "the client never saw the bus go")

	for name, call := range map[string]func() error{
		"page apps":    func() error { _, _, err := s.PageApps(ctx, "", 10); return err },
		"page domains": func() error { _, _, err := s.PageDomains(ctx, "", 10); return err },
		"domains naming": func() error {
			_, _, err := s.DomainsNaming(ctx, "shop")
			return err
		},
	} {
		start := time.Now()
		err := call()
		if !errors.Is(err, nats.ErrDisconnected) || !store.Unavailable(err) {
			t.Errorf("%s with the bus down: %v after %s, want a disconnected error at once", name, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

// On a node of a 3-node cluster whose other two nodes are gone (no
// quorum), every call either answers (a read a replica can serve) or
// fails with an error the control API answers 503 with Retry-After, not
// 500: the list calls, which watch the bucket, got JetStream's "system
// temporarily unavailable" in nats.go's legacy error type, which
// Unavailable did not know.
func TestNoQuorumIsUnavailable(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	j, _ := js(t, servers[2].ClientURL())
	s := open(t, j, store.Options{Replicas: 3})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "shop"}))
	mustPut(t, s.PutRecord(ctx, &route.Record{Zone: "z.test", Name: "www", Type: "TXT", Values: []string{"x"}}))
	for _, ns := range servers[:2] {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	// Until the node knows it is alone, calls wait out their timeout
	// (also 503); then they fail at once, which is what is tested.
	testutil.WaitFor(t, 25*time.Second, func() bool {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		_, err := s.ListApps(c)
		t.Logf("list: %v after %s", err, time.Since(began).Round(time.Millisecond))
		return err != nil && !errors.Is(err, context.DeadlineExceeded)
	}, "the lone node never said it has no quorum")

	for _, tt := range []struct {
		name string
		call func(context.Context) error
	}{
		{"get", func(c context.Context) error { _, err := s.GetApp(c, "shop"); return err }},
		{"list apps", func(c context.Context) error { _, err := s.ListApps(c); return err }},
		{"list zones", func(c context.Context) error { _, err := s.ListZones(c); return err }},
		{"list records", func(c context.Context) error { _, err := s.ListRecords(c, "z.test"); return err }},
		{"put", func(c context.Context) error { return s.PutApp(c, &route.App{ID: "cart"}) }},
		{"delete", func(c context.Context) error { return s.DeleteApp(c, "shop") }},
	} {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := tt.call(c)
		cancel()
		if err != nil && !store.Unavailable(err) {
			t.Errorf("%s without quorum: %v, want an error the API answers 503", tt.name, err)
		}
	}
}

// A compare-and-set update (the control API's If-Match writes, a
// domain's verify) on the one node left of three, when that node leads
// the bucket: it took a write it cannot commit, and refuses every
// compare-and-set after it ("wrong last sequence") while reads still
// show the revision before. The update gave up after 50 tries with an
// error the API answered 500; the store cannot take the write now, and
// it is 503 with Retry-After.
func TestNoQuorumUpdateIsUnavailable(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	j, _ := js(t, testutil.ClusterURLs(servers))
	s := open(t, j, store.Options{Replicas: 3})
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "shop"}))
	var lone *server.Server
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, ns := range servers {
			if ns.JetStreamIsStreamLeader("$G", "KV_gatehouse_apps") {
				lone = ns
				return true
			}
		}
		return false
	}, "apps bucket has no leader")
	j, _ = js(t, lone.ClientURL())
	s = open(t, j, store.Options{Replicas: 3})
	for _, ns := range servers {
		if ns != lone {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}
	for _, tt := range []struct {
		name string
		call func(context.Context) error
	}{
		{"put", func(c context.Context) error {
			return s.PutApp(c, &route.App{ID: "shop", Status: route.StatusSuspended})
		}},
		{"update", func(c context.Context) error {
			return s.UpdateApp(c, "shop", func(a *route.App) (*route.App, error) { return a, nil })
		}},
	} {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		began := time.Now()
		err := tt.call(c)
		cancel()
		t.Logf("%s: %v after %s", tt.name, err, time.Since(began).Round(time.Millisecond))
		if err == nil || !store.Unavailable(err) {
			t.Errorf("%s without quorum: %v, want an error the API answers 503", tt.name, err)
		}
	}
}

// Probe passes on a server that serves the buckets (a single server is
// its own quorum) and fails, Unavailable, once the bus is gone.
func TestProbe(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	if err := s.Probe(t.Context()); err != nil {
		t.Fatalf("Probe on a healthy bus = %v", err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	testutil.WaitFor(t, 10*time.Second, func() bool { return !nc.IsConnected() }, "the client never saw the bus go")
	if err := s.Probe(t.Context()); !store.Unavailable(err) {
		t.Fatalf("Probe with the bus down = %v, want an Unavailable error", err)
	}
}
