package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestOpenRejectsBadOptions(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	for _, o := range []store.Options{{Replicas: -1}, {Replicas: 6}, {Resync: -time.Second}, {FullResync: -time.Second}, {LockTTL: time.Second}} {
		if _, err := store.Open(t.Context(), j, o); err == nil {
			t.Errorf("Open(%+v) succeeded", o)
		}
	}
	if _, err := store.Open(t.Context(), nil, store.Options{}); err == nil {
		t.Error("Open(nil) succeeded")
	}
	// Replicas 3 on a single server cannot be met: a clear error.
	if _, err := store.Open(t.Context(), j, store.Options{Replicas: 3}); err == nil {
		t.Error("Open with 3 replicas on one server succeeded")
	}
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()

	app := &route.App{ID: "shop", Mode: route.ModeHTTP, Status: route.StatusActive,
		CORS:      route.CORS{Origins: []string{"https://a.example"}},
		RateLimit: route.RateLimit{Requests: 10, Window: route.Duration(time.Minute)},
		Policy:    []route.PolicyRule{{Action: "deny", Methods: []string{"POST"}, Path: "/admin/*"}}}
	dom := &route.Domain{Domain: "www.shop.test", App: "shop", Token: "tok", Verified: true}
	zone := &route.Zone{Name: "apps.example.com", Gateways: []string{"127.0.0.1"}, TTL: 60}
	hk := &route.HostKey{HostID: "host-1", PublicKey: "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=", Apps: []string{"shop"}}

	type kind struct {
		name   string
		put    func() error
		get    func() (any, error)
		want   any
		list   func() (any, error)
		wantL  any
		del    func() error
		badPut []func() error
	}
	kinds := []kind{
		{"app", func() error { return s.PutApp(ctx, app) },
			func() (any, error) { return s.GetApp(ctx, "shop") }, app,
			func() (any, error) { return s.ListApps(ctx) }, []*route.App{app},
			func() error { return s.DeleteApp(ctx, "shop") },
			[]func() error{
				func() error { return s.PutApp(ctx, &route.App{ID: "Bad_ID"}) },
				func() error { return s.PutApp(ctx, &route.App{}) },
				func() error { return s.PutApp(ctx, nil) },
			}},
		{"domain", func() error { return s.PutDomain(ctx, dom) },
			func() (any, error) { return s.GetDomain(ctx, "www.shop.test") }, dom,
			func() (any, error) { return s.ListDomains(ctx) }, []*route.Domain{dom},
			func() error { return s.DeleteDomain(ctx, "www.shop.test") },
			[]func() error{
				func() error { return s.PutDomain(ctx, &route.Domain{Domain: "WWW.shop.test", App: "shop"}) },
				func() error { return s.PutDomain(ctx, &route.Domain{Domain: "x.test", App: ""}) },
			}},
		{"zone", func() error { return s.PutZone(ctx, zone) },
			func() (any, error) { return s.GetZone(ctx, "apps.example.com") }, zone,
			func() (any, error) { return s.ListZones(ctx) }, []*route.Zone{zone},
			func() error { return s.DeleteZone(ctx, "apps.example.com") },
			[]func() error{func() error { return s.PutZone(ctx, &route.Zone{Name: "bad zone"}) }}},
		{"host key", func() error { return s.PutHostKey(ctx, hk) },
			func() (any, error) { return s.GetHostKey(ctx, "host-1") }, hk,
			func() (any, error) { return s.ListHostKeys(ctx) }, []*route.HostKey{hk},
			func() error { return s.DeleteHostKey(ctx, "host-1") },
			[]func() error{func() error { return s.PutHostKey(ctx, &route.HostKey{}) }}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			if _, err := k.get(); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("get before put: %v, want ErrNotFound", err)
			}
			if err := k.del(); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("delete before put: %v, want ErrNotFound", err)
			}
			mustPut(t, k.put())
			got, err := k.get()
			if err != nil || !reflect.DeepEqual(got, k.want) {
				t.Fatalf("get = %+v, %v; want %+v", got, err, k.want)
			}
			l, err := k.list()
			if err != nil || !reflect.DeepEqual(l, k.wantL) {
				t.Fatalf("list = %+v, %v", l, err)
			}
			for i, bad := range k.badPut {
				if err := bad(); err == nil {
					t.Errorf("bad put %d accepted", i)
				}
			}
			l, _ = k.list()
			if !reflect.DeepEqual(l, k.wantL) {
				t.Fatalf("a bad put changed the bucket: %+v", l)
			}
			mustPut(t, k.del())
			if _, err := k.get(); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("get after delete: %v, want ErrNotFound", err)
			}
			if l, err := k.list(); err != nil || reflect.ValueOf(l).Len() != 0 {
				t.Fatalf("list after delete = %+v, %v", l, err)
			}
			mustPut(t, k.put()) // a deleted key can be written again
			if _, err := k.get(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRecords(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	ctx := t.Context()
	recs := []*route.Record{
		{Zone: "apps.example.com", Name: "*", Type: "A", TTL: 60, Values: []string{"127.0.0.1"}},
		{Zone: "apps.example.com", Name: "@", Type: "TXT", TTL: 60, Values: []string{"v=1"}},
		{Zone: "apps.example.com", Name: "_acme-challenge", Type: "TXT", TTL: 5, Values: []string{"tok"}},
		{Zone: "apps.example.com", Name: "a.b", Type: "CNAME", TTL: 5, Values: []string{"x."}},
		// A zone that is a suffix and one that is a prefix of the first:
		// neither may leak into the other's listing.
		{Zone: "example.com", Name: "*", Type: "A", TTL: 60, Values: []string{"10.0.0.1"}},
		{Zone: "apps.example.com.evil", Name: "www", Type: "A", TTL: 60, Values: []string{"10.0.0.2"}},
	}
	for _, r := range recs {
		mustPut(t, s.PutRecord(ctx, r))
	}
	got, err := s.ListRecords(ctx, "apps.example.com")
	if err != nil || len(got) != 4 {
		t.Fatalf("ListRecords = %d records, %v", len(got), err)
	}
	for _, r := range got {
		if r.Zone != "apps.example.com" {
			t.Fatalf("foreign record %+v", r)
		}
	}
	if got, _ := s.ListRecords(ctx, "example.com"); len(got) != 1 || got[0].Values[0] != "10.0.0.1" {
		t.Fatalf("example.com records = %+v", got)
	}
	mustPut(t, s.DeleteRecord(ctx, "apps.example.com", "*", "A"))
	if err := s.DeleteRecord(ctx, "apps.example.com", "*", "A"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if got, _ := s.ListRecords(ctx, "apps.example.com"); len(got) != 3 {
		t.Fatalf("after delete: %d records", len(got))
	}
	for _, bad := range []*route.Record{{Zone: "apps.example.com", Type: "A"}, {Zone: "apps.example.com", Name: "x"}, {Zone: "", Name: "x", Type: "A"}} {
		if err := s.PutRecord(ctx, bad); err == nil {
			t.Errorf("PutRecord(%+v) accepted", bad)
		}
	}
	if _, err := s.ListRecords(ctx, ""); err == nil {
		t.Error("ListRecords(\"\") accepted")
	}
}

// Two gateways on one bus: a change made through one is in the other's
// table within a second, deletes included.
func TestChangesReachOtherGateway(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j1, _ := js(t, ns.ClientURL())
	j2, _ := js(t, ns.ClientURL())
	s1 := open(t, j1, store.Options{})
	s2 := open(t, j2, store.Options{})
	ctx := t.Context()
	mustPut(t, s1.PutZone(ctx, &route.Zone{Name: "apps.example.com"}))
	g1, g2 := run(t, s1), run(t, s2)

	mustPut(t, s1.PutApp(ctx, &route.App{ID: "hello", Status: route.StatusActive}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g2.routes("hello.apps.example.com", "hello") }, "app put on gateway 1 not routed by gateway 2")

	mustPut(t, s2.PutDomain(ctx, &route.Domain{Domain: "www.hello.test", App: "hello", Verified: true}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g1.routes("www.hello.test", "hello") }, "domain put on gateway 2 not routed by gateway 1")

	mustPut(t, s1.PutRecord(ctx, &route.Record{Zone: "apps.example.com", Name: "*", Type: "A", Values: []string{"127.0.0.1"}}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(g2.live.Load().Records("apps.example.com")) == 1 }, "record not in gateway 2's table")

	mustPut(t, s2.DeleteApp(ctx, "hello"))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return g1.live.Load().App("hello") == nil && !g1.routes("www.hello.test", "hello")
	}, "app delete on gateway 2 not seen by gateway 1")

	mustPut(t, s1.DeleteRecord(ctx, "apps.example.com", "*", "A"))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(g2.live.Load().Records("apps.example.com")) == 0 }, "record delete not seen")

	mustPut(t, s1.DeleteZone(ctx, "apps.example.com"))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g2.live.Load().Zone("apps.example.com") == nil }, "zone delete not seen")
}

// Bad values in a bucket, written behind the store's back, are skipped
// both in the initial load and live, and logged.
func TestBadValuesSkipped(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)})
	ctx := t.Context()
	kv, err := j.KeyValue(ctx, "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	rawPut := func(key, val string) {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "good"}))
	rawPut("broken", "{not json")
	rawPut("liar", `{"id":"other"}`) // identity does not match the key
	rawPut("_5Fx", `{"id":"_x"}`)    // decodes, but "_x" is no app id
	rawPut("_zz", `{"id":"x"}`)      // a key no encoding produces
	g := run(t, s)
	tbl := g.live.Load()
	if !g.routes("good.z.test", "good") || tbl.Apps() != 1 {
		t.Fatalf("initial load: %d apps", tbl.Apps())
	}
	if n := logs.count("bad stored value"); n != 4 {
		t.Fatalf("%d bad values logged, want 4", n)
	}
	if l, _ := s.ListApps(ctx); len(l) != 1 {
		t.Fatalf("ListApps returned %d apps", len(l))
	}
	if _, err := s.GetApp(ctx, "liar"); err == nil {
		t.Fatal("GetApp returned a mismatched value")
	}

	// Live: a bad value is skipped and logged (TestBadValueOverGoodOne).
	rawPut("bad", `{"id":`)
	mustPut(t, s.PutApp(ctx, &route.App{ID: "later"}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("later.z.test", "later") }, "later app not applied")
	if !g.routes("good.z.test", "good") || g.live.Load().App("bad") != nil {
		t.Fatal("a bad live value changed the table")
	}
	if n := logs.count("bad stored value"); n < 5 {
		t.Fatalf("live bad value not logged (%d)", n)
	}
}

// A bad value written over a good one, behind the store's back, takes it
// out of the table at once, as the load does: the watch once kept the
// good one until the next resync (30 s) dropped it, so for that long the
// table served what the store no longer held, what the API's lists no
// longer showed (and checked, e.g. for a mapping naming an app it
// deletes), and what a gateway started meanwhile did not serve. Nothing
// else changes.
func TestBadValueOverGoodOne(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)}) // resync 30 s: the watch alone
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "y.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "good"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "other"}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "shop.example", App: "other", Verified: true}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "kept.example", App: "other", Verified: true}))
	mustPut(t, s.PutRecord(ctx, &route.Record{Zone: "y.test", Name: "www.y.test", Type: "A", Values: []string{"192.0.2.1"}}))
	mustPut(t, s.PutRecord(ctx, &route.Record{Zone: "y.test", Name: "kept.y.test", Type: "A", Values: []string{"192.0.2.2"}}))
	g := run(t, s)

	rawPut := func(bucket, key, val string) {
		t.Helper()
		kv, err := j.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	rawPut("gatehouse_apps", "good", `{"id":`)
	rawPut("gatehouse_zones", "z.test", `{"name":"z.test","ttl":"sixty"}`)
	rawPut("gatehouse_domains", "shop.example", `{"domain":"elsewhere.example","app":"other","verified":true}`)
	rawPut("gatehouse_records", "y_2Etest.www_2Ey_2Etest.A", `[]`)
	testutil.WaitFor(t, 5*time.Second, func() bool { return logs.count("bad stored value") >= 4 }, "bad values not logged")
	tbl := g.live.Load()
	if tbl.App("good") != nil || tbl.Zone("z.test") != nil || tbl.Domain("shop.example") != nil || len(tbl.Records("y.test")) != 1 {
		t.Fatal("the table still serves a value the store no longer holds")
	}
	if !g.routes("other.y.test", "other") || !g.routes("kept.example", "other") || tbl.Records("y.test")[0].Name != "kept.y.test" {
		t.Fatal("a bad value changed other state")
	}

	// A good value written over the bad one brings the key back.
	mustPut(t, s.PutApp(ctx, &route.App{ID: "good"}))
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutDomain(ctx, &route.Domain{Domain: "shop.example", App: "other", Verified: true}))
	mustPut(t, s.PutRecord(ctx, &route.Record{Zone: "y.test", Name: "www.y.test", Type: "A", Values: []string{"192.0.2.1"}}))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return g.routes("good.z.test", "good") && g.routes("shop.example", "other") && len(g.live.Load().Records("y.test")) == 2
	}, "a good value written over a bad one was not applied")
}

func TestAppJSONIsTheAPIShape(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	s := open(t, j, store.Options{})
	mustPut(t, s.PutApp(t.Context(), &route.App{ID: "a", Mode: route.ModePassthrough, RateLimit: route.RateLimit{Requests: 5, Window: route.Duration(time.Second)}}))
	kv, _ := j.KeyValue(t.Context(), "gatehouse_apps")
	e, err := kv.Get(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		t.Fatal(err)
	}
	if m["mode"] != "passthrough" || m["rate_limit"].(map[string]any)["window"] != "1s" {
		t.Fatalf("stored json = %s", e.Value())
	}
}

var _ = jetstream.AllKeys
var _ = context.Background

// A bucket made by another tool (or by hand) may hold values past the
// store's 1 MiB bound: the store refuses them on read, logged and with a
// clear error, instead of loading megabytes into every gateway's table.
func TestOversizedValuesRefused(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	j, _ := js(t, ns.ClientURL())
	ctx := t.Context()
	kvs := map[string]jetstream.KeyValue{}
	for _, b := range []string{"gatehouse_apps", "gatehouse_certs"} {
		kv, err := j.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}) // no MaxValueSize
		if err != nil {
			t.Fatal(err)
		}
		kvs[b] = kv
	}
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)})
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	mustPut(t, s.PutApp(ctx, &route.App{ID: "good"}))
	huge := `{"id":"huge"` + strings.Repeat(" ", 2<<20) + `}`
	if _, err := kvs["gatehouse_apps"].Put(ctx, "huge", []byte(huge)); err != nil {
		t.Fatal(err)
	}
	if _, err := kvs["gatehouse_certs"].Put(ctx, "huge", make([]byte, 2<<20)); err != nil {
		t.Fatal(err)
	}

	g := run(t, s)
	if !g.routes("good.z.test", "good") || g.live.Load().App("huge") != nil {
		t.Fatal("an oversized app was loaded, or the good one was not")
	}
	if logs.count("bad stored value") != 1 {
		t.Fatalf("the oversized app was not logged: %v", logs.msgs)
	}
	if _, err := s.GetApp(ctx, "huge"); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("GetApp of an oversized value = %v", err)
	}
	if _, err := s.Certs().Load(ctx, "huge"); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("Certs().Load of an oversized value = %v", err)
	}
	// Nor does the store write one there.
	big := &route.App{ID: "big", Policy: make([]route.PolicyRule, 1)}
	big.Policy[0] = route.PolicyRule{Action: "deny", Path: "/" + strings.Repeat("a", 2<<20)}
	if err := s.PutApp(ctx, big); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("PutApp of an oversized app = %v", err)
	}
	if err := s.Certs().Store(ctx, "big", make([]byte, 2<<20)); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("Certs().Store of an oversized value = %v", err)
	}
	if _, err := kvs["gatehouse_apps"].Get(ctx, "big"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("an oversized app was written: %v", err)
	}
	// Live too.
	if _, err := kvs["gatehouse_apps"].Put(ctx, "huge2", []byte(strings.Replace(huge, "huge", "huge2", 1))); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "later"}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.routes("later.z.test", "later") }, "later app not applied")
	testutil.WaitFor(t, 5*time.Second, func() bool { return logs.count("bad stored value") >= 2 }, "live oversized value not logged")
	if g.live.Load().App("huge2") != nil {
		t.Fatal("an oversized app was applied live")
	}
}

// An app value written around the API whose settings the gateway would
// apply open is refused on read, logged, like one that does not decode:
// the gateway serves any status but suspended and retired, allows on any
// policy action but "deny", never matches a rule path that is not clean,
// and cannot check tokens or paths of a passthrough app. The zero mode
// and status stay what they always were, http and active.
func TestAppsTheGatewayWouldApplyOpenRefused(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	kv, err := j.KeyValue(ctx, "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"status":   `{"id":"status","status":"Suspended"}`,
		"mode":     `{"id":"mode","mode":"tcp"}`,
		"action":   `{"id":"action","policy":[{"action":"Deny","path":"/admin/*"}]}`,
		"nopath":   `{"id":"nopath","policy":[{"action":"deny","path":""}]}`,
		"unclean":  `{"id":"unclean","policy":[{"action":"deny","path":"/admin/"}]}`,
		"dotdot":   `{"id":"dotdot","policy":[{"action":"deny","path":"/a/../admin/*"}]}`,
		"star":     `{"id":"star","policy":[{"action":"deny","path":"/adm*"}]}`,
		"escaped":  `{"id":"escaped","policy":[{"action":"deny","path":"/%61dmin"}]}`,
		"method":   `{"id":"method","policy":[{"action":"deny","methods":["GET "],"path":"/*"}]}`,
		"ptauth":   `{"id":"ptauth","mode":"passthrough","auth":{"required":true}}`,
		"ptpolicy": `{"id":"ptpolicy","mode":"passthrough","policy":[{"action":"deny","path":"/*"}]}`,
	}
	for k, v := range bad {
		if _, err := kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	good := map[string]string{
		"zero":  `{"id":"zero"}`,
		"susp":  `{"id":"susp","mode":"http","status":"suspended","policy":[{"action":"deny","methods":["get","POST"],"path":"/admin/*"},{"action":"allow","path":"/*"},{"action":"deny","path":"/"}]}`,
		"ptok":  `{"id":"ptok","mode":"passthrough","status":"retired"}`,
		"exact": `{"id":"exact","policy":[{"action":"deny","path":"/a/b.txt"}]}`,
		// Stored before a white space or control at a segment's end made
		// a rule path unwritable: still applied, its path matched as
		// written, or an upgrade would drop the app from routing.
		"spaced": `{"id":"spaced","policy":[{"action":"deny","path":"/admin\u000b/*"},{"action":"allow","path":"/\u00a0pub"},{"action":"deny","path":"/x\u3000"}]}`,
	}
	for k, v := range good {
		if _, err := kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	g := run(t, s)
	tbl := g.live.Load()
	for k := range bad {
		if tbl.App(k) != nil {
			t.Errorf("app %s loaded", k)
		}
		if _, err := s.GetApp(ctx, k); err == nil {
			t.Errorf("GetApp(%s) succeeded", k)
		}
		var a route.App
		if err := json.Unmarshal([]byte(bad[k]), &a); err != nil {
			t.Fatal(err)
		}
		if err := s.PutApp(ctx, &a); err == nil {
			t.Errorf("PutApp(%s) succeeded", k)
		}
	}
	for k := range good {
		if tbl.App(k) == nil {
			t.Errorf("app %s not loaded", k)
		}
	}
	if n := logs.count("bad stored value"); n != len(bad) {
		t.Errorf("%d bad values logged, want %d", n, len(bad))
	}
}

// A host key value written around the API whose public key is no key is
// refused on read, logged: discovery trusts the enrolment it reads, and a
// point of small order (an all-zero buffer) verifies signatures that
// anyone can make without a private key, so anyone on the bus could
// claim the host id. The API refuses such a key at enrolment.
func TestHostKeysThatAreNoKeysRefused(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)})
	ctx := t.Context()
	kv, err := j.KeyValue(ctx, "gatehouse_hostkeys")
	if err != nil {
		t.Fatal(err)
	}
	const good = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
	bad := map[string]route.HostKey{
		"zero":     {PublicKey: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", Apps: []string{"a"}},
		"identity": {PublicKey: "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", Apps: []string{"a"}},
		"short":    {PublicKey: "AAAA", Apps: []string{"a"}},
		"notb64":   {PublicKey: "not base64!", Apps: []string{"a"}},
		"badapp":   {PublicKey: good, Apps: []string{"Not_A_Label"}},
		"bad id!":  {PublicKey: good, Apps: []string{"a"}},
	}
	for id, k := range bad {
		k.HostID = id
		b, _ := json.Marshal(k)
		key := id
		if id == "bad id!" {
			key = "bad_20id_21"
		}
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetHostKey(ctx, id); err == nil {
			t.Errorf("GetHostKey(%q) succeeded", id)
		}
		if err := s.PutHostKey(ctx, &k); err == nil {
			t.Errorf("PutHostKey(%q) succeeded", id)
		}
	}
	mustPut(t, s.PutHostKey(ctx, &route.HostKey{HostID: "web-1", PublicKey: good, Apps: []string{"a", "b"}}))
	if k, err := s.GetHostKey(ctx, "web-1"); err != nil || k.PublicKey != good {
		t.Fatalf("GetHostKey(web-1) = %v, %v", k, err)
	}
	keys, err := s.ListHostKeys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("ListHostKeys = %d keys, %v", len(keys), err)
	}
	if n := logs.count("bad stored value"); n != len(bad) {
		t.Errorf("%d bad values logged, want %d", n, len(bad))
	}
}

// A routing bucket made before buckets republished their writes (or by
// another tool) gets the republish on Open whatever the replica count:
// without it a gateway learns changes only from its watch consumer, and
// losing the node that hosts it stalls the table for seconds, up to the
// resync (TestClusterNodeLoss). It was added only when Open rescaled.
func TestOpenAddsRepublishToOldBuckets(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, nc := js(t, ns.ClientURL())
	ctx := t.Context()
	if _, err := j.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "gatehouse_apps", History: 1, MaxValueSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	s := open(t, j, store.Options{})
	kv, err := j.KeyValue(ctx, "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Config(); c.RePublish == nil || c.Replicas != 1 {
		t.Fatalf("after Open: republish %v, replicas %d", c.RePublish, c.Replicas)
	}
	ch := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe("gatehouse._store.gatehouse_apps.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s.PutApp(ctx, &route.App{ID: "a"}))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("a write to the old bucket was not republished")
	}
}

// A value written around the API in JSON that encoding/json reads as
// something other than what it says is refused, logged and left out, as
// one that does not decode: the API refuses the same at a write. Its
// invalid UTF-8 and lone surrogate escapes were read as U+FFFD (a deny
// rule's path that no request matches), and of two keys the same but for
// case or escapes the last one won: a deny rule under "policy" that a
// later "Policy": [] emptied, served open while an operator reading the
// bucket (jq, nats kv get) saw the rule. Values that say one thing still
// load.
func TestAmbiguousJSONRefused(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	var logs logCount
	s := open(t, j, store.Options{Logger: slogger(&logs)})
	ctx := t.Context()
	mustPut(t, s.PutZone(ctx, &route.Zone{Name: "z.test"}))
	g := run(t, s)
	kv, err := j.KeyValue(ctx, "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	deny := `"policy":[{"action":"deny","path":"/admin/*"}]`
	var many string // more keys than the store compares one by one
	for i := range 40 {
		many += fmt.Sprintf(`"x%d":%d,`, i, i)
	}
	many += deny
	for _, tc := range []struct {
		name, val string
		ok        bool
	}{
		{"invalid UTF-8 in a path", "{\"id\":\"a\",\"policy\":[{\"action\":\"deny\",\"path\":\"/adm\xffin/*\"}]}", false},
		{"a lone high surrogate escape", `{"id":"a","policy":[{"action":"deny","path":"/adm\ud800in/*"}]}`, false},
		{"a lone low surrogate escape", `{"id":"a","policy":[{"action":"deny","path":"/adm\udc00in/*"}]}`, false},
		{"a key twice", `{"id":"a",` + deny + `,"policy":[]}`, false},
		{"a key twice, in another case", `{"id":"a",` + deny + `,"Policy":[]}`, false},
		{"a key twice, escaped", `{"id":"a",` + deny + `,"polic\u0079":[]}`, false},
		{"a key twice, with a long s", `{"id":"a","status":"suspended","\u017Ftatus":"active"}`, false},
		{"a nested key twice", `{"id":"a","rate_limit":{"requests":5,"REQUESTS":0}}`, false},
		{"a key twice among many", `{"id":"a",` + many + `,"status":"suspended","STATUS":"active"}`, false},
		{"one of each", `{"id":"a",` + deny + `,"auth":{"required":true}}`, true},
		{"one of each, many", `{"id":"a",` + many + `,"auth":{"required":true}}`, true},
		{"a surrogate pair", `{"id":"a","policy":[{"action":"deny","path":"/\ud83d\ude00/*"}]}`, true},
		{"the same key in two objects", `{"id":"a","policy":[{"action":"deny","path":"/a/*"},{"action":"deny","path":"/b/*"}]}`, true},
		{"key-like text in a value", `{"id":"a","policy":[{"action":"deny","path":"/\"id\":{,}[/*"}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustPut(t, s.PutApp(ctx, &route.App{ID: "a", Status: route.StatusSuspended}))
			testutil.WaitFor(t, 5*time.Second, func() bool {
				a := g.live.Load().App("a")
				return a != nil && a.Status == route.StatusSuspended
			}, "the good app was not applied")
			bad := logs.count("bad stored value")
			if _, err := kv.Put(ctx, "a", []byte(tc.val)); err != nil {
				t.Fatal(err)
			}
			_, getErr := s.GetApp(ctx, "a")
			if tc.ok {
				testutil.WaitFor(t, 5*time.Second, func() bool {
					a := g.live.Load().App("a")
					return a != nil && a.Status != route.StatusSuspended
				}, "a value that says one thing was not applied")
				if getErr != nil {
					t.Fatalf("GetApp: %v", getErr)
				}
				return
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return g.live.Load().App("a") == nil },
				"the table serves a value that reads as something else than it says")
			if !errors.Is(getErr, store.ErrBadValue) {
				t.Fatalf("GetApp = %v, want a bad value", getErr)
			}
			if logs.count("bad stored value") == bad {
				t.Fatal("the refused value was not logged")
			}
		})
	}
}
