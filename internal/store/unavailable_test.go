package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
