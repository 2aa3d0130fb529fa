package store_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// sweeping has Run sweep every marker that exists at each sweep.
var sweeping = store.Options{MarkerAge: time.Nanosecond, SweepEvery: 20 * time.Millisecond}

// streamMsgs is how many messages a bucket's stream holds: its live
// values and its delete markers.
func streamMsgs(t testing.TB, j jetstream.JetStream, bucket string) uint64 {
	t.Helper()
	st, err := j.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// sweepLocked reports whether a gateway is sweeping markers: it holds
// the lock that says so.
func sweepLocked(t testing.TB, j jetstream.JetStream) bool {
	t.Helper()
	kv, err := j.KeyValue(t.Context(), "gatehouse_locks")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Get(t.Context(), "gatehouse_5Fstore_5Fsweep")
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// Deleted keys leave nothing behind once their markers are old enough,
// except the newest change of each zone's records while it is a delete:
// the SOA serial a gateway computes from the store stays what it was,
// and a key written again after the sweep is seen by every gateway.
func TestDeleteMarkersSwept(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j1, _ := js(t, ns.ClientURL())
	s := open(t, j1, store.Options{})
	before := run(t, s) // follows every change; sweeps nothing younger than an hour
	ctx := t.Context()
	const zone = "z.test"
	rec := func(name string) *route.Record {
		return &route.Record{Zone: zone, Name: name, Type: "A", Values: []string{"192.0.2.1"}}
	}
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: zone}))
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "gone.test"}))
	mustPut(t, s.DeleteZone(ctx, "gone.test"))
	for _, n := range []string{"www", "mail", "ftp"} {
		mustPut(t, s.PutRecord(ctx, rec(n)))
	}
	mustPut(t, s.DeleteRecord(ctx, zone, "mail", "A"))
	mustPut(t, s.DeleteRecord(ctx, zone, "ftp", "A")) // the zone's newest change
	// A revoked host key's marker stays: a host key watch resuming after
	// an outage must still see the revocation.
	mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "revoked", PublicKey: testHostKey, Apps: []string{"a0"}}))
	mustPut(t, s.DeleteHostKey(ctx, "revoked"))
	const apps = 100
	for i := range apps {
		mustPut(t, s.PutApp(ctx, &route.App{ID: "a" + strconv.Itoa(i)}))
		mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "d" + strconv.Itoa(i) + ".test", App: "a0"}))
		if i > 0 {
			mustPut(t, s.DeleteApp(ctx, "a"+strconv.Itoa(i)))
			mustPut(t, s.DeleteDomain(ctx, "d"+strconv.Itoa(i)+".test"))
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return before.live.Load().App("a"+strconv.Itoa(apps-1)) == nil && len(before.live.Load().Records(zone)) == 1
	}, "the deletes never reached the table")
	serial := before.live.Load().Serial(zone)

	j2, _ := js(t, ns.ClientURL())
	run(t, open(t, j2, sweeping))
	want := map[string]uint64{
		"gatehouse_apps": 1, "gatehouse_domains": 1, "gatehouse_zones": 1,
		"gatehouse_records": 2, // www, and ftp's marker: the zone's newest revision
	}
	for bucket, n := range want {
		testutil.WaitFor(t, 5*time.Second, func() bool { return streamMsgs(t, j1, bucket) == n },
			bucket+": markers not swept")
	}

	j3, _ := js(t, ns.ClientURL())
	fresh := run(t, open(t, j3, store.Options{}))
	tbl := fresh.live.Load()
	if tbl.App("a0") == nil || tbl.App("a1") != nil || len(tbl.Records(zone)) != 1 {
		t.Fatalf("a gateway started after the sweep does not hold the live keys only")
	}
	if got := tbl.Serial(zone); got != serial {
		t.Errorf("serial %d after the sweep, %d before", got, serial)
	}

	// A record written now is the zone's newest change: ftp's marker goes
	// too, and the serial moves forward on every gateway alike.
	mustPut(t, s.PutRecord(ctx, rec("mx")))
	testutil.WaitFor(t, 5*time.Second, func() bool { return streamMsgs(t, j1, "gatehouse_records") == 2 },
		"the marker a newer record set replaced was not swept")
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(before.live.Load().Records(zone)) == 2 }, "mx never arrived")
	if n := streamMsgs(t, j1, "gatehouse_hostkeys"); n != 1 { // two sweeps have run by now
		t.Errorf("gatehouse_hostkeys holds %d messages after the sweeps, want the revocation's marker", n)
	}
	after := before.live.Load().Serial(zone)
	if int32(after-serial) <= 0 {
		t.Errorf("serial %d after a new record, %d before", after, serial)
	}
	j4, _ := js(t, ns.ClientURL())
	if got := run(t, open(t, j4, store.Options{})).live.Load().Serial(zone); got != after {
		t.Errorf("a fresh gateway's serial is %d, the following one's %d", got, after)
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a1"}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return fresh.live.Load().App("a1") != nil },
		"an app written again under a swept key never arrived")
}

// A gateway cut off from the bus while a key is deleted and its marker
// swept drops the key all the same once it is back: a resync reads the
// live keys, it does not need the marker.
func TestSweptWhileCutOff(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	p := startCutter(t, ns.Addr().String())
	jg, _ := js(t, p.url())
	g := run(t, open(t, jg, store.Options{Resync: 200 * time.Millisecond}))
	jw, _ := js(t, ns.ClientURL())
	w := open(t, jw, sweeping)
	ctx := t.Context()
	mustPut(t, w.PutZone(ctx, &route.Zone{Name: "cut.test"}))
	mustPut(t, w.PutApp(ctx, &route.App{ID: "gone"}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("gone.cut.test", "gone") }, "the app never arrived")

	// A gateway cut off while it sweeps keeps the others from sweeping
	// until its lock expires (LockTTL): let its first sweep end.
	testutil.WaitFor(t, 5*time.Second, func() bool { return !sweepLocked(t, jw) }, "the gateway's first sweep never ended")
	p.cut(true)
	mustPut(t, w.DeleteApp(ctx, "gone"))
	run(t, w)
	testutil.WaitFor(t, 5*time.Second, func() bool { return streamMsgs(t, jw, "gatehouse_apps") == 0 }, "the marker was not swept")
	if !g.routes("gone.cut.test", "gone") {
		t.Fatal("the gateway that is cut off learned of the delete: the test cuts nothing")
	}
	p.cut(false)
	testutil.WaitFor(t, 10*time.Second, func() bool { return g.live.Load().App("gone") == nil },
		"the gateway that was cut off still routes the deleted app")
}

// cutter is a loopback TCP relay to a NATS server that can cut every
// connection through it and refuse new ones, and later let them in again.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	off    bool
	conns  map[net.Conn]bool
	g      errgroup.Group
}

func startCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target, conns: map[net.Conn]bool{}}
	c.g.Go(c.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		c.cut(true)
		_ = c.g.Wait()
	})
	return c
}

func (c *cutter) url() string { return "nats://" + c.ln.Addr().String() }

func (c *cutter) accept() error {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return nil
		}
		c.mu.Lock()
		off := c.off
		if !off {
			c.conns[in] = true
		}
		c.mu.Unlock()
		if off {
			_ = in.Close()
			continue
		}
		c.g.Go(func() error { return c.relay(in) })
	}
}

func (c *cutter) relay(in net.Conn) error {
	defer c.drop(in)
	out, err := net.Dial("tcp", c.target)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	if c.off {
		c.mu.Unlock()
		_ = out.Close()
		return nil
	}
	c.conns[out] = true
	c.mu.Unlock()
	defer c.drop(out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, in)
		_ = out.Close()
	}()
	_, _ = io.Copy(in, out)
	_ = in.Close()
	<-done
	return nil
}

func (c *cutter) drop(conn net.Conn) {
	_ = conn.Close()
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
}

// cut closes every relayed connection and refuses new ones (true), or
// lets them in again (false).
func (c *cutter) cut(off bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = off
	if off {
		for conn := range c.conns {
			_ = conn.Close()
		}
	}
}

// BenchmarkLoadAfterDeletes is the reviewer's case: many apps deleted,
// few live. It reports what a fresh gateway's first load costs with every
// delete marker in the bucket, and after a sweep removed them:
//
//	go test -run '^$' -bench LoadAfterDeletes -benchtime 5x ./internal/store/
func BenchmarkLoadAfterDeletes(b *testing.B) {
	const deleted, live = 20000, 10
	ns := testutil.StartBus(b)
	j, _ := js(b, ns.ClientURL())
	s := open(b, j, store.Options{})
	ctx := b.Context()
	mustPut(b, s.PutZone(ctx, &route.Zone{Name: "bench.test"}))
	var g errgroup.Group
	g.SetLimit(32)
	for i := range deleted + live {
		g.Go(func() error {
			id := "app" + strconv.Itoa(i)
			if err := s.PutApp(ctx, &route.App{ID: id}); err != nil || i < live {
				return err
			}
			return s.DeleteApp(ctx, id)
		})
	}
	mustPut(b, g.Wait())
	load := func(b *testing.B) {
		var heap uint64
		var took time.Duration
		for b.Loop() {
			jf, _ := js(b, ns.ClientURL())
			fs := open(b, jf, store.Options{})
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			base := testutil.HeapInUse()
			start := time.Now()
			go func() { done <- fs.Run(runCtx, route.NewBuilder(new(route.Live))) }()
			<-fs.Synced()
			took += time.Since(start)
			heap += max(testutil.HeapInUse(), base) - base
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "load-ms")
		b.ReportMetric(float64(heap)/float64(b.N)/(1<<20), "heap-MB")
		b.ReportMetric(float64(streamMsgs(b, j, "gatehouse_apps")), "stream-msgs")
	}
	b.Run("markers", load)
	sw := open(b, j, sweeping)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sw.Run(runCtx, route.NewBuilder(new(route.Live))) }()
	start := time.Now()
	for streamMsgs(b, j, "gatehouse_apps") != live {
		time.Sleep(10 * time.Millisecond)
	}
	b.Logf("swept %d markers in %s", deleted, time.Since(start))
	cancel()
	<-done
	b.Run("swept", load)
}
