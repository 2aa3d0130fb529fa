package gatehouse

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
)

// A gateway started against a 3-node cluster with one node still down
// (restarting, or its meta leader just elected and not yet told of all
// peers) is refused its R3 buckets with "no suitable peers for
// placement". It waits, a bounded time, for the node: when the third
// node comes it starts and serves; with the third node never coming, it
// stops after the bound, saying what to check. It stopped at once on the
// first refusal.
func TestStartWaitsForPlacementPeers(t *testing.T) {
	t.Parallel() // mostly waiting on its own cluster; keeps the package short
	nodes := twoOfThreeNodes(t)

	// Bounded: the third node never comes within a short bound.
	logs := new(testutil.SyncBuffer)
	err := runPlacement(t, nodes, slog.New(slog.NewJSONHandler(logs, nil)), time.Second)
	if err == nil || !strings.Contains(err.Error(), "no suitable peers for placement") ||
		!strings.Contains(err.Error(), "nodes are up") || !strings.Contains(err.Error(), "at least 3 JetStream servers") {
		t.Fatalf("Run = %v, want the refusal and what to check (nodes up, at least 3 servers)", err)
	}
	if !strings.Contains(logs.String(), "waiting for the routing buckets (a NATS cluster node down or restarting?)") {
		t.Errorf("no wait logged before the start ended:\n%s", logs)
	}

	// The third node comes while the gateway waits.
	cfg := testConfig(t)
	cfg.Bus.URL = nodeURLs(nodes)
	logs = new(testutil.SyncBuffer)
	g, err := New(cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- g.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	testutil.WaitFor(t, 20*time.Second, func() bool {
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup's stop
			t.Fatalf("gateway stopped before the third node came: %v", err)
		default:
		}
		return strings.Contains(logs.String(), "no suitable peers for placement")
	}, "gateway not waiting for placement")
	nodes[2].start(t)
	select {
	case <-g.Ready():
	case err := <-r.done:
		r.done <- err
		t.Fatalf("gateway stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready 30s after the third node started")
	}
	if code, body := r.control(t, "PUT", "/api/v3/apps/late", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(strings.Join(tableApps(r, ""), ","), "late") }, "app not in the table")
}

// twoOfThreeNodes starts a 3-node JetStream cluster, stops it, starts two
// of its nodes again (nodes[2] is left for the test to start) and waits
// until the two, a quorum with a meta leader, refuse an R3 bucket for
// want of peers: the leader has not heard from the third.
func twoOfThreeNodes(t *testing.T) []*node {
	t.Helper()
	nodes := startNodes(t)
	for _, n := range nodes {
		n.stop()
	}
	for _, n := range nodes[:2] {
		n.start(t)
		if !n.ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %s not ready", n.opts.ServerName)
		}
	}
	js, err := jetstream.New(testutil.Connect(t, strings.Join(nodeURLs(nodes[:2]), ",")))
	if err != nil {
		t.Fatal(err)
	}
	var last error
	testutil.WaitFor(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, last = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "probe", Replicas: 3})
		if last == nil {
			t.Fatal("two nodes of three placed an R3 bucket")
		}
		var apiErr *jetstream.APIError
		return errors.As(last, &apiErr) && apiErr.ErrorCode == errCodeClusterNoPeers
	}, "two nodes never refused an R3 bucket for want of peers")
	t.Logf("two nodes of three: %v", last)
	return nodes
}

// runPlacement runs a gateway on nodes whose placement wait is bound and
// returns Run's error.
func runPlacement(t *testing.T, nodes []*node, log *slog.Logger, bound time.Duration) error {
	t.Helper()
	cfg := testConfig(t)
	cfg.Bus.URL = nodeURLs(nodes)
	g, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	g.placementWait = bound
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return g.Run(ctx)
}
