package store_test

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestZoneSerial: a zone's serial in the table moves forward with every
// change to the zone or its records, deletes included, and with nothing
// else; a gateway that follows the changes and one that reloads the
// store every few milliseconds (as a resync, or a restart, does) give the
// same serial, so a reload never moves it back.
func TestZoneSerial(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j1, _ := js(t, ns.ClientURL())
	j2, _ := js(t, ns.ClientURL())
	s := open(t, j1, store.Options{})
	follows := run(t, s)
	reloads := run(t, open(t, j2, store.Options{FullResync: 20 * time.Millisecond}))
	ctx := t.Context()
	const zone, inner = "apps.example.com", "eu.apps.example.com"
	rec := func(z, name, v string) *route.Record {
		return &route.Record{Zone: z, Name: name, Type: "A", Values: []string{v}}
	}
	has := func(z, name, v string) func(*route.Table) bool {
		return func(tbl *route.Table) bool {
			for _, r := range tbl.Records(z) {
				if r.Name == name && r.Values[0] == v {
					return true
				}
			}
			return false
		}
	}
	hasNot := func(z, name string) func(*route.Table) bool {
		return func(tbl *route.Table) bool {
			for _, r := range tbl.Records(z) {
				if r.Name == name {
					return false
				}
			}
			return true
		}
	}
	steps := []struct {
		name    string
		change  func() error
		applied func(*route.Table) bool // on the following gateway
		bump    bool
	}{
		{"create the zone", func() error { return s.PutZone(ctx, &route.Zone{Name: zone}) },
			func(tbl *route.Table) bool { return tbl.Zone(zone) != nil }, true},
		{"add a record", func() error { return s.PutRecord(ctx, rec(zone, "www", "192.0.2.1")) },
			has(zone, "www", "192.0.2.1"), true},
		{"change it", func() error { return s.PutRecord(ctx, rec(zone, "www", "192.0.2.2")) },
			has(zone, "www", "192.0.2.2"), true},
		{"a record of the zone inside", func() error { return s.PutRecord(ctx, rec(inner, "www", "192.0.2.3")) },
			has(inner, "www", "192.0.2.3"), false},
		{"an app", func() error { return s.PutApp(ctx, &route.App{ID: "shop"}) },
			func(tbl *route.Table) bool { return tbl.App("shop") != nil }, false},
		{"add another", func() error { return s.PutRecord(ctx, rec(zone, "mail", "192.0.2.4")) },
			has(zone, "mail", "192.0.2.4"), true},
		// The newest change of the zone is now a delete: only its marker
		// holds the revision.
		{"delete it", func() error { return s.DeleteRecord(ctx, zone, "mail", "A") },
			hasNot(zone, "mail"), true},
		{"change the zone", func() error { return s.PutZone(ctx, &route.Zone{Name: zone, TTL: 30}) },
			func(tbl *route.Table) bool { return tbl.Zone(zone).TTL == 30 }, true},
		{"delete the zone", func() error { return s.DeleteZone(ctx, zone) },
			func(tbl *route.Table) bool { return tbl.Zone(zone) == nil }, true},
		{"create it again", func() error { return s.PutZone(ctx, &route.Zone{Name: zone}) },
			func(tbl *route.Table) bool { return tbl.Zone(zone) != nil }, true},
	}
	var prev uint32
	for _, st := range steps {
		mustPut(t, st.change())
		testutil.WaitFor(t, 5*time.Second, func() bool { return st.applied(follows.live.Load()) }, st.name+": not applied")
		got := follows.live.Load().Serial(zone)
		switch {
		case st.bump && int32(got-prev) <= 0:
			t.Errorf("%s: serial %d, want one after %d", st.name, got, prev)
		case !st.bump && got != prev:
			t.Errorf("%s: serial %d, want %d unchanged", st.name, got, prev)
		}
		// Two more tables on the reloading gateway: at least one whole
		// reload since it first agreed.
		testutil.WaitFor(t, 5*time.Second, func() bool { return reloads.live.Load().Serial(zone) == got }, st.name+": the reloading gateway disagrees")
		for range 2 {
			tbl := reloads.live.Load()
			testutil.WaitFor(t, 5*time.Second, func() bool { return reloads.live.Load() != tbl }, st.name+": no reload")
		}
		if again := reloads.live.Load().Serial(zone); again != got {
			t.Errorf("%s: serial %d after a reload, %d before", st.name, again, got)
		}
		prev = got
	}
}
