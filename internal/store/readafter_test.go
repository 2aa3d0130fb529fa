package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeBuckets are the store's buckets, as Open names them.
var storeBuckets = []string{"gatehouse_apps", "gatehouse_domains", "gatehouse_zones", "gatehouse_records",
	"gatehouse_hostkeys", "gatehouse_certs", "gatehouse_locks"}

// follower returns a server of servers that does not lead the apps
// bucket's stream: a read a replica answers from there is the likeliest
// to be behind the write just acknowledged.
func follower(t *testing.T, servers []*server.Server) *server.Server {
	t.Helper()
	var f *server.Server
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for i, ns := range servers {
			if ns.JetStreamIsStreamLeader("$G", "KV_gatehouse_apps") {
				f = servers[(i+1)%len(servers)]
				return true
			}
		}
		return false
	}, "apps bucket has no leader")
	return f
}

// readsAfterWrites puts n apps, each a new key, and gets each at once,
// as the control API checks an app a host enrolment names right after
// the PUT that made it. It returns the Gets that did not find the app
// just written, with the first of them. Bounded by n and by 30 s.
func readsAfterWrites(t *testing.T, s *store.Store, prefix string, n int) (misses, done int, first error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		if err := s.PutApp(ctx, &route.App{ID: id, Status: route.StatusSuspended}); err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("put %s: %v", id, err)
		}
		a, err := s.GetApp(ctx, id)
		if ctx.Err() != nil {
			break
		}
		done++
		if err == nil && a.Status != route.StatusSuspended {
			err = fmt.Errorf("app %s: status %q, want %q", id, a.Status, route.StatusSuspended)
		}
		if err != nil {
			misses++
			if first == nil {
				first = err
			}
		}
	}
	return misses, done, first
}

// Reads right after the write acknowledged before them see it, on a
// 3-node cluster with the replicas a gateway uses there (R3): gets and
// lists. One cluster for both: its start is most of their time.
func TestReadsSeeWritesOnCluster(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	j, _ := js(t, testutil.ClusterURLs(servers))
	open(t, j, store.Options{Replicas: 3})
	t.Run("get", func(t *testing.T) { getSeesPutOnCluster(t, servers) })
	t.Run("list", func(t *testing.T) { listSeesWriteOnCluster(t, servers) })
}

// A Get right after the Put that was acknowledged finds what it wrote,
// on servers (TestReadsSeeWritesOnCluster), through a node that does not
// lead the bucket. JetStream KV buckets answered Gets from any replica
// (direct gets), one of which may not have applied the write yet: the
// control API answered 404 for an app just made, and refused a host
// enrolment naming it.
func getSeesPutOnCluster(t *testing.T, servers []*server.Server) {
	j, _ := js(t, follower(t, servers).ClientURL())
	s := open(t, j, store.Options{Replicas: 3})
	const n = 300
	misses, done, first := readsAfterWrites(t, s, "app", n)
	if done < n/3 {
		t.Fatalf("only %d of %d put-then-get rounds in 30 s", done, n)
	}
	if misses > 0 {
		t.Errorf("%d of %d gets right after their put did not see it; the first: %v", misses, done, first)
	}
}

// A rolling upgrade: buckets made by an older gatehouse (nats.go's
// defaults, direct gets on) and a gateway of that release still running,
// its handles bound with direct gets, while a new gateway opens the
// store. Open leaves the buckets' direct gets on, so the old gateway's
// reads keep being answered (a stream without them has no one on the
// direct get subjects: "no responders", until that gateway restarts) and
// see what the new one writes, and the new one reads its own writes back.
func TestOpenLeavesDirectGetsOn(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	j, _ := js(t, testutil.ClusterURLs(servers))
	ctx := t.Context()
	var oldApps jetstream.KeyValue
	for _, b := range storeBuckets {
		cfg := jetstream.KeyValueConfig{Bucket: b, History: 1, Replicas: 3, Storage: jetstream.FileStorage}
		if b == "gatehouse_locks" {
			cfg.LimitMarkerTTL = time.Minute
		}
		kv, err := j.CreateKeyValue(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if b == "gatehouse_apps" {
			oldApps = kv
		}
	}
	jn, _ := js(t, follower(t, servers).ClientURL())
	s := open(t, jn, store.Options{Replicas: 3})
	for _, b := range storeBuckets {
		st, err := j.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if !st.CachedInfo().Config.AllowDirect {
			t.Errorf("bucket %s: direct gets turned off by Open", b)
		}
	}

	mustPut(t, s.PutApp(ctx, &route.App{ID: "new"}))
	// The old gateway's handle, bound with direct gets, may be answered
	// by a replica a moment behind: it sees the app within a few seconds,
	// as before the upgrade.
	var lastErr error
	if !testutil.Eventually(10*time.Second, func() bool {
		_, lastErr = oldApps.Get(ctx, "new")
		return lastErr == nil
	}) {
		t.Errorf("the old gateway's handle never read the app the new one put: %v", lastErr)
	}
	if misses, done, first := readsAfterWrites(t, s, "up", 50); misses > 0 {
		t.Errorf("%d of %d gets right after their put did not see it; the first: %v", misses, done, first)
	}
}

// The store's reads go to the JetStream API its JetStream was made for:
// one given its prefix without the trailing dot (nats.go adds it) reads
// what it wrote, and a missing key is still a 404's ErrNotFound.
func TestGetsUseTheAPIPrefix(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	j, err := jetstream.NewWithAPIPrefix(nc, "$JS.API")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, j, store.Options{})
	if misses, done, first := readsAfterWrites(t, s, "p", 5); misses > 0 {
		t.Errorf("%d of %d gets after their put missed: %v", misses, done, first)
	}
	if _, err := s.GetApp(t.Context(), "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of a missing app: %v, want ErrNotFound", err)
	}
}

// Every read of the store that must see the writes acknowledged before
// it (get, the read of a conditional update, a delete's, a certificate's
// load and stat) asks the stream leader (STREAM.MSG.GET), never the
// direct get subjects any replica answers. Counted on the bus, so this
// holds every time, where TestReadsSeeWritesOnCluster's stale replica shows
// only now and then.
func TestGetsAskTheStreamLeader(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	watcher := testutil.Connect(t, ns.ClientURL())
	var direct, leader, sentinel atomic.Int64
	for subj, n := range map[string]*atomic.Int64{"$JS.API.DIRECT.GET.>": &direct, "$JS.API.STREAM.MSG.GET.>": &leader, "sentinel": &sentinel} {
		if _, err := watcher.Subscribe(subj, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a"}))
	if _, err := s.GetApp(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s.UpdateApp(ctx, "a", func(cur *route.App) (*route.App, error) { cur.Status = route.StatusSuspended; return cur, nil }))
	mustPut(t, s.DeleteApp(ctx, "a"))
	c := s.Certs()
	mustPut(t, c.Store(ctx, "certificates/x/a.test/a.test.crt", []byte("pem")))
	if _, err := c.Load(ctx, "certificates/x/a.test/a.test.crt"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.Stat(ctx, "certificates/x/a.test/a.test.crt"); err != nil {
		t.Fatal(err)
	}
	// The store's connection delivers in order: once the sentinel is
	// in, so is every request it made before.
	if err := nc.Publish("sentinel", nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return sentinel.Load() == 1 }, "sentinel never arrived")
	if direct.Load() != 0 || leader.Load() < 5 {
		t.Errorf("%d direct gets, %d leader gets; want 0 and at least 5 (get, update, delete, load, stat)", direct.Load(), leader.Load())
	}
}

// A bucket deleted under a running gateway (an operator's slip; the next
// Open makes it again) is the store not answering for each of the
// leader's reads, as for a write there: Unavailable, which keeps
// discovery's hosts in the pool (a host key read that fails otherwise
// refuses the host as not enrolled) and answers the control API 503. The
// leader answers such a read "stream not found", where the direct get it
// replaced found no responder.
func TestReadOfDeletedBucketIsUnavailable(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a"}))
	mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "h", PublicKey: testHostKey, Apps: []string{"a"}}))
	const cert = "certificates/x/a.test/a.test.crt"
	mustPut(t, s.Certs().Store(ctx, cert, []byte("pem")))
	for _, b := range []string{"gatehouse_apps", "gatehouse_hostkeys", "gatehouse_certs"} {
		if err := j.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	_, appErr := s.GetApp(ctx, "a")
	_, keyErr := s.GetHostKey(ctx, "h")
	_, loadErr := s.Certs().Load(ctx, cert)
	_, _, _, statErr := s.Certs().Stat(ctx, cert)
	for what, err := range map[string]error{"get app": appErr, "get host key": keyErr, "cert load": loadErr, "cert stat": statErr} {
		if !store.Unavailable(err) {
			t.Errorf("%s with its bucket deleted: %v; want an error Unavailable says is one", what, err)
		}
	}
}
