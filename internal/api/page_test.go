package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// pageBody is any list route's answer: its items under one key, and next.
type pageBody struct {
	items []string
	next  *string
	keys  []string // the top-level keys, to check the shape
}

// getPage fetches path and reads the item names (by field) under key.
func (e *env) getPage(path, key, field string) pageBody {
	e.t.Helper()
	r := e.ok("GET", path, nil, 200)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &m); err != nil {
		e.t.Fatalf("GET %s: %v: %s", path, err, r.body)
	}
	var p pageBody
	for k := range m {
		p.keys = append(p.keys, k)
	}
	slices.Sort(p.keys)
	var items []map[string]any
	if err := json.Unmarshal(m[key], &items); err != nil || items == nil {
		e.t.Fatalf("GET %s: %q is no list: %s", path, key, r.body)
	}
	for _, it := range items {
		p.items = append(p.items, fmt.Sprint(it[field]))
	}
	if n, ok := m["next"]; ok {
		var s string
		if err := json.Unmarshal(n, &s); err != nil {
			e.t.Fatalf("GET %s: next %s", path, n)
		}
		p.next = &s
	}
	return p
}

// walk pages through path with limit, following next, and returns every
// item and the number of pages. Bounded by want's length.
func (e *env) walk(path, key, field string, limit, want int) ([]string, int) {
	e.t.Helper()
	var all []string
	after := ""
	for pages := 1; pages <= want+2; pages++ {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if pages > 1 {
			q.Set("after", after)
		}
		p := e.getPage(path+"?"+q.Encode(), key, field)
		if len(p.items) > limit {
			e.t.Fatalf("%s: page %d holds %d items, limit %d", path, pages, len(p.items), limit)
		}
		all = append(all, p.items...)
		if p.next == nil {
			return all, pages
		}
		after = *p.next
	}
	e.t.Fatalf("%s: more pages than items", path)
	return nil, 0
}

// TestListPages: every list route pages with ?limit=&after=, in the
// whole list's order, "next" on every page but the last; without either
// field the answer is the whole list in the shape it always had, with no
// "next".
func TestListPages(t *testing.T) {
	var hosts []route.HostInfo
	for _, id := range []string{"web-3", "web-1", "web-5", "web-2", "web-4"} {
		hosts = append(hosts, route.HostInfo{HostID: id, State: route.HostVerified})
	}
	e := newEnv(t, func(o *Options) { o.Hosts = func() []route.HostInfo { return hosts } })
	var apps, doms, recs []string
	for i := range 7 {
		id := fmt.Sprintf("app-%d", i)
		e.ok("PUT", "/api/v3/apps/"+id, nil, 200)
		apps = append(apps, id)
	}
	e.ok("PUT", "/api/v3/apps/gone", nil, 200)
	e.ok("DELETE", "/api/v3/apps/gone", nil, 204) // its delete marker stays in the store
	for i := range 5 {
		d := fmt.Sprintf("www.shop-%d.example.org", i)
		e.ok("PUT", "/api/v3/domains/"+d, map[string]any{"app": "app-0"}, 200)
		doms = append(doms, d)
	}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", map[string]any{"gateways": []string{"127.0.0.1"}}, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.net", map[string]any{"gateways": []string{"127.0.0.1"}}, 200)
	for _, rr := range []string{"www/A", "www/AAAA", "mail/A", "www/TXT", "api/A"} {
		e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/"+rr, map[string]any{"values": []string{valueFor(rr)}}, 200)
		name, typ, _ := strings.Cut(rr, "/")
		recs = append(recs, name+".apps.example.com "+typ)
	}
	slices.Sort(recs)
	for i := range recs {
		recs[i] = strings.Replace(recs[i], " ", "/", 1)
	}
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"app-1"}}, 200)
	e.ok("PUT", "/api/v3/hosts/keys/web-2", map[string]any{"public_key": testKey, "apps": []string{"app-1"}}, 200)

	cases := []struct {
		path, key, field string
		want             []string
	}{
		{"/api/v3/apps", "apps", "id", apps},
		{"/api/v3/domains", "domains", "domain", doms},
		{"/api/v3/dns/zones", "zones", "name", []string{"apps.example.com", "apps.example.net"}},
		{"/api/v3/hosts/keys", "keys", "host_id", []string{"web-1", "web-2"}},
		{"/api/v3/hosts", "hosts", "host_id", []string{"web-1", "web-2", "web-3", "web-4", "web-5"}},
	}
	for _, c := range cases {
		whole := e.getPage(c.path, c.key, c.field)
		if !slices.Equal(whole.items, c.want) || whole.next != nil || !slices.Equal(whole.keys, []string{c.key}) {
			t.Errorf("GET %s: %v next %v keys %v, want %v and no next", c.path, whole.items, whole.next, whole.keys, c.want)
		}
		for _, limit := range []int{1, 2, len(c.want), 1000} {
			got, pages := e.walk(c.path, c.key, c.field, limit, len(c.want))
			if wantPages := max(1, (len(c.want)+limit-1)/limit); !slices.Equal(got, c.want) || pages != wantPages {
				t.Errorf("%s by %d: %v in %d pages, want %v in %d", c.path, limit, got, pages, c.want, wantPages)
			}
		}
		// after alone: the default page size, from that item on
		p := e.getPage(c.path+"?after="+url.QueryEscape(c.want[0]), c.key, c.field)
		if !slices.Equal(p.items, c.want[1:]) || p.next != nil {
			t.Errorf("%s?after=%s: %v next %v, want %v", c.path, c.want[0], p.items, p.next, c.want[1:])
		}
	}

	// records: the cursor is {name}/{type}
	var got []string
	after := ""
	for range len(recs) + 1 {
		r := e.ok("GET", "/api/v3/dns/zones/apps.example.com/records?limit=2&after="+url.QueryEscape(after), nil, 200)
		var b struct {
			Records []route.Record
			Next    *string
		}
		decodeInto(t, r, &b)
		for _, rec := range b.Records {
			got = append(got, rec.Name+"/"+rec.Type)
		}
		if b.Next == nil {
			break
		}
		after = *b.Next
	}
	if !slices.Equal(got, recs) {
		t.Errorf("records by 2: %v, want %v", got, recs)
	}
	whole := e.getPage("/api/v3/dns/zones/apps.example.com/records", "records", "name")
	if len(whole.items) != len(recs) || whole.next != nil {
		t.Errorf("records whole: %v next %v", whole.items, whole.next)
	}
}

// TestRecordCursorAsNamed: a records cursor is read as a record route
// reads its name and type: relative to the zone, "@" for the apex, in any
// case, with or without the final dot. Taken as typed, "www/A" sorted
// before "www.{zone} A" and repeated it, "@/A" and "WWW/A" before every
// name, so the page started over from the first record, and "www/a"
// after every type of www, skipping them. A cursor no record name could
// be is refused naming after.
func TestRecordCursorAsNamed(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", map[string]any{"gateways": []string{"127.0.0.1"}}, 200)
	for _, rr := range []string{"@/A", "api/A", "www/A", "www/AAAA", "www/TXT", "zz/A"} {
		e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/"+rr, map[string]any{"values": []string{valueFor(rr)}}, 200)
	}
	const path = "/api/v3/dns/zones/apps.example.com/records"
	for _, c := range []struct {
		after string
		want  []string // the page of 2 after it
	}{
		{"www.apps.example.com/A", []string{"www.apps.example.com/AAAA", "www.apps.example.com/TXT"}}, // "next" as given
		{"www/A", []string{"www.apps.example.com/AAAA", "www.apps.example.com/TXT"}},
		{"WWW.apps.example.com./a", []string{"www.apps.example.com/AAAA", "www.apps.example.com/TXT"}},
		{"www", []string{"www.apps.example.com/A", "www.apps.example.com/AAAA"}}, // a name alone: its first set
		{"@/A", []string{"www.apps.example.com/A", "www.apps.example.com/AAAA"}}, // the apex sorts after api
		{"apps.example.com/A", []string{"www.apps.example.com/A", "www.apps.example.com/AAAA"}},
		{"api/a", []string{"apps.example.com/A", "www.apps.example.com/A"}},
	} {
		r := e.ok("GET", path+"?limit=2&after="+url.QueryEscape(c.after), nil, 200)
		var b struct{ Records []route.Record }
		decodeInto(t, r, &b)
		var got []string
		for _, rec := range b.Records {
			got = append(got, rec.Name+"/"+rec.Type)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("after=%s: %v, want %v", c.after, got, c.want)
		}
	}
	for _, after := range []string{"www.example.org./A", "bad name/A", "www/MX"} {
		r := e.do("GET", path+"?limit=2&after="+url.QueryEscape(after), token, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("after=%s: %d, want 400: %s", after, r.status, r.body)
			continue
		}
		if p := problemOf(t, r); !strings.HasPrefix(p.Detail, "after: ") {
			t.Errorf("after=%s: %q does not name after", after, p.Detail)
		}
	}
}

// valueFor is a value that a record of rr's type takes.
func valueFor(rr string) string {
	switch {
	case strings.HasSuffix(rr, "/AAAA"):
		return "2001:db8::1"
	case strings.HasSuffix(rr, "/TXT"):
		return "hello"
	}
	return "192.0.2.1"
}

// TestListPageBadInput: a limit that is no integer from 1 to 1000 in
// plain decimal (01 and +1 were read as 1: a number spelled so was
// likely built by something other than the client meant), a paging
// field given twice, or a query that does not parse (a bad
// %-escape, a ';' separator: net/url drops such a pair, and with it the
// limit, so the page asked for became the whole list), is refused with a
// 400 problem on every list route.
func TestListPageBadInput(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", map[string]any{"gateways": []string{"127.0.0.1"}}, 200)
	lists := []string{"/api/v3/apps", "/api/v3/domains", "/api/v3/dns/zones", "/api/v3/dns/zones/apps.example.com/records", "/api/v3/hosts/keys", "/api/v3/hosts"}
	for _, path := range lists {
		for _, q := range []string{"limit=0", "limit=-1", "limit=1001", "limit=x", "limit=", "limit=1.5", "limit=1&limit=2", "after=a&after=b",
			"limit=%zz", "limit=1;", "limit=5;after=x", "after=%zz", "after=a&limit=1%",
			"limit=01", "limit=0100", "limit=%2B1", "limit=+1", "limit=%201", "limit=1%20", "limit=-0", "limit=1e2", "limit=0x10", "limit=1_0"} {
			r := e.do("GET", path+"?"+q, token, nil)
			if r.status != http.StatusBadRequest {
				t.Errorf("GET %s?%s: %d, want 400: %s", path, q, r.status, r.body)
				continue
			}
			if p := problemOf(t, r); !strings.Contains(p.Detail, "limit") && !strings.Contains(p.Detail, "after") {
				t.Errorf("GET %s?%s: detail %q names neither field", path, q, p.Detail)
			}
		}
	}
}

// listHook counts ListApps and PageApps calls, and blocks the first
// blockWhole and blockPages of them until release is closed.
type listHook struct {
	Store
	blockWhole, blockPages int32
	entered, release       chan struct{}
	whole, pages           atomic.Int32
}

func (h *listHook) hold(n, block int32) {
	if n <= block {
		h.entered <- struct{}{}
		<-h.release
	}
}

func (h *listHook) ListApps(ctx context.Context) ([]*route.App, error) {
	h.hold(h.whole.Add(1), h.blockWhole)
	return h.Store.ListApps(ctx)
}

func (h *listHook) PageApps(ctx context.Context, after string, limit int) ([]*route.App, bool, error) {
	h.hold(h.pages.Add(1), h.blockPages)
	return h.Store.PageApps(ctx, after, limit)
}

// TestListsTakeTurns: while every turn for whole lists (or for pages) is
// taken, another such request waits for one and reads nothing from the
// store (one whose client gives up first is answered 503 having read
// nothing), and the other kind of list is still answered.
func TestListsTakeTurns(t *testing.T) {
	cases := []struct {
		name, path, other string
		turns             int
		block             func(h *listHook) *int32
		count             func(h *listHook) int32
	}{
		{"whole", "/api/v3/apps", "/api/v3/apps?limit=10", maxWholeLists,
			func(h *listHook) *int32 { return &h.blockWhole }, func(h *listHook) int32 { return h.whole.Load() }},
		{"page", "/api/v3/apps?limit=10", "/api/v3/apps", maxPageLists,
			func(h *listHook) *int32 { return &h.blockPages }, func(h *listHook) int32 { return h.pages.Load() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, notFound := newStore(t)
			h := &listHook{Store: st, entered: make(chan struct{}, 8), release: make(chan struct{})}
			*c.block(h) = int32(c.turns)
			a, err := New(Options{Store: h, NotFound: notFound, ControlToken: token})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(a)
			t.Cleanup(srv.Close)
			e := &env{t: t, srv: srv, st: st}
			e.ok("PUT", "/api/v3/apps/shop", nil, 200)

			done := make(chan int, c.turns)
			for range c.turns {
				go func() {
					req, _ := http.NewRequest("GET", srv.URL+c.path, nil)
					req.Header.Set("Authorization", "Bearer "+token)
					res, err := srv.Client().Do(req)
					if err != nil {
						done <- 0
						return
					}
					res.Body.Close()
					done <- res.StatusCode
				}()
			}
			for range c.turns {
				<-h.entered
			}
			if p := e.getPage(c.other, "apps", "id"); !slices.Equal(p.items, []string{"shop"}) {
				t.Errorf("%s while every %s turn is taken: %v", c.other, c.name, p.items)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			req := httptest.NewRequestWithContext(ctx, "GET", c.path, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, req)
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
				t.Errorf("%s with no turn free and its client gone: %d %s, want 503 with Retry-After", c.path, rec.Code, rec.Body)
			}
			if n := c.count(h); n != int32(c.turns) {
				t.Errorf("%d requests for %s read the store, want %d", n, c.path, c.turns)
			}
			close(h.release)
			for range c.turns {
				if code := <-done; code != http.StatusOK {
					t.Errorf("%s that had its turn: %d, want 200", c.path, code)
				}
			}
			// the turns are given back
			if p := e.getPage(c.path, "apps", "id"); !slices.Equal(p.items, []string{"shop"}) || c.count(h) != int32(c.turns)+1 {
				t.Errorf("%s after the turns were given back: %v, %d store reads", c.path, p.items, c.count(h))
			}
		})
	}
}

// appLister counts ListApps calls.
type appLister struct {
	Store
	calls atomic.Int32
}

func (h *appLister) ListApps(ctx context.Context) ([]*route.App, error) {
	h.calls.Add(1)
	return h.Store.ListApps(ctx)
}

// TestHostKeyPutReadsOnlyItsApps: a host key PUT checks the apps it
// names by their keys, not by reading every app of the platform (twice),
// and still refuses one that does not exist.
func TestHostKeyPutReadsOnlyItsApps(t *testing.T) {
	var h *appLister
	e := newEnv(t, func(o *Options) { h = &appLister{Store: o.Store}; o.Store = h })
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"shop"}}, 200)
	r := e.do("PUT", "/api/v3/hosts/keys/web-2", token, map[string]any{"public_key": testKey, "apps": []string{"shop", "nope"}})
	if r.status != http.StatusBadRequest || !strings.Contains(problemOf(t, r).Detail, `apps[1]: "nope" does not exist`) {
		t.Errorf("key naming a missing app: %d %s", r.status, r.body)
	}
	if n := h.calls.Load(); n != 0 {
		t.Errorf("host key PUTs listed every app %d times", n)
	}
}

// recordLister counts ListRecords calls.
type recordLister struct {
	Store
	calls atomic.Int32
}

func (h *recordLister) ListRecords(ctx context.Context, zone string) ([]*route.Record, error) {
	h.calls.Add(1)
	return h.Store.ListRecords(ctx, zone)
}

// TestRecordPutReadsOnlyItsName: a record PUT checks for a CNAME beside
// it among the sets at its own name, not by reading the whole zone, which
// made each write slower than the last (235 writes/s at 1,000 records,
// 66/s at 3,000), and still refuses what shares a name with a CNAME.
func TestRecordPutReadsOnlyItsName(t *testing.T) {
	var h *recordLister
	e := newEnv(t, func(o *Options) { h = &recordLister{Store: o.Store}; o.Store = h })
	const z = "/api/v3/dns/zones/apps.example.com/records/"
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	e.ok("PUT", z+"www/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("PUT", z+"www/AAAA", `{"values":["2001:db8::1"]}`, 200)
	e.ok("PUT", z+"alias/CNAME", `{"values":["shop.example.org"]}`, 200)
	e.ok("PUT", z+"www.alias/A", `{"values":["192.0.2.1"]}`, 200) // under the alias, not at it
	for _, c := range []struct{ path, body, names string }{
		{"www/CNAME", `{"values":["shop.example.org"]}`, "holds A records"},
		{"alias/TXT", `{"values":["tok"]}`, "holds CNAME records"},
	} {
		if p := problemOf(t, e.ok("PUT", z+c.path, c.body, 400)); !strings.Contains(p.Detail, c.names) {
			t.Errorf("PUT %s: detail %q, want it to say it %s", c.path, p.Detail, c.names)
		}
	}
	if n := h.calls.Load(); n != 0 {
		t.Errorf("record PUTs read the whole zone %d times", n)
	}
}
