package store_test

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
)

// TestPageApps: pages walk every app in id order, as ListApps lists
// them, skipping deleted keys and values that do not read (logged, as
// ListApps skips them), and "more" is false on the last page even when
// only skipped keys follow it.
//
// It runs as pages list the bucket's keys (no routing table follows the
// store) and as they take the names from the table, which lists none.
func TestPageApps(t *testing.T) {
	t.Parallel()
	t.Run("list", func(t *testing.T) { testPageApps(t, false) })
	t.Run("table", func(t *testing.T) { testPageApps(t, true) })
}

func testPageApps(t *testing.T, follow bool) {
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
	lists := keyLists(t, ns.ClientURL())
	if follow {
		run(t, s)
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
	switch n := lists.Load(); {
	case follow && n != 0:
		t.Errorf("%d pages listed every key while the table followed the store", n)
	case !follow && n == 0:
		t.Error("no page listed the keys, with no table to read (is keyLists counting?)")
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

// keyLists counts the requests for a stream's subjects (how a page
// lists every key of a bucket) that reach the server at url.
func keyLists(t *testing.T, url string) *atomic.Int32 {
	t.Helper()
	_, nc := js(t, url)
	var n atomic.Int32
	if _, err := nc.Subscribe("$JS.API.STREAM.INFO.>", func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte("subjects_filter")) {
			n.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestPagesFollowWrites: pages from the routing table show a write made
// just before them (they wait for the table to apply it), apps and
// domains, and list no keys.
func TestPagesFollowWrites(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	lists := keyLists(t, ns.ClientURL())
	run(t, s)
	ctx := t.Context()
	domains := func() []string {
		t.Helper()
		var out []string
		after := ""
		for {
			page, more, err := s.PageDomains(ctx, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range page {
				out = append(out, d.Domain)
				after = d.Domain
			}
			if !more {
				return out
			}
		}
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "shop"}))
	for _, d := range []string{"c.example", "a.example", "b.example"} {
		mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: d, App: "shop", Token: "t"}))
	}
	if got := domains(); !slices.Equal(got, []string{"a.example", "b.example", "c.example"}) {
		t.Fatalf("domains %v", got)
	}
	mustPut(t, s.DeleteDomain(ctx, "b.example"))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "bb.example", App: "shop", Token: "t"}))
	if got := domains(); !slices.Equal(got, []string{"a.example", "bb.example", "c.example"}) {
		t.Fatalf("domains after a delete and a put %v", got)
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "blog"}))
	apps, more, err := s.PageApps(ctx, "", 10)
	if err != nil || more || len(apps) != 2 || apps[0].ID != "blog" || apps[1].ID != "shop" {
		t.Fatalf("apps %v, more %v, %v", apps, more, err)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("%d pages listed every key while the table followed the store", n)
	}
}

// TestPagesAfterRunOnANewBuilder: Run stopped and started again on
// another builder (a table of its own) pages the new table's names, not
// the ones sorted for the first table, whose versions the new one's may
// repeat.
func TestPagesAfterRunOnANewBuilder(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a"}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "a.example", App: "a", Token: "t"}))
	start := func(apps int) (stop func()) {
		t.Helper()
		live := new(route.Live)
		stop = startRun(t, s, live)
		testutil.WaitFor(t, 20*time.Second, func() bool { return live.Load().Apps() == apps }, "the store never loaded")
		return stop
	}
	pages := func() (apps, domains []string) {
		t.Helper()
		as, _, err := s.PageApps(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			apps = append(apps, a.ID)
		}
		ds, _, err := s.PageDomains(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			domains = append(domains, d.Domain)
		}
		return apps, domains
	}
	stop := start(1)
	if apps, domains := pages(); !slices.Equal(apps, []string{"a"}) || !slices.Equal(domains, []string{"a.example"}) {
		t.Fatalf("first run: apps %v, domains %v", apps, domains)
	}
	stop()
	mustPut(t, s.PutApp(ctx, &route.App{ID: "b"}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "b.example", App: "b", Token: "t"}))
	start(2)
	if apps, domains := pages(); !slices.Equal(apps, []string{"a", "b"}) || !slices.Equal(domains, []string{"a.example", "b.example"}) {
		t.Fatalf("second run, new builder: apps %v, domains %v; want both of each", apps, domains)
	}
}
