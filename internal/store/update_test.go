package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// addValue and removeValue are what an ACME DNS-01 provider does to a
// TXT set: add its own value, later take exactly that value away.
func addValue(zone, name, v string) func(*route.Record) (*route.Record, error) {
	return func(cur *route.Record) (*route.Record, error) {
		if cur == nil {
			cur = &route.Record{Zone: zone, Name: name, Type: "TXT"}
		}
		cur.Values = append(cur.Values, v)
		return cur, nil
	}
}

func removeValue(v string) func(*route.Record) (*route.Record, error) {
	return func(cur *route.Record) (*route.Record, error) {
		if cur == nil {
			return nil, nil
		}
		cur.Values = slices.DeleteFunc(cur.Values, func(x string) bool { return x == v })
		if len(cur.Values) == 0 {
			return nil, nil
		}
		return cur, nil
	}
}

// Two gateways (two stores on one bus) add and then remove values of the
// same TXT set at the same time: every add is kept while they overlap,
// and the set is gone once each removed its own.
func TestUpdateRecordConcurrent(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	ja, _ := js(t, ns.ClientURL())
	jb, _ := js(t, ns.ClientURL())
	a := open(t, ja, store.Options{})
	b := open(t, jb, store.Options{})
	ctx := t.Context()
	const zone, name = "apps.example.com", "_acme-challenge.apps.example.com"
	mustPut(t, a.PutRecord(ctx, &route.Record{Zone: zone, Name: name, Type: "TXT", Values: []string{"operator's"}}))

	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() { errs <- s.UpdateRecord(ctx, zone, name, "TXT", addValue(zone, name, fmt.Sprint("tok-", i))) })
	}
	wg.Wait()
	recs, err := a.ListRecords(ctx, zone)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v, %v", recs, err)
	}
	if got := recs[0].Values; len(got) != n+1 || !slices.Contains(got, "operator's") {
		t.Fatalf("after %d concurrent adds: %v", n, got)
	}
	for i := range n {
		s := a
		if i%2 == 0 {
			s = b
		}
		wg.Go(func() { errs <- s.UpdateRecord(ctx, zone, name, "TXT", removeValue(fmt.Sprint("tok-", i))) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	recs, _ = b.ListRecords(ctx, zone)
	if len(recs) != 1 || !slices.Equal(recs[0].Values, []string{"operator's"}) {
		t.Fatalf("after removing every token: %+v", recs)
	}
	// The last value removed deletes the set; deleting nothing is fine.
	mustPut(t, a.UpdateRecord(ctx, zone, name, "TXT", removeValue("operator's")))
	if recs, _ = a.ListRecords(ctx, zone); len(recs) != 0 {
		t.Fatalf("set not deleted: %+v", recs)
	}
	mustPut(t, a.UpdateRecord(ctx, zone, name, "TXT", removeValue("operator's")))
	// Created again over the delete marker.
	mustPut(t, a.UpdateRecord(ctx, zone, name, "TXT", addValue(zone, name, "again")))
	if recs, _ = a.ListRecords(ctx, zone); len(recs) != 1 || recs[0].Values[0] != "again" {
		t.Fatalf("recreated: %+v", recs)
	}
}

func TestUpdateRecordRefuses(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	const zone, name = "apps.example.com", "x.apps.example.com"
	boom := errors.New("boom")
	if err := s.UpdateRecord(ctx, zone, name, "TXT", func(*route.Record) (*route.Record, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("fn's error: %v", err)
	}
	// A set whose identity is not the one asked for is never written.
	err := s.UpdateRecord(ctx, zone, name, "TXT", func(*route.Record) (*route.Record, error) {
		return &route.Record{Zone: zone, Name: "other." + zone, Type: "TXT", Values: []string{"v"}}, nil
	})
	if err == nil {
		t.Fatal("a set under another name was written")
	}
	if err := s.UpdateRecord(ctx, "", name, "TXT", addValue("", name, "v")); err == nil {
		t.Fatal("empty zone accepted")
	}
	if recs, _ := s.ListRecords(ctx, zone); len(recs) != 0 {
		t.Fatalf("written: %+v", recs)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.UpdateRecord(cctx, zone, name, "TXT", addValue(zone, name, "v")); err == nil {
		t.Fatal("a canceled context wrote")
	}
}
