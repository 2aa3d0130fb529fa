package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// leadsNone returns a server of servers that leads none of buckets'
// streams (with three servers and two buckets there is one).
func leadsNone(t *testing.T, servers []*server.Server, buckets ...string) *server.Server {
	t.Helper()
	var f *server.Server
	testutil.WaitFor(t, 10*time.Second, func() bool {
		leaders := 0
		f = nil
		for _, ns := range servers {
			leads := false
			for _, b := range buckets {
				if ns.JetStreamIsStreamLeader("$G", "KV_"+b) {
					leads = true
					leaders++
				}
			}
			if !leads {
				f = ns
			}
		}
		return leaders == len(buckets) && f != nil
	}, "a bucket has no leader")
	return f
}

// listMisses counts, over rounds of writes each followed at once by the
// list that must show it, the lists that did not. Each round puts a
// record set and reads its name (RecordsAt, as the control API's
// neighbour check does), stores a certificate and lists its directory
// (CertKV.List, a key listing), then deletes the record set and reads
// the name again, which must now be empty.
type listMisses struct {
	rounds, records, certs, deletes int
	first                           error
}

func (m *listMisses) miss(n *int, err error) {
	*n++
	if m.first == nil {
		m.first = err
	}
}

// listsAfterWrites runs the rounds listMisses counts. It stops after n
// rounds, or once budget has passed and least rounds are done (a loaded
// machine ran fewer than least in budget, and the test failed for it),
// or at 30 s.
func listsAfterWrites(t *testing.T, s *store.Store, n, least int, budget time.Duration) listMisses {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var m listMisses
	c := s.Certs()
	start := time.Now()
	for i := range n {
		if i >= least && time.Since(start) > budget {
			break
		}
		name := fmt.Sprintf("n%d", i)
		rec := &route.Record{Zone: "z.test", Name: name, Type: "TXT", Values: []string{"v"}}
		if err := s.PutRecord(ctx, rec); err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("put record %s: %v", name, err)
		}
		got, err := s.RecordsAt(ctx, "z.test", name)
		if ctx.Err() != nil {
			break
		}
		if err != nil || len(got) != 1 {
			m.miss(&m.records, fmt.Errorf("records at %s right after its put: %d, %v; want 1", name, len(got), err))
		}

		dir := "certificates/x/" + name
		if err := c.Store(ctx, dir+"/"+name+".crt", []byte("pem")); err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("store cert %s: %v", name, err)
		}
		keys, err := c.List(ctx, dir, false)
		if ctx.Err() != nil {
			break
		}
		if err != nil || !slices.Equal(keys, []string{dir + "/" + name + ".crt"}) {
			m.miss(&m.certs, fmt.Errorf("cert list of %s right after its store: %q, %v", dir, keys, err))
		}

		if err := s.DeleteRecord(ctx, "z.test", name, "TXT"); err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("delete record %s: %v", name, err)
		}
		got, err = s.RecordsAt(ctx, "z.test", name)
		if ctx.Err() != nil {
			break
		}
		if err != nil || len(got) != 0 {
			m.miss(&m.deletes, fmt.Errorf("records at %s right after its delete: %d, %v; want none", name, len(got), err))
		}
		m.rounds++
	}
	return m
}

// A list right after an acknowledged write shows it, and one right after
// a delete does not show the key, on servers, a 3-node cluster with the
// store's buckets at R3 (TestReadsSeeWritesOnCluster), through a node
// that leads neither bucket. A list is a watch, an ordered consumer the
// server places on any replica of the bucket, one that may not have
// applied the write yet: the control API's neighbour check (RecordsAt)
// and an app delete's reference check (ListDomains) could miss what was
// just written, and a certificate just stored could be missing from its
// directory's listing.
func listSeesWriteOnCluster(t *testing.T, servers []*server.Server) {
	j, _ := js(t, leadsNone(t, servers, "gatehouse_records", "gatehouse_certs").ClientURL())
	s := open(t, j, store.Options{Replicas: 3})
	const n, least = 200, 5
	m := listsAfterWrites(t, s, n, least, 2*time.Second)
	t.Logf("%d rounds", m.rounds)
	if m.rounds < least {
		t.Fatalf("only %d of %d write-then-list rounds in 30 s", m.rounds, least)
	}
	if m.records+m.certs+m.deletes > 0 {
		t.Errorf("of %d rounds, lists right after a write missed it: %d record puts, %d cert stores, %d record deletes; the first: %v",
			m.rounds, m.records, m.certs, m.deletes, m.first)
	}
}

// Every list asks the bucket's stream leader (STREAM.MSG.GET) which entry
// under its filter is the latest before it reads its watch: the typed
// lists, RecordsAt, and the key listings of certificates and of a zone's
// records. Counted on the bus, so this holds every time, where
// TestReadsSeeWritesOnCluster's stale replica shows only now and then.
func TestListsAskTheStreamLeader(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutRecord(ctx, &route.Record{Zone: "z.test", Name: "www", Type: "TXT", Values: []string{"v"}}))
	c := s.Certs()
	mustPut(t, c.Store(ctx, "certificates/x/a.test/a.test.crt", []byte("pem")))

	watcher := testutil.Connect(t, ns.ClientURL())
	var leader, sentinel atomic.Int64
	for subj, n := range map[string]*atomic.Int64{"$JS.API.STREAM.MSG.GET.>": &leader, "sentinel": &sentinel} {
		if _, err := watcher.Subscribe(subj, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	// In order: the deletes empty what the lists before them read.
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"list apps", func() error { _, err := s.ListApps(ctx); return err }},
		{"list records", func() error { _, err := s.ListRecords(ctx, "z.test"); return err }},
		{"records at", func() error { _, err := s.RecordsAt(ctx, "z.test", "www"); return err }},
		{"cert list", func() error { _, err := c.List(ctx, "certificates", true); return err }},
		{"cert delete", func() error { return c.Delete(ctx, "certificates/x") }},
		{"delete records", func() error { return s.DeleteRecords(ctx, "z.test") }},
	} {
		name := tc.name
		before := leader.Load()
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Counted before the publish: the sentinel may be in before
		// Publish returns.
		want := sentinel.Load() + 1
		if err := nc.Publish("sentinel", nil); err != nil {
			t.Fatal(err)
		}
		// The store's connection delivers in order: once the
		// sentinel is in, so is every request it made before.
		testutil.WaitFor(t, 5*time.Second, func() bool { return sentinel.Load() == want }, "sentinel never arrived")
		if leader.Load() == before {
			t.Errorf("%s asked the stream leader nothing", name)
		}
	}
}

// A list of a bucket deleted under a running gateway is the store not
// answering, as a get there is (TestReadOfDeletedBucketIsUnavailable).
func TestListOfDeletedBucketIsUnavailable(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a"}))
	mustPut(t, s.PutRecord(ctx, &route.Record{Zone: "z.test", Name: "www", Type: "TXT", Values: []string{"v"}}))
	mustPut(t, s.Certs().Store(ctx, "certificates/x/a.test/a.test.crt", []byte("pem")))
	for _, b := range []string{"gatehouse_apps", "gatehouse_records", "gatehouse_certs"} {
		if err := j.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	_, appsErr := s.ListApps(ctx)
	_, atErr := s.RecordsAt(ctx, "z.test", "www")
	_, certErr := s.Certs().List(ctx, "certificates", true)
	for what, err := range map[string]error{"list apps": appsErr, "records at": atErr, "cert list": certErr} {
		if !store.Unavailable(err) {
			t.Errorf("%s with its bucket deleted: %v; want an error Unavailable says is one", what, err)
		}
	}
}

// A page of a bucket deleted under a running gateway is the store not
// answering too, whether it lists the bucket's keys or takes the names
// from the routing table: the control API answers it 503, as it answers
// a list or a get there, not 500.
func TestPageOfDeletedBucketIsUnavailable(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	lister := open(t, j, store.Options{}) // no table: pages list the keys
	follower := open(t, j, store.Options{})
	run(t, follower)
	ctx := t.Context()
	mustPut(t, lister.PutApp(ctx, &route.App{ID: "a"}))
	mustPut(t, lister.PutDomain(ctx, &route.Domain{Domain: "a.test", App: "a"}))
	for _, b := range []string{"gatehouse_apps", "gatehouse_domains"} {
		if err := j.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range map[string]*store.Store{"list": lister, "table": follower} {
		_, _, appsErr := s.PageApps(ctx, "", store.MaxPage)
		_, _, domainsErr := s.PageDomains(ctx, "", store.MaxPage)
		for what, err := range map[string]error{"apps": appsErr, "domains": domainsErr} {
			if !store.Unavailable(err) {
				t.Errorf("%s page of %s with its bucket deleted: %v; want an error Unavailable says is one", name, what, err)
			}
		}
	}
}
