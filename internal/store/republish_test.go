package store

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The routing buckets republish every write with what the follower reads:
// the key in the subject, the stream sequence, and the delete headers.
func TestRepublishedWritesCarryKeyRevisionAndOp(t *testing.T) {
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), js, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(republishPrefix+">", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRecord(t.Context(), &route.Record{Zone: "z.test", Name: "*", Type: "A"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRecord(t.Context(), "z.test", "*", "A"); err != nil {
		t.Fatal(err)
	}
	next := func() *nats.Msg {
		select {
		case m := <-ch:
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no republished message")
			return nil
		}
	}
	put, del := next(), next()
	wantSubj := republishPrefix + bucketRecords + ".z_2Etest._2A.A"
	for _, m := range []*nats.Msg{put, del} {
		if m.Subject != wantSubj || m.Header.Get(jetstream.SequenceHeader) == "" {
			t.Fatalf("republished %q headers %v", m.Subject, m.Header)
		}
	}
	if deleteHeader(put.Header) || !deleteHeader(del.Header) {
		t.Fatalf("delete detection: put %v, del %v", put.Header, del.Header)
	}

	// The follower applies each revision once, whichever copy comes first.
	var live route.Live
	b := route.NewBuilder(&live)
	f := &follower{s: s, b: b, feeds: s.feeds(), revs: make([]map[string]uint64, 4), dead: make([]map[string]bool, 4), top: make([]uint64, 4)}
	for i := range f.revs {
		f.revs[i], f.dead[i] = map[string]uint64{}, map[string]bool{}
	}
	f.republished(put)
	if len(live.Load().Records("z.test")) != 1 {
		t.Fatal("republished put not applied")
	}
	f.republished(del)
	f.republished(put) // a late duplicate of an older revision
	if len(live.Load().Records("z.test")) != 0 {
		t.Fatal("an older revision was applied over a newer delete")
	}
	f.republished(&nats.Msg{Subject: wantSubj, Data: put.Data}) // no sequence: dropped
	if len(live.Load().Records("z.test")) != 0 {
		t.Fatal("a message without a sequence was applied")
	}
}
