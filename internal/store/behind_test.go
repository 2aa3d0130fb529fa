package store

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
)

// behindKV is a bucket whose watches a replica serves that stays behind:
// each delivers the initial values the replica had (entries, a watch's
// taken earlier) and nothing after, as a replica catching up after a
// restart delivers nothing newer for as long as it takes.
type behindKV struct {
	jetstream.KeyValue
	entries []jetstream.KeyValueEntry
}

func (b behindKV) WatchFiltered(context.Context, []string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w := &heldWatch{ch: make(chan jetstream.KeyValueEntry, len(b.entries)+1)}
	for _, e := range b.entries {
		w.ch <- e
	}
	w.ch <- nil // the initial values' end
	return w, nil
}

type heldWatch struct {
	ch   chan jetstream.KeyValueEntry
	once sync.Once
}

func (w *heldWatch) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w *heldWatch) Stop() error                             { w.once.Do(func() { close(w.ch) }); return nil }

// initialValues are what a watch of filter delivers now, up to the end
// of its initial values.
func initialValues(t *testing.T, kv jetstream.KeyValue, filter string) []jetstream.KeyValueEntry {
	t.Helper()
	w, err := kv.WatchFiltered(t.Context(), []string{filter})
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch(nil, w)
	var out []jetstream.KeyValueEntry
	for e := range w.Updates() {
		if e == nil {
			return out
		}
		out = append(out, e)
	}
	t.Fatal("watch closed before its initial values ended")
	return nil
}

// A list whose watch a replica serves that stays behind waited for it
// until the JetStream API timeout and failed (Unavailable: the control
// API answered 503) though the stream's leader, which it had asked how
// far to read, held every write. On a 3-node cluster, a node restarted
// behind 100,000 writes took 10 to 20 s to catch up, and half the lists
// of a one-record zone made meanwhile failed so, after 6 s each. The
// list now reads what the replica lacks from the leader: every write
// acknowledged before it, and no stale value, as from a replica that
// had caught up.
func TestListOnAReplicaBehindReadsTheLeader(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := Open(ctx, js, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(name string, v ...string) *route.Record {
		return &route.Record{Zone: "z.test", Name: name, Type: "TXT", Values: v}
	}
	for _, r := range []*route.Record{rec("www", "old"), rec("gone", "v"), rec("kept", "v")} {
		if err := s.PutRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutRecord(ctx, &route.Record{Zone: "y.test", Name: "other", Type: "TXT", Values: []string{"v"}}); err != nil {
		t.Fatal(err)
	}
	z, err := tokensKey("z.test")
	if err != nil {
		t.Fatal(err)
	}
	replica := initialValues(t, s.records.kv, z+".>")
	// Written after the replica's copy: a change, a new key, a delete,
	// and a write outside the list's filter.
	for _, r := range []*route.Record{rec("www", "new"), rec("added", "v")} {
		if err := s.PutRecord(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteRecord(ctx, "z.test", "gone", "TXT"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRecord(ctx, &route.Record{Zone: "y.test", Name: "later", Type: "TXT", Values: []string{"v"}}); err != nil {
		t.Fatal(err)
	}

	k := s.records
	k.kv = behindKV{KeyValue: k.kv, entries: replica}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	got, err := k.list(lctx, z+".>", func(err error) { t.Errorf("bad value: %v", err) })
	if err != nil {
		t.Fatalf("list on a replica behind, after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Name+"="+r.Values[0])
	}
	if want := []string{"added=v", "kept=v", "www=new"}; !slices.Equal(names, want) {
		t.Errorf("list on a replica behind: %q, want %q", names, want)
	}
}
