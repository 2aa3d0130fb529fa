package store_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestPageApps: pages walk every app in id order, as ListApps lists
// them, skipping deleted keys and values that do not read (logged, as
// ListApps skips them), and "more" is false on the last page even when
// only skipped keys follow it.
func TestPageApps(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)})
	ctx := t.Context()
	var want []string
	for i := range 9 {
		id := fmt.Sprintf("a%d", i)
		mustPut(t, s.PutApp(ctx, &route.App{ID: id}))
		want = append(want, id)
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a3x"}))
	mustPut(t, s.DeleteApp(ctx, "a3x"))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "zz"}))
	mustPut(t, s.DeleteApp(ctx, "zz")) // only a delete marker after the last app
	kv, err := j.KeyValue(ctx, "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a5x", "zzz"} { // bad values, one after the last app
		if _, err := kv.Put(ctx, key, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, a := range list {
		listed = append(listed, a.ID)
	}
	if !slices.Equal(listed, want) {
		t.Fatalf("ListApps: %v, want %v", listed, want)
	}
	for _, limit := range []int{1, 2, 4, 9, store.MaxPage} {
		var got []string
		after, pages := "", 0
		for more := true; more; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: more pages than apps", limit)
			}
			var page []*route.App
			page, more, err = s.PageApps(ctx, after, limit)
			if err != nil || len(page) > limit || (more && len(page) != limit) {
				t.Fatalf("limit %d after %q: %d apps, more %v, %v", limit, after, len(page), more, err)
			}
			for _, a := range page {
				got = append(got, a.ID)
			}
			if len(page) > 0 {
				after = page[len(page)-1].ID
			}
		}
		if wantPages := (len(want) + limit - 1) / limit; !slices.Equal(got, want) || pages != wantPages {
			t.Errorf("limit %d: %v in %d pages, want %v in %d", limit, got, pages, want, wantPages)
		}
	}
	if logs.count("bad stored value") == 0 {
		t.Error("the values that do not read were not logged")
	}
	for _, limit := range []int{0, -1, store.MaxPage + 1} {
		if _, _, err := s.PageApps(ctx, "", limit); err == nil {
			t.Errorf("limit %d: no error", limit)
		}
	}
}

// TestRecordsAt: the record sets at one name, of every type, and none at
// another name, under it or in another zone.
func TestRecordsAt(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	for _, r := range []route.Record{
		{Zone: "z.test", Name: "www.z.test", Type: "A"},
		{Zone: "z.test", Name: "www.z.test", Type: "TXT"},
		{Zone: "z.test", Name: "a.www.z.test", Type: "A"},
		{Zone: "z.test", Name: "*.z.test", Type: "A"},
		{Zone: "y.test", Name: "www.z.test", Type: "AAAA"},
	} {
		mustPut(t, s.PutRecord(ctx, &r))
	}
	for _, c := range []struct{ zone, name, want string }{
		{"z.test", "www.z.test", "A TXT"},
		{"z.test", "*.z.test", "A"},
		{"z.test", "a.z.test", ""},
		{"y.test", "www.z.test", "AAAA"},
	} {
		recs, err := s.RecordsAt(ctx, c.zone, c.name)
		var types []string
		for _, r := range recs {
			if r.Zone != c.zone || r.Name != c.name {
				t.Errorf("%s %s: got %+v", c.zone, c.name, r)
			}
			types = append(types, r.Type)
		}
		if got := fmt.Sprint(types); err != nil || got != "["+c.want+"]" {
			t.Errorf("RecordsAt(%s, %s) = %s, %v; want [%s]", c.zone, c.name, got, err, c.want)
		}
	}
}
