package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A gateway with an external bus (-bus nats://...) against a separately
// started server, next to a gateway on its own embedded bus that the
// first one's hosts would reach: both see the same state.
func TestExternalBus(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	b, err := bus.New(bus.Options{URL: ns.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := open(t, b.JetStream(), store.Options{})
	g := run(t, s)
	other := open(t, mustJS(t, ns.ClientURL()), store.Options{})
	mustPut(t, other.PutZone(t.Context(), &route.Zone{Name: "ext.test"}))
	mustPut(t, other.PutApp(t.Context(), &route.App{ID: "a"}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("a.ext.test", "a") }, "external-bus gateway did not see the app")
}

func mustJS(t *testing.T, url string) (j jetstream.JetStream) {
	j, _ = js(t, url)
	return j
}

// NATS goes away: the table stays as it was through failed resyncs, and
// when NATS is back, changes flow again.
func TestNATSDownKeepsTable(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	dir := t.TempDir()
	srv := startBusAt(t, addr, dir)
	var logs logCount
	// No reconnect buffer: while NATS is down, requests fail at once
	// instead of waiting out their timeout, so the test sees failed
	// resyncs quickly. The store's behaviour is the same either way.
	j, _ := js(t, gatewayURL(t, dir, addr), nats.ReconnectBufSize(-1))
	s := open(t, j, store.Options{Resync: 50 * time.Millisecond, Logger: slogger(&logs)})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "kept"}))
	g := run(t, s)
	if !g.routes("kept.z.test", "kept") {
		t.Fatal("app not loaded")
	}

	srv.Close()
	testutil.WaitFor(t, 10*time.Second, func() bool { return logs.count("keeping the last table") >= 2 }, "no failed resyncs logged")
	if !g.routes("kept.z.test", "kept") {
		t.Fatal("table lost the app while NATS was down")
	}
	if got := g.live.Load().Zone("z.test"); got == nil {
		t.Fatal("table lost the zone while NATS was down")
	}

	srv = startBusAt(t, addr, dir)
	defer srv.Close()
	s2 := open(t, srv.JetStream(), store.Options{})
	mustPut(t, s2.PutApp(ctx, &route.App{ID: "after"}))
	testutil.WaitFor(t, 10*time.Second, func() bool { return g.routes("after.z.test", "after") }, "changes do not flow after NATS came back")
	if !g.routes("kept.z.test", "kept") {
		t.Fatal("lost the app after recovery")
	}
}

// A 3-node JetStream cluster with R3 buckets: one node stops; puts still
// succeed and a gateway connected to a surviving node still sees them.
func TestClusterNodeLoss(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	writerJS, _ := js(t, testutil.ClusterURLs(servers))
	open(t, writerJS, store.Options{}) // creates every bucket with one replica
	writer := open(t, writerJS, store.Options{Replicas: 3})
	// A later open asking for fewer never lowers them (an operator's R5
	// survives restarts).
	open(t, writerJS, store.Options{Replicas: 1})
	for _, name := range []string{"gatehouse_apps", "gatehouse_certs", "gatehouse_locks"} {
		kv, err := writerJS.KeyValue(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if c := st.Config(); c.Replicas != 3 || (name == "gatehouse_locks" && c.LimitMarkerTTL == 0) || (name == "gatehouse_apps" && c.RePublish == nil) {
			t.Fatalf("%s after rescale: replicas %d, marker ttl %s, republish %v", name, c.Replicas, c.LimitMarkerTTL, c.RePublish)
		}
	}
	// A bucket just scaled from R1 to R3 survives a node loss only once its
	// new replicas have caught up; before that the old leader holds the only
	// copy. Wait for both followers to be current, as an operator would.
	testutil.WaitFor(t, 20*time.Second, func() bool {
		s, err := writerJS.Stream(t.Context(), "KV_gatehouse_apps")
		if err != nil {
			return false
		}
		info, err := s.Info(t.Context())
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current {
				return false
			}
		}
		return true
	}, "apps bucket replicas never caught up")
	// The hard case: the node that leads the apps bucket goes away. The
	// watching gateway is connected to another node.
	var victim *server.Server
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, ns := range servers {
			if ns.JetStreamIsStreamLeader("$G", "KV_gatehouse_apps") {
				victim = ns
			}
		}
		return victim != nil
	}, "apps bucket has no leader")
	watchNode := servers[0]
	if watchNode == victim {
		watchNode = servers[1]
	}
	watcherJS, _ := js(t, watchNode.ClientURL())
	watcher := open(t, watcherJS, store.Options{Replicas: 3})
	ctx := t.Context()
	mustPut(t, writer.PutZone(ctx, &route.Zone{Name: "c.test"}))
	g := run(t, watcher)
	mustPut(t, writer.PutApp(ctx, &route.App{ID: "before"}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("before.c.test", "before") }, "watcher missed a change before the loss")

	t.Logf("stopping %s, the apps bucket leader; watching from %s", victim.Name(), watchNode.Name())
	victim.Shutdown()
	victim.WaitForShutdown()

	start := time.Now()
	testutil.WaitFor(t, 20*time.Second, func() bool {
		return writer.PutApp(ctx, &route.App{ID: "during"}) == nil
	}, "puts fail after one node of three stopped")
	t.Logf("first put after the loss succeeded after %s", time.Since(start).Round(time.Millisecond))
	testutil.WaitFor(t, 20*time.Second, func() bool { return g.routes("during.c.test", "during") }, "watcher on a surviving node missed a change")
	t.Logf("change seen after %s", time.Since(start).Round(time.Millisecond))

	for i := range 3 {
		id := fmt.Sprintf("next%d", i)
		mustPut(t, writer.PutApp(ctx, &route.App{ID: id}))
		testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes(id+".c.test", id) }, "watcher missed a change after the loss")
	}
	mustPut(t, writer.DeleteApp(ctx, "before"))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.live.Load().App("before") == nil }, "delete not seen after the loss")
}

func startBusAt(t *testing.T, addr, dir string) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Options{Listen: addr, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

// gatewayURL is how another gateway reaches the embedded bus at addr whose
// data directory is dir: with the gateway credential kept there.
func gatewayURL(t *testing.T, dir, addr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, bus.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return "nats://" + bus.GatewayUser + ":" + strings.TrimSpace(string(b)) + "@" + addr
}

// The watchers outlive the initial load: a session keeps following
// changes well past the load timeout instead of failing and reloading.
// (They were once created under the load's deadline, and closed by it.)
func TestWatchersOutliveLoadTimeout(t *testing.T) {
	srv := testutil.StartBus(t)
	j, _ := js(t, srv.ClientURL())
	logs := &logCount{}
	st, err := store.Open(t.Context(), j, store.Options{LoadTimeout: 300 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	var live route.Live
	b := route.NewBuilder(&live)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx, b) }()
	defer func() { cancel(); <-done }()
	<-b.Loaded()
	// A slow first load (a busy machine) may have failed and been retried
	// before it succeeded; only failures after it count.
	before := logs.count("watch")
	for i := range 4 {
		// Each put comes after one more load timeout has passed.
		time.Sleep(400 * time.Millisecond) // waiting out a deadline is the point here
		id := fmt.Sprintf("app%d", i)
		if err := st.PutApp(t.Context(), &route.App{ID: id}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 5*time.Second, func() bool { return live.Load().App(id) != nil }, id+" not applied")
	}
	if n := logs.count("watch") - before; n != 0 {
		t.Fatalf("the session failed %d times after its load: %v", n, logs.msgs)
	}
}

// A routing bucket deleted under a running gateway (an operator's slip
// with the nats CLI): the table keeps what it had, as with NATS down,
// the failed resyncs are logged, and a write there fails with an error
// instead of appearing to succeed. The next Open creates the bucket
// again, and the gateway routes what is then stored.
func TestBucketDeletedKeepsTable(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	var logs logCount
	j := mustJS(t, ns.ClientURL())
	s := open(t, j, store.Options{Resync: 50 * time.Millisecond, Logger: slogger(&logs)})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "kept"}))
	g := run(t, s)
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("kept.z.test", "kept") }, "app not loaded")

	if err := j.DeleteKeyValue(ctx, "gatehouse_apps"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return logs.count("keeping the last table") >= 2 }, "no failed resyncs logged")
	if !g.routes("kept.z.test", "kept") {
		t.Fatal("table lost the app when its bucket was deleted")
	}
	if err := s.PutApp(ctx, &route.App{ID: "late"}); err == nil {
		t.Fatal("a write to the deleted bucket succeeded")
	}

	again := open(t, j, store.Options{})
	mustPut(t, again.PutApp(ctx, &route.App{ID: "new"}))
	g2 := run(t, again)
	testutil.WaitFor(t, 5*time.Second, func() bool { return g2.routes("new.z.test", "new") }, "a reopened store does not route")
	if g2.routes("kept.z.test", "kept") {
		t.Fatal("a reopened store routes an app its deleted bucket held")
	}
}

// A routing bucket deleted and made again while a gateway watches it
// (another gateway's Open made it again): the running gateway's table
// converges on the new bucket without a restart, and follows its later
// writes. The new bucket holds the same keys at the same revisions as
// the old one, with other values: the follower skips them all (it has
// applied those revisions), and no count differs; the check finds the
// stream's new creation time.
func TestBucketMadeAgainWhileWatched(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j := mustJS(t, ns.ClientURL())
	s := open(t, j, store.Options{Resync: 100 * time.Millisecond})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	ids := []string{"a1", "a2", "a3"}
	for _, id := range ids {
		mustPut(t, s.PutApp(ctx, &route.App{ID: id, Status: route.StatusActive}))
	}
	g := run(t, s)
	if err := j.DeleteKeyValue(ctx, "gatehouse_apps"); err != nil {
		t.Fatal(err)
	}
	again := open(t, j, store.Options{})
	for _, id := range ids {
		mustPut(t, again.PutApp(ctx, &route.App{ID: id, Status: route.StatusSuspended}))
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, id := range ids {
			if a := g.live.Load().App(id); a == nil || a.Status != route.StatusSuspended {
				return false
			}
		}
		return true
	}, "the running gateway did not converge on the bucket made again")
	mustPut(t, again.PutApp(ctx, &route.App{ID: "new"}))
	mustPut(t, again.DeleteApp(ctx, "a1"))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return g.routes("new.z.test", "new") && g.live.Load().App("a1") == nil
	}, "writes to the bucket made again not followed")
}

// The gateway's connection cut (the server closes it) while another
// writes: once it reconnects, the changes made meanwhile are in its
// table.
func TestChangesWhileDisconnectedApplied(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	// Reconnecting after a second leaves room for the writes below.
	j, nc := js(t, ns.ClientURL(), nats.ReconnectWait(time.Second))
	s := open(t, j, store.Options{})
	w := open(t, mustJS(t, ns.ClientURL()), store.Options{})
	ctx := t.Context()
	mustPut(t, w.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, w.PutApp(ctx, &route.App{ID: "gone"}))
	mustPut(t, w.PutApp(ctx, &route.App{ID: "changed", Status: route.StatusSuspended}))
	g := run(t, s)
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	mustPut(t, w.PutApp(ctx, &route.App{ID: "new"}))
	mustPut(t, w.DeleteApp(ctx, "gone"))
	mustPut(t, w.PutApp(ctx, &route.App{ID: "changed", Status: route.StatusActive}))
	testutil.WaitFor(t, 10*time.Second, func() bool {
		a := g.live.Load().App("changed")
		return g.routes("new.z.test", "new") && !g.routes("gone.z.test", "gone") && a != nil && a.Status == route.StatusActive
	}, "changes made while the gateway was cut off are not in its table")
}

// Quick writes to one key from gateways on three nodes of a cluster:
// every gateway's table ends with the last write, whichever copy of each
// change (watch or republished, from any node) came first.
func TestQuickWritesEndWithTheLast(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	ss := make([]*store.Store, len(servers))
	for i, srv := range servers {
		ss[i] = open(t, mustJS(t, srv.ClientURL()), store.Options{Replicas: 3})
	}
	ctx := t.Context()
	mustPut(t, ss[0].PutZone(ctx, &route.Zone{Name: "z.test"}))
	gs := make([]*gateway, len(ss))
	for i, s := range ss {
		gs[i] = run(t, s)
	}
	for n := range 30 {
		mustPut(t, ss[n%3].PutApp(ctx, &route.App{ID: "a", Status: route.StatusSuspended}))
		if n%2 == 0 {
			mustPut(t, ss[(n+1)%3].DeleteApp(ctx, "a"))
		}
		mustPut(t, ss[(n+2)%3].PutApp(ctx, &route.App{ID: "a", Status: route.StatusActive}))
	}
	for i, g := range gs {
		testutil.WaitFor(t, 5*time.Second, func() bool {
			a := g.live.Load().App("a")
			return a != nil && a.Status == route.StatusActive
		}, fmt.Sprintf("gateway %d does not end with the last write", i))
	}
}

// A copy of a change published under gatehouse._store.> by someone with
// the bus's rights, not by the server, with a revision the bucket has not
// reached: the follower applies it and then skips every real change to
// that key below that revision. The table then served the forged value
// over every later write through the API, on every gateway, while the
// checks (which compared only the watch's sequence and the key counts)
// found it matching, until the full load 10 min on. A check now finds a
// revision applied past the stream's last sequence, and reloads.
func TestCheckFindsARevisionTheStreamHasNot(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	var reasons sync.Map
	s := open(t, j, store.Options{Resync: 100 * time.Millisecond,
		OnResync: func(r string) { reasons.Store(r, true) }})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a", Status: route.StatusActive}))
	g := run(t, s)

	m := nats.NewMsg("gatehouse._store.gatehouse_apps.a")
	m.Header.Set(jetstream.SequenceHeader, "1000000")
	m.Data = []byte(`{"id":"a","status":"suspended"}`)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		a := g.live.Load().App("a")
		return a != nil && a.Status == route.StatusSuspended
	}, "the forged copy was not applied")
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a", Status: route.StatusActive}))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		a := g.live.Load().App("a")
		return a != nil && a.Status == route.StatusActive
	}, "the table keeps a forged revision over the store's value")
	// The reload replaces the table before it reports its reason
	// (session: Replace, then OnResync): waited for, not read at once.
	testutil.WaitFor(t, 5*time.Second, func() bool {
		_, ok := reasons.Load("recreated")
		return ok
	}, "no reload for a revision past the stream's last sequence")
}
