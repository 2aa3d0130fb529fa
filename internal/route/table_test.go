package route

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func testTable() *Live {
	var l Live
	b := NewBuilder(&l)
	b.Replace(State{
		Zones: []*Zone{{Name: "apps.example.com"}, {Name: "localhost"}},
		Apps:  []*App{{ID: "hello", Status: StatusActive}, {ID: "shop", Status: StatusActive}},
		Domains: []*Domain{
			{Domain: "www.shop.test", App: "shop", Verified: true},
			{Domain: "pending.test", App: "shop", Verified: false},
			{Domain: "orphan.test", App: "gone", Verified: true},
			{Domain: "www.localhost", App: "shop", Verified: true}, // a custom domain under a served zone
		},
	})
	return &l
}

func TestLookup(t *testing.T) {
	tbl := testTable().Load()
	tests := []struct {
		host string
		kind Kind
		app  string
	}{
		{"hello.apps.example.com", KindApp, "hello"},
		{"HELLO.Apps.Example.COM", KindApp, "hello"},
		{"hello.apps.example.com:8443", KindApp, "hello"},
		{"hello.apps.example.com.", KindApp, "hello"},
		{"hello.apps.example.com.:443", KindApp, "hello"},
		{"hello.localhost:8080", KindApp, "hello"},
		{"api.apps.example.com", KindAPI, ""},
		{"api.localhost", KindAPI, ""},
		{"nope.apps.example.com", KindUnknown, ""},
		{"a.hello.apps.example.com", KindUnknown, ""},
		{"apps.example.com", KindUnknown, ""},
		{"www.shop.test", KindApp, "shop"},
		{"WWW.Shop.Test:80", KindApp, "shop"},
		{"pending.test", KindUnknown, ""},  // unverified mappings never route
		{"orphan.test", KindUnknown, ""},   // mapping to a missing app
		{"www.localhost", KindApp, "shop"}, // custom domain under a served zone
		{"", KindUnknown, ""},
		{"127.0.0.1", KindUnknown, ""},
		{"[::1]:8080", KindUnknown, ""},
		{"hello..apps.example.com", KindUnknown, ""},
		{"-hello.apps.example.com", KindUnknown, ""},
		{"hel_lo.apps.example.com", KindUnknown, ""},
		{"hello.apps.example.com:", KindApp, "hello"}, // RFC 3986 allows an empty port
		{"hello.apps.example.com:x:y", KindUnknown, ""},
		{"héllo.apps.example.com", KindUnknown, ""}, // valid IDNA, but no such app
	}
	for _, tt := range tests {
		m := tbl.Lookup(tt.host)
		if m.Kind != tt.kind {
			t.Errorf("Lookup(%q).Kind = %v, want %v", tt.host, m.Kind, tt.kind)
			continue
		}
		if tt.app != "" && (m.App == nil || m.App.ID != tt.app) {
			t.Errorf("Lookup(%q).App = %+v, want %s", tt.host, m.App, tt.app)
		}
	}
}

// TestLookupMatchesOnlyCleanNames: a host is looked up as it came before it
// is normalized, so a store key that is not a clean name (which no
// normalized host can equal) must not be matched by a host that equals it
// byte for byte, nor may a name too long to be clean route because its
// parts are stored.
func TestLookupMatchesOnlyCleanNames(t *testing.T) {
	long := strings.Repeat(strings.Repeat("z", 60)+".", 4) + "test" // 248 bytes: a clean zone
	b := NewBuilder(new(Live))
	b.Replace(State{
		Zones: []*Zone{{Name: "apps.test"}, {Name: "Upper.Test"}, {Name: "bad_zone.test"}, {Name: long}},
		Apps: []*App{{ID: "shop"}, {ID: "Shop"}, {ID: "a_b"}, {ID: "-x"}, {ID: strings.Repeat("s", 63)},
			{ID: strings.Repeat("s", 70)}},
		Domains: []*Domain{
			{Domain: "WWW.Shop.Test", App: "shop", Verified: true},
			{Domain: "www.shop.test:443", App: "shop", Verified: true},
			{Domain: "www.shop.test.", App: "shop", Verified: true},
			{Domain: "ok.shop.test", App: "shop", Verified: true},
		},
	})
	tbl := b.Live().Load()
	tests := []struct {
		host string
		kind Kind
		name string
	}{
		{"shop.apps.test", KindApp, "shop.apps.test"},
		{"Shop.apps.test", KindApp, "shop.apps.test"}, // normalized to the clean app, not the stored "Shop"
		{"a_b.apps.test", KindUnknown, ""},
		{"-x.apps.test", KindUnknown, ""},
		{"shop.Upper.Test", KindUnknown, "shop.upper.test"},
		{"shop.bad_zone.test", KindUnknown, ""},
		{"WWW.Shop.Test", KindUnknown, "www.shop.test"},
		{"www.shop.test:443", KindUnknown, "www.shop.test"},
		{"www.shop.test.", KindUnknown, "www.shop.test"},
		{"OK.shop.test", KindApp, "ok.shop.test"},
		{"shop." + long, KindApp, "shop." + long},               // 253 bytes
		{strings.Repeat("s", 63) + "." + long, KindUnknown, ""}, // 312 bytes: not a name
		{strings.Repeat("s", 70) + ".apps.test", KindUnknown, ""},
	}
	for _, tt := range tests {
		m := tbl.Lookup(tt.host)
		if m.Kind != tt.kind || m.Name != tt.name {
			t.Errorf("Lookup(%q) = kind %v, name %q; want kind %v, name %q", tt.host, m.Kind, m.Name, tt.kind, tt.name)
		}
		if m.Kind == KindApp && m.App != tbl.App("shop") {
			t.Errorf("Lookup(%q) routes to app %q, want shop", tt.host, m.App.ID)
		}
	}
	// Every key stays found by its exact bytes.
	for _, id := range []string{"Shop", "a_b", "-x", strings.Repeat("s", 70)} {
		if a := tbl.App(id); a == nil || a.ID != id {
			t.Errorf("App(%q) = %v", id, a)
		}
	}
	for _, d := range []string{"WWW.Shop.Test", "www.shop.test:443", "www.shop.test."} {
		if got := tbl.Domain(d); got == nil || got.Domain != d {
			t.Errorf("Domain(%q) = %v", d, got)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"example.com", "example.com", true},
		{"Example.COM:443", "example.com", true},
		{"example.com.", "example.com", true},
		{"bücher.example", "xn--bcher-kva.example", true},
		{"BÜCHER.example", "xn--bcher-kva.example", true},
		{"a b.example", "", false},
		{"", "", false},
		{".", "", false},
		{"exa$mple.com", "", false},
		// A port is digits or nothing (RFC 9110 §7.2, RFC 3986 §3.2.3):
		// anything else is not this name with a port.
		{"example.com:80", "example.com", true},
		{"example.com:", "example.com", true},
		{"example.com:0080", "example.com", true},
		{"example.com:99999", "example.com", true},
		{"example.com:abc", "", false},
		{"example.com:-1", "", false},
		{"example.com:+80", "", false},
		{"example.com: 80", "", false},
		{"example.com:80 ", "", false},
		{"example.com:8a", "", false},
		{"example.com:0x50", "", false},
		{"example.com:８０", "", false},
		{"Example.COM:abc", "", false},
		{"example.com.:abc", "", false},
		{"example.com::80", "", false},
		// IPv6 literals are not names, with or without a port.
		{"[::1]", "", false},
		{"[::1]:80", "", false},
		{"[::1]:abc", "", false},
		{"::1", "", false},
	}
	for _, tt := range tests {
		got, ok := NormalizeHost(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBadPort(t *testing.T) {
	tests := []struct {
		in  string
		bad bool
	}{
		{"example.com", false},
		{"example.com:443", false},
		{"example.com:", false},
		{"example.com:99999", false},
		{"[::1]", false},
		{"[::1]:80", false},
		{"[::1]:", false},
		{"a:b:c", false}, // malformed, but not for its port: NormalizeHost refuses it
		{"", false},
		{"example.com:abc", true},
		{"example.com:-1", true},
		{"example.com:+80", true},
		{"example.com: 80", true},
		{"example.com:８０", true},
		{"[::1]:abc", true},
	}
	for _, tt := range tests {
		if got := BadPort(tt.in); got != tt.bad {
			t.Errorf("BadPort(%q) = %v, want %v", tt.in, got, tt.bad)
		}
		if tt.bad {
			if n, ok := NormalizeHost(tt.in); ok {
				t.Errorf("NormalizeHost(%q) = %q, true for a bad port", tt.in, n)
			}
		}
	}
}

func TestLookupCleanNameDoesNotAllocate(t *testing.T) {
	tbl := testTable().Load()
	n := testing.AllocsPerRun(100, func() { tbl.Lookup("hello.apps.example.com") })
	if n != 0 {
		t.Fatalf("Lookup allocated %v times per run", n)
	}
}

func TestBuilderPublishesCopies(t *testing.T) {
	l := testTable()
	before := l.Load()
	b := NewBuilder(l)
	b.Replace(State{Zones: before.Zones(), Apps: []*App{{ID: "hello"}}})
	b.PutApp(&App{ID: "new"})
	if before.Lookup("new.localhost").Kind != KindUnknown {
		t.Fatal("an old snapshot saw a later change")
	}
	if l.Load().Lookup("new.localhost").Kind != KindApp {
		t.Fatal("the new snapshot misses the change")
	}
	b.DeleteApp("new")
	if l.Load().Lookup("new.localhost").Kind != KindUnknown {
		t.Fatal("delete not published")
	}
}

// TestBuilderHold: edits under Hold are published together at the
// release, changing one working copy in place; a snapshot published
// before (by an earlier release, or by a host change in the middle of a
// hold) never sees an edit made after it, in any part (apps, domains,
// records, revisions).
func TestBuilderHold(t *testing.T) {
	l := testTable()
	b := NewBuilder(l)
	b.Replace(State{Zones: l.Load().Zones(), Apps: []*App{{ID: "hello"}}})
	zone := l.Load().Zones()[0].Name
	app := func(tb *Table, id string) bool { return tb.Lookup(id+"."+zone).Kind == KindApp }
	dom := func(tb *Table, d string) bool { m := tb.Lookup(d); return m.Kind == KindApp && m.Zone == nil }
	rec := func(tb *Table, name string) bool {
		for _, r := range tb.Records(zone) {
			if r.Name == name {
				return true
			}
		}
		return false
	}
	edit := func(i int) {
		id := fmt.Sprintf("app%d", i)
		b.PutApp(&App{ID: id})
		b.PutDomain(&Domain{Domain: id + ".example.org", App: id, Verified: true})
		b.PutRecord(&Record{Zone: zone, Name: id, Type: "TXT", TTL: 60, Values: []string{"v"}}, uint64(100+i))
	}
	has := func(tb *Table, i int) bool {
		id := fmt.Sprintf("app%d", i)
		a, d, r := app(tb, id), dom(tb, id+".example.org"), rec(tb, id)
		if a != d || d != r {
			t.Fatalf("snapshot holds part of edit %d: app %v, domain %v, record %v", i, a, d, r)
		}
		return a
	}

	start := l.Load()
	release := b.Hold()
	edit(1)
	edit(2)
	if l.Load() != start {
		t.Fatal("an edit under Hold was published before the release")
	}
	release()
	release() // a second call does nothing
	t1 := l.Load()
	if !has(t1, 1) || !has(t1, 2) || has(start, 1) {
		t.Fatalf("after the release: app1 %v app2 %v; the snapshot before it: app1 %v", has(t1, 1), has(t1, 2), has(start, 1))
	}
	serial := t1.Serial(zone)

	release = b.Hold()
	edit(3)
	b.SetHost(&Host{ID: "h1", Apps: []string{"hello"}, State: HostVerified}) // publishes edit 3
	t2 := l.Load()
	edit(4)
	b.DeleteApp("app1")
	b.DeleteDomain("app1.example.org")
	b.DeleteRecord(zone, "app1", "TXT", 200)
	release()
	t3 := l.Load()
	switch {
	case !has(t2, 3) || has(t2, 4) || !has(t2, 1):
		t.Fatalf("the host change's snapshot: app3 %v (want true), app4 %v (want false), app1 %v (want true)", has(t2, 3), has(t2, 4), has(t2, 1))
	case !has(t3, 4) || has(t3, 1):
		t.Fatalf("after the second release: app4 %v (want true), app1 %v (want false)", has(t3, 4), has(t3, 1))
	case !has(t1, 1) || has(t1, 3):
		t.Fatal("an earlier snapshot changed under later edits")
	case t1.Serial(zone) != serial || t3.Serial(zone) <= serial:
		t.Fatalf("serials: first snapshot %d (was %d), last %d", t1.Serial(zone), serial, t3.Serial(zone))
	}
}

func TestPools(t *testing.T) {
	var l Live
	b := NewBuilder(&l)
	b.SetHost(&Host{ID: "h2", Apps: []string{"a"}, State: HostVerified})
	b.SetHost(&Host{ID: "h1", Apps: []string{"a", "b"}, State: HostVerified})
	b.SetHost(&Host{ID: "h3", Apps: []string{"a"}, State: HostProvisional})
	b.SetHost(&Host{ID: "h4", Apps: []string{"claimed"}, State: HostProvisional})
	tbl := l.Load()
	if p := tbl.Pool("a"); len(p) != 2 || p[0].ID != "h1" || p[1].ID != "h2" {
		t.Fatalf("pool a = %v", ids(p))
	}
	if !tbl.HasHosts("a") || tbl.HasHosts("zzz") {
		t.Fatal("HasHosts wrong")
	}
	// An unverified claim is no host: the app answers 503, not 502.
	if tbl.HasHosts("claimed") {
		t.Fatal("HasHosts counts a provisional host's claim")
	}
	h1 := tbl.Pool("a")[0].Health
	b.SetHost(&Host{ID: "h1", Apps: []string{"a", "b"}, State: HostDraining})
	tbl = l.Load()
	if p := tbl.Pool("a"); len(p) != 1 || p[0].ID != "h2" {
		t.Fatalf("draining host still routable: %v", ids(p))
	}
	// A host that has left is no host: b, claimed by the draining h1
	// alone, answers 503, not 502.
	if tbl.HasHosts("b") || !tbl.HasHosts("a") {
		t.Fatalf("HasHosts b %v (want false: its only host left), a %v (want true)", tbl.HasHosts("b"), tbl.HasHosts("a"))
	}
	if len(tbl.Pool("b")) != 0 {
		t.Fatal("pool b should be empty")
	}
	if tbl.Hosts()[0].Health != h1 {
		t.Fatal("health not carried over a republish")
	}
	b.DeleteHost("h1")
	if len(l.Load().Hosts()) != 3 {
		t.Fatal("delete host")
	}
}

func ids(hs []*Host) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ID)
	}
	return out
}

func TestHealthBackoff(t *testing.T) {
	var h Health
	now := time.Unix(1000, 0)
	if h.Degraded(now) {
		t.Fatal("new host degraded")
	}
	d1 := h.Fail(now)
	d2 := h.Fail(now)
	if d2 <= d1 || !h.Degraded(now.Add(d1/2)) {
		t.Fatalf("back-off %v then %v", d1, d2)
	}
	if h.Degraded(now.Add(d2 + time.Millisecond)) {
		t.Fatal("still degraded after cool-down")
	}
	for range 20 {
		h.Fail(now)
	}
	if d := h.Fail(now); d != maxCoolDown {
		t.Fatalf("cool-down %v not capped", d)
	}
	h.OK()
	if h.Degraded(now) {
		t.Fatal("OK did not clear")
	}
}

// TestHealthTimeouts: three requests in a row left unanswered cool a
// host, unless it answered a request sent after them meanwhile (sent
// together to a slow endpoint, they time out together); an answer to a
// request sent before them says nothing about them.
func TestHealthTimeouts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		answered time.Duration // sent at t0+answered and answered; < 0: none
		cools    bool
	}{
		{"no answer", -1, true},
		{"answer to a request sent before", 0, true},
		{"answer to a request sent after", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Health
			h.Answered(t0.Add(-time.Minute)) // a host that answered once
			if tc.answered >= 0 {
				h.Answered(t0.Add(tc.answered))
			}
			sent, now := t0.Add(time.Millisecond), t0.Add(16*time.Second)
			for range timeoutsToCool {
				h.Timeout(now, sent)
			}
			if got := h.Degraded(now); got != tc.cools {
				t.Fatalf("degraded after %d timeouts: %v, want %v", timeoutsToCool, got, tc.cools)
			}
		})
	}
}

func TestRequestContext(t *testing.T) {
	type other struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), other{}, "v"))
	rc := &RequestContext{Context: parent}
	rc.Req.ID = "id1"
	ctx := context.WithValue(rc, struct{ k int }{1}, 2) // a context derived below it
	if got := RequestFrom(ctx); got != &rc.Req || got.ID != "id1" {
		t.Fatalf("RequestFrom = %v, want the carried request", got)
	}
	if ctx.Value(other{}) != "v" {
		t.Fatal("the parent's values are lost")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	if child.Err() == nil { // propagated at once, as through any context
		t.Fatal("cancelling the parent did not cancel a context derived from the carrier")
	}
	if RequestFrom(context.Background()) != nil {
		t.Fatal("RequestFrom found a request in an empty context")
	}
}

// TestNamesVersions: a table's apps (domains) version changes with every
// edit of the apps (domains), held or not, and a full Replace, so a
// sorted list kept for one version is never served for another set of
// names; a host change keeps both, so it does not force a sort.
func TestNamesVersions(t *testing.T) {
	var l Live
	b := NewBuilder(&l)
	b.Replace(State{Apps: []*App{{ID: "a"}}, Domains: []*Domain{{Domain: "d.test", App: "a"}}})
	type vs struct{ apps, domains uint64 }
	cur := func() vs { t := l.Load(); return vs{t.AppsVersion(), t.DomainsVersion()} }
	seen := map[uint64]bool{}
	step := func(name string, appsChange, domainsChange bool, f func()) {
		t.Helper()
		before := cur()
		f()
		after := cur()
		if (after.apps != before.apps) != appsChange || (after.domains != before.domains) != domainsChange {
			t.Errorf("%s: versions %v -> %v; want apps changed %v, domains changed %v", name, before, after, appsChange, domainsChange)
		}
		if appsChange {
			if seen[after.apps] {
				t.Errorf("%s: apps version %d given before", name, after.apps)
			}
			seen[after.apps] = true
		}
		if got := fmt.Sprint(l.Load().AppIDs(), l.Load().DomainNames()); name == "end" && got != "[b c] [e.test]" {
			t.Errorf("names %s", got)
		}
	}
	seen[cur().apps] = true
	step("put app", true, false, func() { b.PutApp(&App{ID: "b"}) })
	step("host", false, false, func() { b.SetHost(&Host{ID: "h", Apps: []string{"b"}}) })
	step("put domain", false, true, func() { b.PutDomain(&Domain{Domain: "e.test", App: "b"}) })
	step("held edits", true, true, func() {
		release := b.Hold()
		b.DeleteApp("a")
		b.PutApp(&App{ID: "c"})
		b.DeleteDomain("d.test")
		release()
	})
	step("replace", true, true, func() {
		b.Replace(State{Apps: []*App{{ID: "b"}, {ID: "c"}}, Domains: []*Domain{{Domain: "e.test", App: "b"}}})
	})
	step("end", false, false, func() {})
}
