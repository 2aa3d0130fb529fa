package store

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A value written straight to a routing bucket (not through the store)
// with delete headers the KV library does not read as a delete is a put
// to every reader of the bucket: Get (nats.go's, and the store's own from
// the stream leader), the lists, a load. Its republished copy must be
// read the same way, or a gateway that applied that copy first (it
// usually comes before the watch's) drops the key while the store, the
// API and every gateway started later serve it. Each case is a real
// write, read back by both Gets, the watch and the republished copy.
func TestRepublishedOpIsTheWatchersOp(t *testing.T) {
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := Open(ctx, js, Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucketApps)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(republishPrefix+bucketApps+".>", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"no headers", nil},
		{"an unknown marker reason", map[string]string{"Nats-Marker-Reason": "bogus"}},
		{"an unknown operation", map[string]string{"KV-Operation": "ERASE"}},
		{"an unknown operation before a marker reason", map[string]string{"KV-Operation": "PUT", "Nats-Marker-Reason": "Remove"}},
		{"a delete", map[string]string{"KV-Operation": "DEL"}},
		{"a purge", map[string]string{"KV-Operation": "PURGE"}},
		{"a removal marker", map[string]string{"Nats-Marker-Reason": "Remove"}},
		{"an expiry marker", map[string]string{"Nats-Marker-Reason": "MaxAge"}},
		{"a purge marker", map[string]string{"Nats-Marker-Reason": "Purge"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg("$KV." + bucketApps + ".a")
			m.Data = []byte(`{"id":"a"}`)
			for k, v := range tc.headers {
				m.Header.Set(k, v)
			}
			ack, err := js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			var repub *nats.Msg
			select {
			case repub = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatal("no republished copy")
			}
			// What the store reads: Get (the library's, and the store's
			// own from the stream leader: the same), and the watch a load
			// makes.
			ge, getErr := kv.Get(ctx, "a")
			le, leaderErr := s.apps.latest(ctx, "a")
			if leaderErr != getErr || ge != nil && (le.Operation() != ge.Operation() || le.Revision() != ge.Revision() ||
				string(le.Value()) != string(ge.Value()) || !le.Created().Equal(ge.Created())) {
				t.Fatalf("the leader's read: %v %v, the library's Get: %v %v", le, leaderErr, ge, getErr)
			}
			w, err := kv.Watch(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			defer stopWatch(nil, w)
			var e jetstream.KeyValueEntry
			select {
			case e = <-w.Updates():
			case <-time.After(5 * time.Second):
				t.Fatal("no entry from the watch")
			}
			if e == nil || e.Revision() != ack.Sequence {
				t.Fatalf("watch read %v, want revision %d", e, ack.Sequence)
			}
			watchDel := isDelete(e)
			if watchDel != (getErr != nil) {
				t.Fatalf("the watch reads a delete: %v, Get: %v", watchDel, getErr)
			}

			// A gateway that applies the republished copy first.
			var live route.Live
			b := route.NewBuilder(&live)
			b.PutApp(&route.App{ID: "a"})
			f := &follower{s: s, b: b, feeds: s.feeds(), revs: make([]map[string]uint64, 4), dead: make([]map[string]bool, 4), top: make([]uint64, 4)}
			for i := range f.revs {
				f.revs[i], f.dead[i] = map[string]uint64{}, map[string]bool{}
			}
			f.republished(repub)
			if has := live.Load().App("a") != nil; has == watchDel {
				t.Fatalf("headers %v: the republished copy leaves the app in the table: %v; the store reads a delete: %v",
					tc.headers, has, watchDel)
			}
		})
	}
}
