package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// newStore opens a real store on a fresh embedded NATS with JetStream and
// returns it with its not-found sentinel.
func newStore(t testing.TB) (Store, error) {
	t.Helper()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st, store.ErrNotFound
}

var _ Store = (*store.Store)(nil)

// newBusEnv is newEnv on a store whose buckets the test can reach
// around the API (to write a value that does not decode, say).
func newBusEnv(t *testing.T) (*env, jetstream.JetStream, *store.Store) {
	t.Helper()
	e, js, st, _ := startBusEnv(t)
	return e, js, st
}

// startBusEnv is newEnv on a store on a NATS server of the test's own,
// which it returns, with every store sentinel the gateway wires.
func startBusEnv(t *testing.T) (*env, jetstream.JetStream, *store.Store, *server.Server) {
	t.Helper()
	ns := testutil.StartBus(t)
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Store: st, NotFound: store.ErrNotFound, TooLarge: store.ErrTooLarge, BadValue: store.ErrBadValue,
		Unavailable: store.Unavailable, ControlToken: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, st: st}, js, st, ns
}

// A DELETE of a zone removes every record stored under it, a value that
// does not decode (written around the API) included: ListRecords skips
// those, so the DELETE answered 204 with them still in the store, and a
// zone created again under the name took them over.
func TestDeleteZoneRemovesUndecodableRecords(t *testing.T) {
	e, js, st := newBusEnv(t)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.7"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/txt/TXT", `{"values":["hello"]}`, 200)
	kv, err := js.KeyValue(t.Context(), "gatehouse_records")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(t.Context())
	if err != nil || len(keys) != 2 {
		t.Fatalf("record keys %v, %v", keys, err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ".A") {
			if _, err := kv.Put(t.Context(), k, []byte(`{"zone":`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.ok("DELETE", "/api/v3/dns/zones/apps.example.com", nil, 204)
	if keys, err := kv.Keys(t.Context()); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("records left in the store after the zone's DELETE: %v (%v)", keys, err)
	}
	// The same for records a failed DELETE left behind, purged when the
	// zone is created again.
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.7"]}`, 200)
	keys, _ = kv.Keys(t.Context())
	if _, err := kv.Put(t.Context(), keys[0], []byte(`{"zone":`)); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteZone(t.Context(), "apps.example.com"); err != nil {
		t.Fatal(err)
	}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	if keys, err := kv.Keys(t.Context()); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("records of the old zone left in the store after it was created again: %v (%v)", keys, err)
	}
}

// A body within the API's bound whose stored form is past the store's
// (JSON escapes '&' as six bytes) is refused as too large, 413 with
// nothing written, not a 500 that says to try again.
func TestPutPastTheStoreBoundIs413(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"policy":[{"action":"deny","path":"/` + strings.Repeat("&", maxBody-100) + `"}]}`
	if len(body) > maxBody {
		t.Fatalf("body of %d bytes", len(body))
	}
	before := e.snapshot()
	p := problemOf(t, e.ok("PUT", "/api/v3/apps/shop", body, 413))
	if !strings.Contains(p.Detail, "too large") {
		t.Errorf("detail %q", p.Detail)
	}
	if e.snapshot() != before {
		t.Error("the refused PUT changed the store")
	}
}

// newRawEnv is newEnv on a store whose buckets the test can also write
// around the API, as another tool or a buggy peer would.
func newRawEnv(t *testing.T) (*env, jetstream.JetStream) {
	t.Helper()
	e, js, _, _ := startBusEnv(t)
	return e, js
}

// An item whose stored value does not decode (written around the API)
// answers a GET with a problem that says so, and can be replaced and
// deleted through the API. A DELETE of such an app or zone, and a PUT
// over such a zone, mapping or host key, read the old value first and
// answered 500 "try again" for ever: nothing but a tool outside the API
// could mend the store.
func TestBadStoredValuesCanBeReplacedAndDeleted(t *testing.T) {
	e, js := newRawEnv(t)
	ctx := t.Context()
	raw := func(bucket, key, val string) {
		t.Helper()
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(bucket, key string) {
		t.Helper()
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
			t.Errorf("%s %s still stored: %v", bucket, key, err)
		}
	}
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)

	raw("gatehouse_apps", "bad", `{"id":`)
	if p := problemOf(t, e.ok("GET", "/api/v3/apps/bad", nil, 500)); !strings.Contains(p.Detail, "does not read") {
		t.Errorf("GET of a bad app: %q", p.Detail)
	}
	e.ok("DELETE", "/api/v3/apps/bad", nil, 204)
	gone("gatehouse_apps", "bad")

	raw("gatehouse_zones", "z.example", `{"name":"z.example","ttl":"sixty"}`)
	problemOf(t, e.ok("GET", "/api/v3/dns/zones/z.example", nil, 500))
	e.ok("PUT", "/api/v3/dns/zones/z.example", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("GET", "/api/v3/dns/zones/z.example", nil, 200)
	raw("gatehouse_zones", "z.example", `{"name":"z.example","ttl":"sixty"}`)
	e.ok("DELETE", "/api/v3/dns/zones/z.example", nil, 204)
	gone("gatehouse_zones", "z.example")

	raw("gatehouse_domains", "shop.example", `{"domain":"other.example","app":"shop","verified":true}`)
	problemOf(t, e.ok("GET", "/api/v3/domains/shop.example", nil, 500))
	var d struct{ Verified bool }
	decodeInto(t, e.ok("PUT", "/api/v3/domains/shop.example", `{"app":"shop"}`, 200), &d)
	if d.Verified {
		t.Error("a mapping PUT over a bad value came out verified")
	}

	raw("gatehouse_hostkeys", "web-1", `{"host_id":"web-1","public_key":"AAAA"}`)
	problemOf(t, e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 500))
	e.ok("PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"`+testKey+`","apps":["shop"]}`, 200)
	e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 200)
}

// A record whose stored value does not decode answers its GET as every
// other kind does: 500 saying it does not read and can be mended, not 404
// (it was read through the zone's list, which skips such values), which
// told the platform there was nothing there while the key sat in the
// store. PUT replaces it and DELETE removes it.
func TestBadStoredRecordSaysSo(t *testing.T) {
	e, js := newRawEnv(t)
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, "gatehouse_records")
	if err != nil {
		t.Fatal(err)
	}
	const path = "/api/v3/dns/zones/z.example/records/www/A"
	e.ok("PUT", "/api/v3/dns/zones/z.example", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("PUT", path, `{"values":["192.0.2.7"]}`, 200)
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for k := range keys.Keys() {
		key = k
	}
	if key == "" {
		t.Fatal("the record is not in the bucket")
	}
	bad := func() {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(`{"zone":"z.example","name":"www","type":"A","values":"192.0.2.7"}`)); err != nil {
			t.Fatal(err)
		}
	}

	bad()
	if p := problemOf(t, e.ok("GET", path, nil, 500)); !strings.Contains(p.Detail, "does not read") {
		t.Errorf("GET of a bad record: %q", p.Detail)
	}
	e.ok("PUT", path, `{"values":["192.0.2.8"]}`, 200)
	var rec struct{ Values []string }
	decodeInto(t, e.ok("GET", path, nil, 200), &rec)
	if len(rec.Values) != 1 || rec.Values[0] != "192.0.2.8" {
		t.Errorf("GET after the PUT over a bad record: %v", rec.Values)
	}
	bad()
	e.ok("DELETE", path, nil, 204)
	problemOf(t, e.ok("GET", path, nil, 404))
	problemOf(t, e.ok("GET", "/api/v3/dns/zones/z.example/records/none/A", nil, 404))
}

// With the store's NATS server gone, a control call answers 503 with
// Retry-After, so a platform's client backs off and tries again, where
// a 500 reads as a bug of the gateway's. Nothing is written.
func TestStoreDownIs503(t *testing.T) {
	e, _, _, ns := startBusEnv(t)
	e.ok("PUT", "/api/v3/apps/before", `{}`, 200)
	ns.Shutdown()
	ns.WaitForShutdown()
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v3/apps/during", `{}`},
		{"GET", "/api/v3/apps/before", ""},
	} {
		req, _ := http.NewRequest(c.method, e.srv.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s %s with the store down: %d, Retry-After %q; want 503 and 1", c.method, c.path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
}

// An app stored before cors.allow_headers was bounded, with more names
// than a PUT may now send, still reads, lists and can be replaced: the
// bound is on what a write sends, not on what the store holds, or an
// upgrade would leave such an app unreadable (500) and its preflights
// unserved. A PUT sending it as it is is refused, and changes nothing.
func TestAppStoredPastAllowHeadersBoundStillReads(t *testing.T) {
	e, js := newRawEnv(t)
	kv, err := js.KeyValue(t.Context(), "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	names := func(n int) string {
		hs := make([]string, n)
		for i := range hs {
			hs[i] = fmt.Sprintf(`"X-Old-%d"`, i)
		}
		return "[" + strings.Join(hs, ",") + "]"
	}
	old := `{"id":"shop","mode":"http","status":"active","cors":{"origins":["https://a.example"],"allow_headers":` + names(maxAllowHeaders+50) + `},"rate_limit":{"requests":600,"window":"1m0s"}}`
	if _, err := kv.Put(t.Context(), "shop", []byte(old)); err != nil {
		t.Fatal(err)
	}
	r := e.ok("GET", "/api/v3/apps/shop", nil, 200)
	var app struct {
		CORS struct {
			AllowHeaders []string `json:"allow_headers"`
		} `json:"cors"`
	}
	decodeInto(t, r, &app)
	if len(app.CORS.AllowHeaders) != maxAllowHeaders+50 {
		t.Fatalf("GET of the stored app: %d allow_headers, want %d", len(app.CORS.AllowHeaders), maxAllowHeaders+50)
	}
	if l := e.ok("GET", "/api/v3/apps", nil, 200); !strings.Contains(string(l.body), `"X-Old-149"`) {
		t.Errorf("the stored app is not listed whole: %.200s", l.body)
	}
	before := e.snapshot()
	e.ok("PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example"],"allow_headers":`+names(maxAllowHeaders+50)+`}}`, 400)
	if e.snapshot() != before {
		t.Error("a refused PUT changed the stored app")
	}
	e.okIf(200, "PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example"],"allow_headers":`+names(maxAllowHeaders)+`}}`, "If-Match", r.header.Get("ETag"))
}

// An app stored before a rule path with white space or a control at a
// segment's end was refused (the policy layer now also reads a path
// without them) still reads, and can be replaced: the rule is on what a
// write sends, not on what the store holds, or an upgrade would leave
// such an app unreadable and unrouted. A PUT sending such a path is
// refused with a 400 that says why, and changes nothing.
func TestAppStoredWithSpacedRulePathStillReads(t *testing.T) {
	e, js := newRawEnv(t)
	kv, err := js.KeyValue(t.Context(), "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	old := `{"id":"shop","mode":"http","status":"active","policy":[{"action":"deny","path":"/admin\u000b/*"},{"action":"allow","path":"/\u00a0pub"}],"rate_limit":{"requests":600,"window":"1m0s"}}`
	if _, err := kv.Put(t.Context(), "shop", []byte(old)); err != nil {
		t.Fatal(err)
	}
	r := e.ok("GET", "/api/v3/apps/shop", nil, 200)
	var app struct {
		Policy []route.PolicyRule `json:"policy"`
	}
	decodeInto(t, r, &app)
	if len(app.Policy) != 2 || app.Policy[0].Path != "/admin\v/*" || app.Policy[1].Path != "/\u00a0pub" {
		t.Fatalf("GET of the stored app: policy %+v", app.Policy)
	}
	before := e.snapshot()
	for _, p := range []string{`/admin\u000b/*`, `/\u00a0pub`, `/a/\u3000b`, `/a\u007f`} {
		bad := e.ok("PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"`+p+`"}]}`, 400)
		if !strings.Contains(string(bad.body), "white space or a control character at either end of a segment") {
			t.Errorf("PUT of path %s: 400 does not say why: %s", p, bad.body)
		}
	}
	if e.snapshot() != before {
		t.Error("a refused PUT changed the stored app")
	}
	e.okIf(200, "PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin/*"}]}`, "If-Match", r.header.Get("ETag"))
}

// A routing bucket deleted under a running gateway (an operator's slip
// with the nats CLI; the next Open makes it again) is the store not
// answering, as with its server gone: a read answers 503 with
// Retry-After as a write does, not a 500 that reads as the gateway's
// bug. The store's reads ask the stream's leader, which answers "stream
// not found" where the direct get they replaced had no responder.
func TestBucketDeletedIs503(t *testing.T) {
	e, js, _, _ := startBusEnv(t)
	e.ok("PUT", "/api/v3/apps/before", `{}`, 200)
	if err := js.DeleteKeyValue(t.Context(), "gatehouse_apps"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/api/v3/apps/during", `{}`},
		{"GET", "/api/v3/apps/before", nil},
		{"DELETE", "/api/v3/apps/before", nil},
		{"GET", "/api/v3/apps?limit=10", nil},
	} {
		r := e.do(c.method, c.path, token, c.body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" {
			t.Errorf("%s %s with the bucket deleted: %d %s, Retry-After %q; want 503 and 1", c.method, c.path, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
}
