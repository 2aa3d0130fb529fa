package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

const token = "platform-secret-token"

// testKey is the std base64 of a 32-byte Ed25519 public key.
const testKey = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="

type env struct {
	t   *testing.T
	srv *httptest.Server
	st  Store
}

func newEnv(t *testing.T, mod func(*Options)) *env {
	t.Helper()
	st, notFound := newStore(t)
	o := Options{Store: st, NotFound: notFound, TooLarge: store.ErrTooLarge, BadValue: store.ErrBadValue, ControlToken: token}
	if mod != nil {
		mod(&o)
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, st: st}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request; hdr holds more fields, as pairs of name and
// value.
func (e *env) do(method, path, tok string, body any, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, b}
}

// ok does an authenticated request and fails unless it answers want.
func (e *env) ok(method, path string, body any, want int) resp {
	e.t.Helper()
	r := e.do(method, path, token, body)
	if r.status != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	return r
}

// snapshot renders everything in the store, to prove a request changed
// nothing.
func (e *env) snapshot() string {
	e.t.Helper()
	ctx := context.Background()
	var parts []any
	apps, err1 := e.st.ListApps(ctx)
	doms, err2 := e.st.ListDomains(ctx)
	zones, err3 := e.st.ListZones(ctx)
	keys, err4 := e.st.ListHostKeys(ctx)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	slices.SortFunc(apps, func(x, y *route.App) int { return strings.Compare(x.ID, y.ID) })
	slices.SortFunc(doms, func(x, y *route.Domain) int { return strings.Compare(x.Domain, y.Domain) })
	slices.SortFunc(zones, func(x, y *route.Zone) int { return strings.Compare(x.Name, y.Name) })
	slices.SortFunc(keys, func(x, y *route.HostKey) int { return strings.Compare(x.HostID, y.HostID) })
	parts = append(parts, apps, doms, zones, keys)
	for _, z := range zones {
		recs, err := e.st.ListRecords(ctx, z.Name)
		if err != nil {
			e.t.Fatal(err)
		}
		slices.SortFunc(recs, func(x, y *route.Record) int { return strings.Compare(x.Name+x.Type, y.Name+y.Type) })
		parts = append(parts, recs)
	}
	b, _ := json.Marshal(parts)
	return string(b)
}

// seed fills the store with one of everything through the API.
func (e *env) seed() {
	e.t.Helper()
	e.ok("PUT", "/api/v3/apps/shop", map[string]any{}, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", map[string]any{"gateways": []string{"127.0.0.1"}, "ttl": 60}, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", map[string]any{"values": []string{"192.0.2.1"}}, 200)
	e.ok("PUT", "/api/v3/domains/shop.example.org", map[string]any{"app": "shop"}, 200)
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"shop"}}, 200)
}

func problemOf(t *testing.T, r resp) problem.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("content type %q, want %s (body %s)", ct, problem.ContentType, r.body)
	}
	var p problem.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != r.status || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p
}

// controlPaths holds one concrete path for every control route pattern.
var controlPaths = []string{
	"/api/v3/apps",
	"/api/v3/apps/shop",
	"/api/v3/domains",
	"/api/v3/domains/shop.example.org",
	"/api/v3/domains/shop.example.org/verify",
	"/api/v3/dns/zones",
	"/api/v3/dns/zones/apps.example.com",
	"/api/v3/dns/zones/apps.example.com/records",
	"/api/v3/dns/zones/apps.example.com/records/www/A",
	"/api/v3/hosts/keys",
	"/api/v3/hosts/keys/web-1",
	"/api/v3/hosts",
	"/api/v3/no/such/route",
	"/api/v3/",
}

var allMethods = []string{"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"}

// TestControlNeedsCredential walks every control route with every method
// and body, without and with wrong credentials: each answers 401 and the
// store does not change.
func TestControlNeedsCredential(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.VerifyPlatform = func(r *http.Request) error {
			if r.Header.Get("Authorization") == "Bearer good-jwt" {
				return nil
			}
			return auth.ErrInvalid
		}
		// every wrong token here must meet the check, not the
		// guessing limit (TestWrongTokensLimited)
		o.BadTokens = limit.Quota{Limit: 1 << 20, Window: time.Minute}
	})
	e.seed()
	before := e.snapshot()
	creds := map[string]func(*http.Request){
		"none":         func(*http.Request) {},
		"wrong token":  func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") },
		"prefix token": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token[:len(token)-1]) },
		"basic":        func(r *http.Request) { r.SetBasicAuth("platform", token) },
		"no scheme":    func(r *http.Request) { r.Header.Set("Authorization", token) },
		"query":        func(r *http.Request) { r.URL.RawQuery = "token=" + token + "&access_token=" + token },
		"bad jwt":      func(r *http.Request) { r.Header.Set("Authorization", "Bearer bad-jwt") },
	}
	bodies := []string{"", `{"app":"shop","mode":"http","method":"manual"}`, "not json", strings.Repeat("x", 64<<10)}
	n := 0
	for _, path := range controlPaths {
		for _, method := range allMethods {
			for name, cred := range creds {
				for _, body := range bodies {
					req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Content-Type", "application/json")
					cred(req)
					res, err := e.srv.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusUnauthorized {
						t.Fatalf("%s %s (%s, %d-byte body): status %d, want 401: %s", method, path, name, len(body), res.StatusCode, b)
					}
					if res.Header.Get("WWW-Authenticate") == "" || res.Header.Get("Allow") != "" {
						t.Fatalf("%s %s (%s): headers %v", method, path, name, res.Header)
					}
					n++
				}
			}
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("store changed by unauthenticated requests\nbefore %s\nafter  %s", before, after)
	}
	// the platform JWT hook and the static token both get in
	for _, tok := range []string{"good-jwt", token} {
		if r := e.do("GET", "/api/v3/apps/shop", tok, nil); r.status != 200 {
			t.Errorf("credential %q: status %d", tok, r.status)
		}
	}
	t.Logf("%d unauthenticated requests, all 401", n)
}

func TestNoTokenConfiguredRefusesEmptyBearer(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ControlToken = "" })
	for _, tok := range []string{"", " ", "x"} {
		if r := e.do("GET", "/api/v3/apps", tok, nil); r.status != 401 {
			t.Errorf("token %q: status %d, want 401", tok, r.status)
		}
	}
}

func TestPublicClusters(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Clusters = func() any {
			return map[string]any{"self": "eu-1", "clusters": []map[string]any{{"id": "eu-1", "url": "https://eu", "public_key": testKey, "active": true}}}
		}
	})
	r := e.do("GET", "/api/v3/discovery/clusters", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"self":"eu-1"`) {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	// other methods are not served, to anyone; the route is public, so
	// the answer is 405, not the control API's 401 (TestPublicRouteWrongMethod)
	if r := e.do("POST", "/api/v3/discovery/clusters", "", "{}"); r.status != 405 || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST clusters without credential: %d Allow=%q, want 405 allowing GET, HEAD", r.status, r.header.Get("Allow"))
	}
	e2 := newEnv(t, nil)
	if r := e2.do("GET", "/api/v3/discovery/clusters", "", nil); r.status != 503 {
		t.Errorf("no discovery: %d, want 503", r.status)
	}
	problemOf(t, e2.do("GET", "/api/v3/discovery/clusters", "", nil))
}

func TestWrongMethodAndUnknownRoute(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/api/v3/apps/shop", token, "{}")
	if r.status != 405 || !strings.Contains(r.header.Get("Allow"), "PUT") {
		t.Fatalf("POST app: %d Allow=%q", r.status, r.header.Get("Allow"))
	}
	problemOf(t, r)
	r = e.do("GET", "/api/v3/nope", token, nil)
	if r.status != 404 {
		t.Fatalf("unknown route: %d", r.status)
	}
	problemOf(t, r)
}

// TestPathNotCleanRefused: a control call names its item by its path as
// sent. The router would clean a path holding "." or ".." segments (or
// "//") and redirect to what is left, another item: a client that follows
// the redirect (Go's, curl -L) sent DELETE .../records/./.. and deleted
// the zone. Such a path answers 400 naming it, after the credential
// check, and changes nothing.
func TestPathNotCleanRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.9"]}`, 200)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	before := e.snapshot()
	for _, c := range []struct{ method, path string }{
		{"DELETE", "/api/v3/dns/zones/apps.example.com/records/./.."},
		{"DELETE", "/api/v3/apps/x/../shop"},
		{"PUT", "/api/v3/apps/./shop"},
		{"GET", "/api/v3//apps/shop"},
		{"GET", "/api/v3/apps/shop/."},
	} {
		r := e.do(c.method, c.path, token, nil)
		if r.status != 400 || !strings.Contains(problemOf(t, r).Detail, "not clean") {
			t.Errorf("%s %s: %d %s, want 400 naming the path", c.method, c.path, r.status, r.body)
		}
		// everyone else still gets 401 first, whatever the path
		if r := e.do(c.method, c.path, "", nil); r.status != 401 {
			t.Errorf("%s %s without a credential: %d, want 401", c.method, c.path, r.status)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a path that is not clean changed the store\nbefore %s\nafter  %s", before, after)
	}
}

func TestAppRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	// defaults
	r := e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	var app route.App
	if err := json.Unmarshal(r.body, &app); err != nil {
		t.Fatal(err)
	}
	want := route.App{ID: "shop", Mode: "http", Status: "active", CORS: route.CORS{Origins: []string{}}, RateLimit: route.RateLimit{Requests: 600, Window: route.Duration(60e9)}}
	if !equalJSON(app, want) {
		t.Errorf("defaults: got %+v want %+v", app, want)
	}
	full := `{"mode":"http","status":"suspended","cors":{"origins":["https://shop.example.org","http://localhost:3000"]},
	  "rate_limit":{"requests":100,"window":"10s"},"auth":{"required":true},
	  "policy":[{"action":"deny","methods":["post"],"path":"/admin/*"},{"action":"allow","path":"/"}]}`
	e.ok("PUT", "/api/v3/apps/shop", full, 200)
	r = e.ok("GET", "/api/v3/apps/shop", nil, 200)
	if err := json.Unmarshal(r.body, &app); err != nil {
		t.Fatal(err)
	}
	if app.Mode != "http" || app.Status != "suspended" || app.RateLimit.Requests != 100 || app.RateLimit.Window != route.Duration(10e9) ||
		!app.Auth.Required || len(app.Policy) != 2 || app.Policy[0].Methods[0] != "POST" || len(app.CORS.Origins) != 2 {
		t.Errorf("round trip: %s", r.body)
	}
	e.ok("PUT", "/api/v3/apps/shop", `{"mode":"passthrough","rate_limit":{"requests":100}}`, 200)
	if r = e.ok("GET", "/api/v3/apps/shop", nil, 200); !strings.Contains(string(r.body), `"mode":"passthrough"`) {
		t.Errorf("passthrough round trip: %s", r.body)
	}
	// a partial rate limit keeps the other default
	r = e.ok("PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":5}}`, 200)
	if !strings.Contains(string(r.body), `"rate_limit":{"requests":5,"window":"1m0s"}`) {
		t.Errorf("partial rate limit: %s", r.body)
	}
	e.ok("PUT", "/api/v3/apps/blog", `{"id":"blog"}`, 200)
	r = e.ok("GET", "/api/v3/apps", nil, 200)
	var l struct{ Apps []route.App }
	if err := json.Unmarshal(r.body, &l); err != nil || len(l.Apps) != 2 || l.Apps[0].ID != "blog" {
		t.Errorf("list: %s (%v)", r.body, err)
	}
	e.ok("DELETE", "/api/v3/apps/shop", nil, 204)
	problemOf(t, e.ok("GET", "/api/v3/apps/shop", nil, 404))
	problemOf(t, e.ok("DELETE", "/api/v3/apps/shop", nil, 404))
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestDomainLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	var d0, d1, d2, d3 route.Domain
	decodeInto(t, e.ok("PUT", "/api/v3/domains/Shop.Example.ORG", `{"app":"blog"}`, 200), &d0)
	// an unverified mapping moves, starting over
	decodeInto(t, e.ok("PUT", "/api/v3/domains/Shop.Example.ORG", `{"app":"shop"}`, 200), &d1)
	if d1.Domain != "shop.example.org" || d1.App != "shop" || d1.Verified || len(d1.Token) < 20 || d1.Token == d0.Token {
		t.Fatalf("new mapping: %+v (moved from %+v)", d1, d0)
	}
	if !strings.Contains(string(e.ok("GET", "/api/v3/domains/shop.example.org", nil, 200).body), `"verified":false`) {
		t.Error("verified field missing")
	}
	decodeInto(t, e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"shop"}`, 200), &d2)
	if d2 != d1 {
		t.Errorf("re-PUT to the same app changed the mapping: %+v -> %+v", d1, d2)
	}
	// verification
	problemOf(t, e.ok("POST", "/api/v3/domains/shop.example.org/verify", `{"method":"txt"}`, 400))
	problemOf(t, e.ok("POST", "/api/v3/domains/shop.example.org/verify", `{"method":"magic"}`, 400))
	problemOf(t, e.ok("POST", "/api/v3/domains/nope.example.org/verify", `{"method":"manual"}`, 404))
	var v route.Domain
	decodeInto(t, e.ok("POST", "/api/v3/domains/shop.example.org/verify", `{"method":"manual"}`, 200), &v)
	if !v.Verified || v.Token != d1.Token {
		t.Errorf("after verify: %+v", v)
	}
	// a re-PUT to the same app keeps it verified
	decodeInto(t, e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"shop"}`, 200), &d2)
	if d2 != v {
		t.Errorf("re-PUT of a verified mapping changed it: %+v -> %+v", v, d2)
	}
	// a verified mapping does not move: the app that proved it keeps it
	// until the platform deletes the mapping, and the new app proves it again
	before := e.snapshot()
	p := problemOf(t, e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"blog"}`, 409))
	if !strings.Contains(p.Detail, `verified for app "shop"`) || !strings.Contains(p.Detail, "DELETE") {
		t.Errorf("move of a verified mapping: detail %q", p.Detail)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused move changed the store\nbefore %s\nafter  %s", before, after)
	}
	e.ok("DELETE", "/api/v3/domains/shop.example.org", nil, 204)
	decodeInto(t, e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"blog"}`, 200), &d3)
	if d3.App != "blog" || d3.Verified || d3.Token == d1.Token {
		t.Errorf("remapped domain: %+v", d3)
	}
	e.ok("GET", "/api/v3/domains", nil, 200)
	e.ok("DELETE", "/api/v3/domains/shop.example.org", nil, 204)
	e.ok("GET", "/api/v3/domains/shop.example.org", nil, 404)
}

// TestGetBodyPutsBack: every item's GET body is a body its PUT takes
// (ctl get > f.json; ctl put -f f.json), and putting it back changes
// nothing. A domain mapping's GET adds domain, token and verified, which
// its PUT refused as unknown fields.
func TestGetBodyPutsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed()
	e.ok("PUT", "/api/v3/apps/full", `{"mode":"http","status":"suspended","cors":{"origins":["https://a.example"],"allow_credentials":true,"allow_headers":["x-a"]},
	  "rate_limit":{"requests":5,"window":"10s"},"auth":{"required":true},"policy":[{"action":"deny","methods":["GET"],"path":"/a/*"}],"health":{"path":"/h","interval":"5s"}}`, 200)
	e.ok("PUT", "/api/v3/domains/verified.example.org", `{"app":"full"}`, 200)
	e.ok("POST", "/api/v3/domains/verified.example.org/verify", `{"method":"manual"}`, 200)
	before := e.snapshot()
	for _, path := range []string{
		"/api/v3/apps/shop",
		"/api/v3/apps/full",
		"/api/v3/domains/shop.example.org",
		"/api/v3/domains/verified.example.org",
		"/api/v3/dns/zones/apps.example.com",
		"/api/v3/dns/zones/apps.example.com/records/www/A",
		"/api/v3/hosts/keys/web-1",
	} {
		got := e.ok("GET", path, nil, 200)
		back := e.do("PUT", path, token, got.body)
		if back.status != 200 || !bytes.Equal(back.body, got.body) || back.header.Get("ETag") != got.header.Get("ETag") {
			t.Errorf("PUT %s of its GET body %s: %d %s (ETag %s, was %s)", path, got.body, back.status, back.body, back.header.Get("ETag"), got.header.Get("ETag"))
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("putting GET bodies back changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// TestDomainReadOnlyFields: a mapping's domain, token and verified may be
// repeated in its PUT, as its GET answers them, but only as they are: the
// gateway makes the token and the verify call sets verified, so a body
// saying otherwise is refused, naming the field and how to change it,
// and changes nothing.
func TestDomainReadOnlyFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed()
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	e.ok("PUT", "/api/v3/domains/verified.example.org", `{"app":"shop"}`, 200)
	var v route.Domain
	decodeInto(t, e.ok("POST", "/api/v3/domains/verified.example.org/verify", `{"method":"manual"}`, 200), &v)
	before := e.snapshot()
	for _, c := range []struct{ path, body, want string }{
		{"/api/v3/domains/shop.example.org", `{"app":"shop","domain":"other.example.org"}`, `domain: the body says "other.example.org" but the path says "shop.example.org"`},
		{"/api/v3/domains/shop.example.org", `{"app":"shop","token":"made-up"}`, `token: the body says "made-up" but the mapping's is`},
		{"/api/v3/domains/shop.example.org", `{"app":"shop","verified":true}`, `verified: domain "shop.example.org" is not verified; POST /api/v3/domains/shop.example.org/verify verifies it`},
		{"/api/v3/domains/verified.example.org", `{"app":"shop","verified":false}`, `verified: domain "verified.example.org" is verified; to make it unverified, DELETE the mapping`},
		{"/api/v3/domains/verified.example.org", `{"app":"shop","token":"` + v.Token + `x"}`, `token: the body says`},
		{"/api/v3/domains/new.example.org", `{"app":"shop","token":"` + v.Token + `"}`, `token: domain "new.example.org" is not mapped yet`},
		{"/api/v3/domains/new.example.org", `{"app":"shop","verified":true}`, `verified: domain "new.example.org" is not verified`},
		{"/api/v3/domains/new.example.org", `{"app":"shop","domain":null,"token":5}`, `token: want a string`},
	} {
		if p := problemOf(t, e.ok("PUT", c.path, c.body, 400)); !strings.Contains(p.Detail, c.want) {
			t.Errorf("PUT %s %s: detail %q, want %q", c.path, c.body, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused read-only fields changed the store\nbefore %s\nafter  %s", before, after)
	}
	// as they are, in any spelling of the name the path takes, they go through
	var d route.Domain
	decodeInto(t, e.ok("PUT", "/api/v3/domains/verified.example.org", `{"domain":"Verified.Example.ORG.","app":"shop","token":"`+v.Token+`","verified":true}`, 200), &d)
	if d != v {
		t.Errorf("PUT of the mapping as it is: %+v, want %+v", d, v)
	}
	decodeInto(t, e.ok("PUT", "/api/v3/domains/new.example.org", `{"domain":"new.example.org","app":"shop","verified":false}`, 200), &d)
	if d.Verified || d.Token == "" {
		t.Errorf("new mapping: %+v", d)
	}
	// an unverified mapping moved with its current token starts over, as
	// any move does: a new token
	cur := d
	decodeInto(t, e.ok("PUT", "/api/v3/domains/new.example.org", `{"app":"blog","token":"`+cur.Token+`","verified":false}`, 200), &d)
	if d.App != "blog" || d.Token == cur.Token || d.Verified {
		t.Errorf("moved mapping: %+v (was %+v)", d, cur)
	}
}

func TestDomainVerifyHook(t *testing.T) {
	var asked string
	e := newEnv(t, func(o *Options) {
		o.VerifyDomain = func(_ context.Context, d route.Domain, method string) error {
			asked = method + " " + d.Domain
			if method == "cname" {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
	})
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"shop"}`, 200)
	problemOf(t, e.ok("POST", "/api/v3/domains/shop.example.org/verify", `{"method":"cname"}`, 422))
	if !strings.Contains(string(e.ok("GET", "/api/v3/domains/shop.example.org", nil, 200).body), `"verified":false`) {
		t.Error("a failed proof verified the mapping")
	}
	e.ok("POST", "/api/v3/domains/shop.example.org/verify", `{"method":"txt"}`, 200)
	if asked != "txt shop.example.org" {
		t.Errorf("hook asked %q", asked)
	}
}

// dnsAnswers is a verify.Resolver that answers from its maps, and "no
// such name" for any other.
type dnsAnswers struct{ txt, cname map[string][]string }

func (d dnsAnswers) LookupTXT(_ context.Context, name string) ([]string, error) {
	if v, ok := d.txt[name]; ok {
		return v, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func (d dnsAnswers) LookupCNAME(_ context.Context, name string) (string, error) {
	if v, ok := d.cname[name]; ok {
		return v[0], nil
	}
	return "", &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// A proof that does not hold answers 422 saying what was looked for
// (DESIGN §7), in the API's words: the detail carried verify's package
// prefix ("proof by txt failed: verify: domain not proven: ..."), a name
// from inside the gateway that tells the platform nothing.
func TestFailedProofDetail(t *testing.T) {
	res := dnsAnswers{
		txt:   map[string][]string{"_gatehouse-challenge.wrong.example.org.": {"not-the-token"}},
		cname: map[string][]string{"shop.example.org.": {"elsewhere.example.net."}},
	}
	e := newEnv(t, func(o *Options) {
		o.VerifyDomain = func(ctx context.Context, d route.Domain, method string) error {
			return verify.Domain(ctx, verify.DomainOptions{Resolver: res, Zones: func() []string { return []string{"apps.example.com"} }},
				verify.DomainClaim{Domain: d.Domain, App: d.App, Token: d.Token}, method)
		}
	})
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"shop"}`, 200)
	e.ok("PUT", "/api/v3/domains/wrong.example.org", `{"app":"shop"}`, 200)
	before := e.snapshot()
	for _, c := range []struct{ domain, method, want string }{
		{"shop.example.org", "txt", "proof by txt failed: domain not proven: no TXT record at _gatehouse-challenge.shop.example.org."},
		{"wrong.example.org", "txt", "proof by txt failed: domain not proven: none of the 1 TXT records at _gatehouse-challenge.wrong.example.org. holds the mapping's token"},
		{"shop.example.org", "cname", "proof by cname failed: domain not proven: shop.example.org points at elsewhere.example.net, not shop.apps.example.com"},
	} {
		p := problemOf(t, e.ok("POST", "/api/v3/domains/"+c.domain+"/verify", `{"method":"`+c.method+`"}`, 422))
		if p.Detail != c.want {
			t.Errorf("%s by %s: detail %q, want %q", c.domain, c.method, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a failed proof changed the store\nbefore %s\nafter  %s", before, after)
	}
}

func decodeInto(t *testing.T, r resp, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%s: %v", r.body, err)
	}
}

func TestZonesAndRecords(t *testing.T) {
	e := newEnv(t, nil)
	var z route.Zone
	decodeInto(t, e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1","::ffff:10.0.0.1","2001:db8::1"]}`, 200), &z)
	if z.TTL != 60 || z.Gateways[1] != "10.0.0.1" {
		t.Errorf("zone: %+v", z)
	}
	problemOf(t, e.ok("GET", "/api/v3/dns/zones/other.example.com", nil, 404))
	problemOf(t, e.ok("PUT", "/api/v3/dns/zones/other.example.com/records/www/A", `{"values":["192.0.2.1"]}`, 404))
	var rec route.Record
	decodeInto(t, e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/_gatehouse-challenge.shop/txt", `{"values":["tok"],"ttl":30}`, 200), &rec)
	if rec.Name != "_gatehouse-challenge.shop.apps.example.com" || rec.Type != "TXT" || rec.Zone != "apps.example.com" {
		t.Errorf("record: %+v", rec)
	}
	// A record's GET body can be PUT back as it is (ctl records get,
	// edit, put -f): zone, name and type may repeat the path's, in any
	// of the forms the path takes, but must name the same record.
	const txtPath = "/api/v3/dns/zones/apps.example.com/records/_gatehouse-challenge.shop/TXT"
	got := e.ok("GET", txtPath, nil, 200)
	if back := e.ok("PUT", txtPath, string(got.body), 200); string(back.body) != string(got.body) {
		t.Errorf("PUT of the GET body changed the record: %s, was %s", back.body, got.body)
	}
	e.ok("PUT", txtPath, `{"zone":"Apps.Example.com.","name":"_gatehouse-challenge.shop","type":"txt","values":["tok"],"ttl":30}`, 200)
	for _, body := range []string{
		`{"zone":"other.example.com","values":["tok"]}`,
		`{"name":"www","values":["tok"]}`,
		`{"name":"_gatehouse-challenge.shop.other.example.com","values":["tok"]}`,
		`{"type":"A","values":["tok"]}`,
	} {
		if p := problemOf(t, e.ok("PUT", txtPath, body, 400)); !strings.Contains(p.Detail, "the path says") {
			t.Errorf("PUT %s: %q, want the mismatch named", body, p.Detail)
		}
	}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/@/AAAA", `{"values":["2001:db8::2"]}`, 200)
	e.ok("GET", "/api/v3/dns/zones/apps.example.com/records/apps.example.com/AAAA", nil, 200)
	var l struct{ Records []route.Record }
	decodeInto(t, e.ok("GET", "/api/v3/dns/zones/apps.example.com/records", nil, 200), &l)
	if len(l.Records) != 2 {
		t.Errorf("records: %+v", l.Records)
	}
	e.ok("DELETE", "/api/v3/dns/zones/apps.example.com/records/@/AAAA", nil, 204)
	// a missing record is named alike by GET and by DELETE, with or
	// without a condition: not as if "apps.example.com AAAA" were its name
	const want = `record apps.example.com AAAA not found`
	for _, c := range []struct{ method, ifMatch string }{{"GET", ""}, {"DELETE", ""}, {"DELETE", "*"}} {
		var hdr []string
		if c.ifMatch != "" {
			hdr = []string{"If-Match", c.ifMatch}
		}
		r := e.do(c.method, "/api/v3/dns/zones/apps.example.com/records/@/AAAA", token, nil, hdr...)
		if p := problemOf(t, r); r.status != 404 || p.Detail != want {
			t.Errorf("%s (If-Match %q): %d %q, want 404 %q", c.method, c.ifMatch, r.status, p.Detail, want)
		}
	}
	// A TXT set is bounded in all (16 KiB), so that its answer packs into
	// one DNS message: 8 values of 2048 bytes fit, a ninth does not.
	txt := func(n int) string {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = `"` + strings.Repeat("x", 2048) + `"`
		}
		return `{"values":[` + strings.Join(vals, ",") + `]}`
	}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/big/TXT", txt(8), 200)
	if p := problemOf(t, e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/big/TXT", txt(9), 400)); !strings.Contains(p.Detail, "at most 16384 bytes") {
		t.Errorf("9 × 2048 bytes of TXT: %q", p.Detail)
	}
	e.ok("DELETE", "/api/v3/dns/zones/apps.example.com/records/big/TXT", nil, 204)
	// a custom domain inside a served zone is refused
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	problemOf(t, e.ok("PUT", "/api/v3/domains/shop.apps.example.com", `{"app":"shop"}`, 400))
	e.ok("GET", "/api/v3/dns/zones", nil, 200)
	e.ok("DELETE", "/api/v3/dns/zones/apps.example.com", nil, 204)
	if recs, _ := e.st.ListRecords(context.Background(), "apps.example.com"); len(recs) != 0 {
		t.Errorf("records left after zone delete: %+v", recs)
	}
}

func TestHostKeysAndHosts(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Hosts = func() []route.HostInfo {
			return []route.HostInfo{{HostID: "web-2", State: route.HostVerified}, {HostID: "web-1", State: route.HostProvisional}}
		}
	})
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	body := map[string]any{"public_key": testKey, "apps": []string{"shop", "blog"}}
	e.ok("PUT", "/api/v3/hosts/keys/web-1", body, 200)
	var k route.HostKey
	decodeInto(t, e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 200), &k)
	if k.HostID != "web-1" || k.PublicKey != testKey || len(k.Apps) != 2 {
		t.Errorf("key: %+v", k)
	}
	var l struct{ Keys []route.HostKey }
	decodeInto(t, e.ok("GET", "/api/v3/hosts/keys", nil, 200), &l)
	if len(l.Keys) != 1 {
		t.Errorf("keys: %+v", l)
	}
	var h struct{ Hosts []route.HostInfo }
	decodeInto(t, e.ok("GET", "/api/v3/hosts", nil, 200), &h)
	if len(h.Hosts) != 2 || h.Hosts[0].HostID != "web-1" {
		t.Errorf("hosts: %+v", h)
	}
	e.ok("DELETE", "/api/v3/hosts/keys/web-1", nil, 204)
	e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 404)
}

// TestBadInputChangesNothing sends invalid ids, names, keys and bodies:
// each gets a 4xx problem and the store stays as it was.
func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	before := e.snapshot()
	big := `{"origins":["` + strings.Repeat("a", 1<<20) + `"]}`
	cases := []struct {
		method, path, body string
		status             int
	}{
		{"PUT", "/api/v3/apps/Shop", `{}`, 400},
		{"PUT", "/api/v3/apps/api", `{}`, 400},
		{"PUT", "/api/v3/apps/-x", `{}`, 400},
		{"PUT", "/api/v3/apps/" + strings.Repeat("a", 64), `{}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"mode":"tcp"}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"status":"paused"}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"colour":"red"}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example/"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["*"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["HTTPS://A.EXAMPLE"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["ftp://a.example"]}}`, 400},
		// origins a browser never sends (RFC 6454 §6.1: no default port,
		// the host in its ASCII form), so an entry written so never matches
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example:443"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["http://a.example:80"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://bücher.example"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example:"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example:08443"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example:99999"]}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":["https://a.example"],"extra":1}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":0}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":-1}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"0s"}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"soon"}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"block","path":"/"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"admin"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/a*b"}]}`, 400},
		// an empty methods list matches no method, where methods left out
		// match every one: taken as left out, this allow would match every
		// method and, first match winning, lift the deny after it
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"allow","methods":[],"path":"/admin/*"},{"action":"deny","path":"/admin/*"}]}`, 400},
		// rule paths the gateway could never match against a cleaned path:
		// a deny written so would silently let everything through
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin/"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"//admin"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/a/../admin"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin/./*"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin//*"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"//*"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin;x"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin."}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin%2f"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/admin\\x"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","methods":["GE T"],"path":"/"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"id":"other"}`, 400},
		// health paths no probe request can be built from: every host of
		// the app would fail its probe and stop being routed to
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/health%"}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/health%zz"}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/health\u0000"}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/health\u007f"}}`, 400},
		// a passthrough app's TLS ends at its host: the gateway pipes bytes
		// it cannot read, so a token or path rule would silently not hold
		{"PUT", "/api/v3/apps/shop", `{"mode":"passthrough","auth":{"required":true}}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"mode":"passthrough","policy":[{"action":"deny","path":"/admin/*"}]}`, 400},
		{"PUT", "/api/v3/apps/shop", `{"mode":"http"} {"mode":"http"}`, 400},
		{"PUT", "/api/v3/apps/shop", `[1,2]`, 400},
		{"PUT", "/api/v3/apps/shop", `{"mode":`, 400},
		{"PUT", "/api/v3/apps/shop", big, 413},
		// JSON text is UTF-8 (RFC 8259 §8.1); encoding/json would store
		// U+FFFD in place of the bad bytes, not what was sent
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/TXT", "{\"values\":[\"v=\xff\xfe\"]}", 400},
		{"PUT", "/api/v3/apps/shop", "{\"policy\":[{\"action\":\"deny\",\"path\":\"/adm\xc0in\"}]}", 400},
		// nor is half a UTF-16 surrogate pair a character; encoding/json
		// would store U+FFFD for it too
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/TXT", `{"values":["v=\ud800"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/TXT", `{"values":["v=\uDC00\ud83d"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/TXT", `{"values":["v=\ud83d\u0041"]}`, 400},
		{"PUT", "/api/v3/domains/localhost", `{"app":"shop"}`, 400},
		{"PUT", "/api/v3/domains/192.0.2.1", `{"app":"shop"}`, 400},
		{"PUT", "/api/v3/domains/bad_name.example", `{"app":"shop"}`, 400},
		{"PUT", "/api/v3/domains/bücher.example.net", `{"app":"shop"}`, 400},
		{"PUT", "/api/v3/dns/zones/bücher.example.net", `{"gateways":["127.0.0.1"]}`, 400},
		{"PUT", "/api/v3/domains/new.example.org", `{"app":"ghost"}`, 400},
		{"PUT", "/api/v3/domains/new.example.org", `{"app":"API"}`, 400},
		{"PUT", "/api/v3/domains/new.example.org", `{}`, 400},
		{"PUT", "/api/v3/domains/shop.example.org", `{"app":"shop","verified":true}`, 400},
		{"POST", "/api/v3/domains/shop.example.org/verify", `{}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":[]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["gw.example.com"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"],"ttl":-5}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"],"ttl":99999999}`, 400},
		{"PUT", "/api/v3/dns/zones/bad_zone", `{"gateways":["127.0.0.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/10.0.0.1", `{"gateways":["127.0.0.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/MX", `{"values":["x"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["::1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/AAAA", `{"values":["10.0.0.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":[]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/CNAME", `{"values":["a.example","b.example"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/w%20w/A", `{"values":["10.0.0.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/a.*/A", `{"values":["10.0.0.1"]}`, 400},
		// a CNAME names a name: an address there would be looked up as
		// the name "192.0.2.7." under the TLD "7"
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www2/CNAME", `{"values":["192.0.2.7"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www2/CNAME", `{"values":["2001:db8::7"]}`, 400},
		// the gateway answers DNS-01 for its wildcard *.{zone} with TXT
		// values here (DESIGN §9); a CNAME would send the CA elsewhere
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/_acme-challenge/CNAME", `{"values":["acme.example.net"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/_ACME-Challenge.apps.example.com./CNAME", `{"values":["acme.example.net"]}`, 400},
		// a listen address is not one to send clients to: every app of the
		// zone would resolve to it
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["0.0.0.0"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["::"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["224.0.0.1"]}`, 400},
		// an RRset holds each record once (RFC 2181 §5)
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1","127.0.0.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1","::ffff:127.0.0.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.1","192.0.2.1"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/AAAA", `{"values":["2001:db8::1","2001:DB8:0::1"]}`, 400},
		// an address's zone (the interface it is scoped to) does not go
		// out in an AAAA record: both would be served as fe80::1, twice
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/AAAA", `{"values":["fe80::1%eth0"]}`, 400},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/AAAA", `{"values":["fe80::1%eth0","fe80::1%eth1"]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"AAAA","apps":["shop"]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"not base64!","apps":["shop"]}`, 400},
		// the same 32 bytes non-strict base64 would decode, but not the text discovery compares
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey[:len(testKey)-2] + `p=","apps":["shop"]}`, 400},
		// the same 32 bytes with a line break: one key, another spelling
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey[:20] + `\n` + testKey[20:] + `","apps":["shop"]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `\r\n","apps":["shop"]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":[]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":["Shop"]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":["shop","shop"]}`, 400},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":["shop"],"host_id":"web-2"}`, 400},
		{"PUT", "/api/v3/hosts/keys/-web", `{"public_key":"` + testKey + `","apps":["shop"]}`, 400},
		{"DELETE", "/api/v3/apps/API", ``, 400},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, token, c.body)
		if r.status != c.status {
			t.Errorf("%s %s %.80s: status %d, want %d: %s", c.method, c.path, c.body, r.status, c.status, r.body)
			continue
		}
		if p := problemOf(t, r); p.Detail == "" {
			t.Errorf("%s %s: problem without detail", c.method, c.path)
		}
	}
	// a body that is not JSON at all
	req, _ := http.NewRequest("PUT", e.srv.URL+"/api/v3/apps/shop", strings.NewReader("mode=http"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 415 {
		t.Errorf("form body: %d, want 415", res.StatusCode)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("bad input changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// A body that is JSON null is no object: encoding/json decodes it into
// nothing, so PUT /apps/{app} with null wrote an app of defaults, its
// auth.required and policy gone (a platform's nil, marshalled). It is
// refused 400 like any other body of the wrong type, and changes nothing.
func TestNullBodyRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	e.ok("PUT", "/api/v3/apps/shop", `{"auth":{"required":true},"policy":[{"action":"deny","path":"/admin/*"}]}`, 200)
	before := e.snapshot()
	for _, c := range []struct{ method, path string }{
		{"PUT", "/api/v3/apps/shop"},
		{"PUT", "/api/v3/apps/blog"},
		{"PUT", "/api/v3/domains/shop.example.org"},
		{"POST", "/api/v3/domains/shop.example.org/verify"},
		{"PUT", "/api/v3/dns/zones/apps.example.com"},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/A"},
		{"PUT", "/api/v3/hosts/keys/web-1"},
	} {
		for _, body := range []string{`null`, " null\n"} {
			r := e.do(c.method, c.path, token, body)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s %s %q: %d, want 400: %s", c.method, c.path, body, r.status, r.body)
				continue
			}
			if p := problemOf(t, r); !strings.Contains(p.Detail, "want an object, got a JSON null") {
				t.Errorf("%s %s %q: detail %q does not say the body is null where an object was wanted", c.method, c.path, body, p.Detail)
			}
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a null body changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// A JSON body under another Content-Type is refused 415, and the detail
// says which field to fix and what it held: `curl -d '{"app":"shop"}'`
// sends a form type, and "the body must be application/json" told its
// sender, whose body is JSON, nothing they could act on. The 415 names
// the type taken in Accept too, for a client that reads fields, not
// details (RFC 9110 §15.5.16, §12.5.1).
func TestWrongContentTypeNamesTheField(t *testing.T) {
	e := newEnv(t, nil)
	before := e.snapshot()
	for _, ct := range []string{
		"application/x-www-form-urlencoded", // curl -d
		"text/plain; charset=utf-8",
		"application/json;;", // does not parse
	} {
		req, _ := http.NewRequest("PUT", e.srv.URL+"/api/v3/apps/shop", strings.NewReader(`{"mode":"http"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", ct)
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		r := resp{res.StatusCode, res.Header, b}
		if r.status != 415 {
			t.Errorf("Content-Type %q: status %d, want 415: %s", ct, r.status, r.body)
			continue
		}
		d := problemOf(t, r).Detail
		if !strings.Contains(d, "Content-Type: application/json") || !strings.Contains(d, strconv.Quote(ct)) {
			t.Errorf("Content-Type %q: detail %q, want it to ask for Content-Type: application/json and name %q", ct, d, ct)
		}
		if got := r.header.Values("Accept"); !slices.Equal(got, []string{"application/json"}) {
			t.Errorf("Content-Type %q: 415 with Accept %q, want application/json (the type taken)", ct, got)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused Content-Type changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// A body under a Content-Encoding is refused 415 naming it: the API
// decodes no coding, so a gzip body was refused as "not valid UTF-8",
// which sent its sender to look at the JSON, and a plain body labelled
// br was stored as if the field were not there. The 415 says with
// Accept-Encoding: identity that no coding is taken (RFC 9110 §15.5.16,
// RFC 7694 §3). identity is no coding, however often it is listed, and
// a request without a body is not refused for the field.
func TestContentEncodingRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"status":"suspended"}`))
	_ = zw.Close()
	// send sends body with one Content-Encoding line for each of ce
	send := func(method, path string, body []byte, ce ...string) resp {
		t.Helper()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, e.srv.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for _, v := range ce {
			req.Header.Add("Content-Encoding", v)
		}
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return resp{res.StatusCode, res.Header, b}
	}
	before := e.snapshot()
	for _, c := range []struct {
		method, path string
		ce           []string
		body         []byte
		named        string // in the detail
	}{
		{"PUT", "/api/v3/apps/shop", []string{"gzip"}, gz.Bytes(), `"gzip"`},
		{"PUT", "/api/v3/apps/shop", []string{"br"}, []byte(`{"status":"suspended"}`), `"br"`},
		{"PUT", "/api/v3/apps/shop", []string{"gzip, identity"}, gz.Bytes(), `"gzip, identity"`},
		{"PUT", "/api/v3/apps/shop", []string{"identity", "gzip"}, gz.Bytes(), `"identity, gzip"`},
		{"POST", "/api/v3/dns/resolve/batch", []string{"deflate"}, []byte(`[{"name":"a.apps.example.com"}]`), `"deflate"`},
	} {
		r := send(c.method, c.path, c.body, c.ce...)
		if r.status != 415 {
			t.Errorf("%s %s, Content-Encoding %q: status %d, want 415: %s", c.method, c.path, c.ce, r.status, r.body)
			continue
		}
		if d := problemOf(t, r).Detail; !strings.Contains(d, "Content-Encoding") || !strings.Contains(d, c.named) {
			t.Errorf("Content-Encoding %q: detail %q, want it to name the field and %s", c.ce, d, c.named)
		}
		if got := r.header.Values("Accept-Encoding"); !slices.Equal(got, []string{"identity"}) {
			t.Errorf("Content-Encoding %q: 415 with Accept-Encoding %q, want identity (no coding taken)", c.ce, got)
		}
		if got := r.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("Content-Encoding %q: 415 with Cache-Control %q, want no-store", c.ce, got)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused Content-Encoding changed the store\nbefore %s\nafter  %s", before, after)
	}
	for _, ce := range [][]string{{"identity"}, {"Identity"}, {"identity, identity"}, {"identity", "identity"}, {" , identity ,"}} {
		if r := send("PUT", "/api/v3/apps/shop", []byte(`{"status":"suspended"}`), ce...); r.status != 200 {
			t.Errorf("Content-Encoding %q: status %d, want 200: %s", ce, r.status, r.body)
		}
	}
	// no body, nothing coded: the field does not matter
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/api/v3/apps/shop", 200},
		{"HEAD", "/api/v3/apps/shop", 200},
		{"GET", "/api/v3/apps", 200},
		{"DELETE", "/api/v3/dns/zones/apps.example.com/records/www/A", 204},
	} {
		if r := send(c.method, c.path, nil, "gzip"); r.status != c.want {
			t.Errorf("%s %s without a body, Content-Encoding gzip: status %d, want %d: %s", c.method, c.path, r.status, c.want, r.body)
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a store succeeded")
	}
	st, _ := newStore(t)
	if _, err := New(Options{Store: st}); err == nil {
		t.Error("New without NotFound succeeded")
	}
}

// TestVerifyKeepsLaterChanges checks that a proof that takes a while (here
// an http proof whose server answers only when told) does not write back
// the mapping it read before: a DELETE or a move to another app made
// meanwhile stands, and the verify answers 404 or 409 instead.
func TestVerifyKeepsLaterChanges(t *testing.T) {
	asked, answer := make(chan struct{}, 1), make(chan struct{}, 1)
	var proofToken atomic.Value
	proofSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		<-answer
		io.WriteString(w, proofToken.Load().(string))
	}))
	t.Cleanup(proofSrv.Close)
	client := verify.NewDomainClient()
	client.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, proofSrv.Listener.Addr().String())
	}
	e := newEnv(t, func(o *Options) {
		o.VerifyDomain = func(ctx context.Context, d route.Domain, method string) error {
			return verify.Domain(ctx, verify.DomainOptions{HTTPClient: client}, verify.DomainClaim{Domain: d.Domain, App: d.App, Token: d.Token}, method)
		}
	})
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	cases := []struct {
		name   string
		change func()
		status int
		want   string // the mapping afterwards; "" for none
	}{
		{"deleted", func() { e.ok("DELETE", "/api/v3/domains/shop.example.org", nil, 204) }, 404, ""},
		{"moved", func() { e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"blog"}`, 200) }, 409, `"app":"blog"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d route.Domain
			decodeInto(t, e.ok("PUT", "/api/v3/domains/shop.example.org", `{"app":"shop"}`, 200), &d)
			proofToken.Store(d.Token)
			done := make(chan resp, 1)
			go func() { done <- e.do("POST", "/api/v3/domains/shop.example.org/verify", token, `{"method":"http"}`) }()
			<-asked // the proof is under way
			c.change()
			answer <- struct{}{}
			r := <-done
			if r.status != c.status {
				t.Errorf("verify: %d, want %d: %s", r.status, c.status, r.body)
			}
			got := e.do("GET", "/api/v3/domains/shop.example.org", token, nil)
			switch {
			case c.want == "" && got.status != 404:
				t.Errorf("the deleted mapping came back: %s", got.body)
			case c.want != "" && (!strings.Contains(string(got.body), c.want) || !strings.Contains(string(got.body), `"verified":false`)):
				t.Errorf("the moved mapping was overwritten: %s", got.body)
			}
			e.do("DELETE", "/api/v3/domains/shop.example.org", token, nil)
		})
	}
}

// TestCNAMEOwnsItsName: a CNAME answers every type at its name (RFC 1034
// §3.6.2, internal/dns), so a record beside it, or beside the apex's SOA
// and NS, would be stored and never served: refused, with nothing changed.
func TestCNAMEOwnsItsName(t *testing.T) {
	e := newEnv(t, nil)
	const z = "/api/v3/dns/zones/apps.example.com/records/"
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	e.ok("PUT", z+"www/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("PUT", z+"alias/CNAME", `{"values":["shop.example.org"]}`, 200)
	before := e.snapshot()
	for _, c := range []struct{ path, body string }{
		{"www/CNAME", `{"values":["shop.example.org"]}`},
		{"@/CNAME", `{"values":["shop.example.org"]}`},
		{"apps.example.com/CNAME", `{"values":["shop.example.org"]}`},
		{"alias/TXT", `{"values":["tok"]}`},
		{"alias/A", `{"values":["192.0.2.2"]}`},
	} {
		if p := problemOf(t, e.ok("PUT", z+c.path, c.body, 400)); !strings.Contains(p.Detail, "CNAME") {
			t.Errorf("PUT %s: detail %q does not name the CNAME", c.path, p.Detail)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused records changed the store\nbefore %s\nafter  %s", before, after)
	}
	// replacing a record set with one of its own type stays allowed
	e.ok("PUT", z+"alias/CNAME", `{"values":["blog.example.org"]}`, 200)
	e.ok("PUT", z+"www/A", `{"values":["192.0.2.3"]}`, 200)
}

// TestAbsoluteRecordNameOutsideZone: a record name that ends with a dot is
// absolute, as in every zone file and DNS tool: one in the zone is taken
// as it is, but one outside it is not made relative by appending the zone
// (shop.example.org. written as shop.example.org.apps.example.com), which
// would store a record at a name nobody asked for. It is refused, naming
// the zone, and nothing changes; the same name without the dot is
// relative, as before.
func TestAbsoluteRecordNameOutsideZone(t *testing.T) {
	e := newEnv(t, nil)
	const z = "/api/v3/dns/zones/apps.example.com/records/"
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	before := e.snapshot()
	for _, name := range []string{"shop.example.org.", "example.com.", "xapps.example.com.", "www.example.com."} {
		if p := problemOf(t, e.ok("PUT", z+name+"/A", `{"values":["192.0.2.1"]}`, 400)); !strings.Contains(p.Detail, `"apps.example.com"`) {
			t.Errorf("PUT %s: detail %q does not name the zone", name, p.Detail)
		}
		e.ok("GET", z+name+"/A", nil, 400)
		e.ok("DELETE", z+name+"/A", nil, 400)
	}
	if p := problemOf(t, e.ok("PUT", z+"www/A", `{"name":"www.example.org.","values":["192.0.2.1"]}`, 400)); !strings.Contains(p.Detail, "the path says") {
		t.Errorf("body name outside the zone: %q", p.Detail)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused name changed the store\nbefore %s\nafter  %s", before, after)
	}
	var rec route.Record
	for name, want := range map[string]string{
		"www.apps.example.com.": "www.apps.example.com",
		"apps.example.com.":     "apps.example.com",
		"shop.example.org":      "shop.example.org.apps.example.com",
	} {
		decodeInto(t, e.ok("PUT", z+name+"/A", `{"values":["192.0.2.1"]}`, 200), &rec)
		if rec.Name != want {
			t.Errorf("PUT %s: stored at %q, want %q", name, rec.Name, want)
		}
	}
}

// TestCNAMETargetWithUnderscore: a CNAME's target is a DNS name, and DNS
// names may hold underscores (RFC 2181 §11), as the targets providers
// hand out do: Microsoft 365's DKIM selector1._domainkey CNAME
// selector1-contoso-com._domainkey.contoso.onmicrosoft.com, or an ACME
// challenge delegated to another zone. Such a CNAME is stored and
// answered; a target that is no DNS name is still refused.
func TestCNAMETargetWithUnderscore(t *testing.T) {
	e := newEnv(t, nil)
	const z = "/api/v3/dns/zones/apps.example.com/records/"
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	for name, target := range map[string]string{
		"selector1._domainkey": "selector1-contoso-com._domainkey.contoso.onmicrosoft.com",
		"_acme-challenge.shop": "_acme-challenge.shop.auth.acme-dns.example.net.",
		"_dmarc":               "_dmarc.example.org",
		"s1._domainkey.mail":   "s1.domainkey.u1234.wl.sendgrid.net",
		"_sip._tcp":            "sip.example.org",
		"_imaps._tcp.x":        "_imaps._tcp.example.org",
		"www":                  "shop.example.org",
		"www2":                 "Shop.Example.org",
		"deep._a.b._c":         "a_b.example.org",
	} {
		var rec route.Record
		decodeInto(t, e.ok("PUT", z+name+"/CNAME", `{"values":["`+target+`"]}`, 200), &rec)
		if len(rec.Values) != 1 || rec.Values[0] != target {
			t.Errorf("%s CNAME %s: stored %q", name, target, rec.Values)
		}
	}
	before := e.snapshot()
	for _, target := range []string{
		"a b.example.org", "a..example.org", ".example.org", "-a.example.org", "a-.example.org",
		"bücher.example", "a*.example.org", "*.example.org", strings.Repeat("a", 64) + ".example.org",
		strings.Repeat("a.", 127) + "ab", "192.0.2.7", "a/b.example.org", "a\\.b.example.org", "",
	} {
		problemOf(t, e.ok("PUT", z+"bad/CNAME", `{"values":["`+target+`"]}`, 400))
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused CNAME changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// TestCNAMEToItself: a CNAME whose target is its own name is a loop
// (RFC 1034 §3.6.2): the DNS server would answer the alias and nothing
// else, and resolvers fail the name (SERVFAIL). It is refused, whatever
// the case or trailing dot of the target, and nothing changes.
func TestCNAMEToItself(t *testing.T) {
	e := newEnv(t, nil)
	const z = "/api/v3/dns/zones/apps.example.com/records/"
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	before := e.snapshot()
	for name, target := range map[string]string{
		"www":                   "www.apps.example.com",
		"WWW":                   "www.Apps.Example.com.",
		"a.b.apps.example.com.": "a.b.apps.example.com",
	} {
		if p := problemOf(t, e.ok("PUT", z+name+"/CNAME", `{"values":["`+target+`"]}`, 400)); !strings.Contains(p.Detail, "itself") {
			t.Errorf("%s CNAME %s: detail %q does not say it points to itself", name, target, p.Detail)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused CNAME changed the store\nbefore %s\nafter  %s", before, after)
	}
	e.ok("PUT", z+"www/CNAME", `{"values":["www.apps.example.com.example.org"]}`, 200)
	e.ok("PUT", z+"w/CNAME", `{"values":["www.apps.example.com"]}`, 200)
}

// TestNoCNAMEAtTheZonesNSName: the DNS server answers every zone's NS
// with ns.{zone} (internal/dns), and a name an NS record names must not
// be an alias (RFC 2181 §10.3): resolvers such as BIND skip such a name
// server, so once they take the zone's own NS set over its parent's the
// zone stops resolving. A CNAME there is refused, naming why, and nothing
// changes; an address of its own there stays allowed.
func TestNoCNAMEAtTheZonesNSName(t *testing.T) {
	e := newEnv(t, nil)
	const z = "/api/v3/dns/zones/apps.example.com/records/"
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	before := e.snapshot()
	for _, name := range []string{"ns", "NS.apps.example.com.", "ns.apps.example.com"} {
		if p := problemOf(t, e.ok("PUT", z+name+"/CNAME", `{"values":["dns.example.net"]}`, 400)); !strings.Contains(p.Detail, "NS") {
			t.Errorf("PUT %s CNAME: detail %q does not say the zone's NS names it", name, p.Detail)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused CNAME changed the store\nbefore %s\nafter  %s", before, after)
	}
	e.ok("PUT", z+"ns/A", `{"values":["192.0.2.53"]}`, 200)
	e.ok("PUT", z+"ns.x/CNAME", `{"values":["dns.example.net"]}`, 200)
}

// TestDeleteAppStillNamed: an app that a domain mapping or a host key
// still names is not deleted (409 naming them, nothing changed), since
// the next app created under its id would inherit a verified domain with
// no proof and the old owner's host. Once they are gone, or a shared
// key is re-PUT without the app, the delete goes through and a new app
// of that name starts with nothing.
func TestDeleteAppStillNamed(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	e.ok("PUT", "/api/v3/domains/www.customer.example", `{"app":"shop"}`, 200)
	e.ok("POST", "/api/v3/domains/www.customer.example/verify", `{"method":"manual"}`, 200)
	e.ok("PUT", "/api/v3/domains/blog.customer.example", `{"app":"blog"}`, 200)
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"blog", "shop"}}, 200)
	e.ok("PUT", "/api/v3/hosts/keys/web-2", map[string]any{"public_key": testKey, "apps": []string{"shop"}}, 200)

	steps := []struct {
		name   string
		do     func()
		named  []string // in the 409's detail
		absent []string // not in it
	}{
		{"domain and keys", func() {},
			[]string{"domain www.customer.example (verified)", "host key web-1 (also serves 1 other app)", "host key web-2", `PUT it without "shop"`},
			[]string{"blog.customer.example"}},
		{"keys left", func() { e.ok("DELETE", "/api/v3/domains/www.customer.example", nil, 204) },
			[]string{"host key web-1", "host key web-2"}, []string{"www.customer.example"}},
		{"shared key left", func() { e.ok("DELETE", "/api/v3/hosts/keys/web-2", nil, 204) },
			[]string{"host key web-1"}, []string{"web-2"}},
	}
	for _, s := range steps {
		s.do()
		before := e.snapshot()
		p := problemOf(t, e.ok("DELETE", "/api/v3/apps/shop", nil, 409))
		for _, want := range s.named {
			if !strings.Contains(p.Detail, want) {
				t.Errorf("%s: detail %q does not name %q", s.name, p.Detail, want)
			}
		}
		for _, not := range s.absent {
			if strings.Contains(p.Detail, not) {
				t.Errorf("%s: detail %q names %q", s.name, p.Detail, not)
			}
		}
		if after := e.snapshot(); after != before {
			t.Errorf("%s: a refused delete changed the store\nbefore %s\nafter  %s", s.name, before, after)
		}
	}
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"blog"}}, 200)
	e.ok("DELETE", "/api/v3/apps/shop", nil, 204)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("GET", "/api/v3/domains/www.customer.example", nil, 404)
	var k route.HostKey
	decodeInto(t, e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 200), &k)
	if !slices.Equal(k.Apps, []string{"blog"}) {
		t.Errorf("blog's host key after the delete: %+v", k)
	}
}

// hookStore runs a hook (once) just before the store call it is set for,
// to put another request between a handler's read and its write.
type hookStore struct {
	Store
	beforeDeleteApp, beforePutDomain, beforePutHostKey, beforePutRecord atomic.Pointer[func()]
	// inUpdateDomain runs once inside an UpdateDomain, after its read and
	// before its write.
	inUpdateDomain, inUpdateApp atomic.Pointer[func()]
	failDeleteRecords           atomic.Bool // once
}

func (h *hookStore) PutRecord(ctx context.Context, r *route.Record) error {
	if f := h.beforePutRecord.Swap(nil); f != nil {
		(*f)()
	}
	return h.Store.PutRecord(ctx, r)
}

func (h *hookStore) DeleteRecords(ctx context.Context, zone string) error {
	if h.failDeleteRecords.Swap(false) {
		return errors.New("injected store failure")
	}
	return h.Store.DeleteRecords(ctx, zone)
}

func (h *hookStore) PutHostKey(ctx context.Context, k *route.HostKey) error {
	if f := h.beforePutHostKey.Swap(nil); f != nil {
		(*f)()
	}
	return h.Store.PutHostKey(ctx, k)
}

func (h *hookStore) DeleteApp(ctx context.Context, id string) error {
	if f := h.beforeDeleteApp.Swap(nil); f != nil {
		(*f)()
	}
	return h.Store.DeleteApp(ctx, id)
}

func (h *hookStore) PutDomain(ctx context.Context, d *route.Domain) error {
	if f := h.beforePutDomain.Swap(nil); f != nil {
		(*f)()
	}
	return h.Store.PutDomain(ctx, d)
}

// newHookEnv is newEnv with its store behind a hookStore.
func newHookEnv(t *testing.T) (*env, *hookStore) {
	var hs *hookStore
	e := newEnv(t, func(o *Options) {
		hs = &hookStore{Store: o.Store}
		o.Store = hs
	})
	return e, hs
}

func (h *hookStore) UpdateApp(ctx context.Context, id string, fn func(*route.App) (*route.App, error)) error {
	return h.Store.UpdateApp(ctx, id, func(cur *route.App) (*route.App, error) {
		if f := h.inUpdateApp.Swap(nil); f != nil {
			(*f)()
		}
		return fn(cur)
	})
}

func (h *hookStore) UpdateDomain(ctx context.Context, name string, fn func(*route.Domain) (*route.Domain, error)) error {
	return h.Store.UpdateDomain(ctx, name, func(cur *route.Domain) (*route.Domain, error) {
		if f := h.inUpdateDomain.Swap(nil); f != nil {
			(*f)()
		}
		return fn(cur)
	})
}

// TestDeleteAppRacesPutDomain: a DELETE of an app and a PUT of a domain
// to it, each landing between the other's check and its write, never
// leave the domain mapped to the deleted app (a later app of that name
// would inherit it): the one whose write lands second backs out with a
// 409, and the store holds either both or neither.
//
// It runs as the DELETE finds the mappings with no table following the
// store (a list) and with one (the table, then a read of each).
func TestDeleteAppRacesPutDomain(t *testing.T) {
	t.Run("list", func(t *testing.T) {
		e, hs := newHookEnv(t)
		testDeleteAppRacesPutDomain(t, e, hs)
	})
	t.Run("table", func(t *testing.T) {
		var lc *listCount
		var hs *hookStore
		e := newEnv(t, func(o *Options) {
			lc = &listCount{Store: o.Store}
			hs = &hookStore{Store: lc}
			o.Store = hs
		})
		followStore(t, lc.Store.(*store.Store))
		testDeleteAppRacesPutDomain(t, e, hs)
		if n := lc.domains.Load(); n != 0 {
			t.Errorf("listed every mapping %d times; the table should have answered", n)
		}
	})
}

func testDeleteAppRacesPutDomain(t *testing.T, e *env, hs *hookStore) {
	const dom = "/api/v3/domains/www.customer.example"
	cases := []struct {
		name             string
		first            string // the request sent; the other runs inside it
		putWant, delWant int
		appKept, domKept bool
	}{
		// DELETE lists no mapping, then the PUT runs to completion
		// before the app is deleted.
		{"mapping written before the delete", "DELETE", 200, 409, true, true},
		// The PUT finds the app, then the DELETE runs to completion
		// before the mapping is written.
		{"app deleted before the mapping is written", "PUT", 409, 204, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.ok("PUT", "/api/v3/apps/shop", nil, 200)
			var put, del resp
			doPut := func() { put = e.do("PUT", dom, token, `{"app":"shop"}`) }
			doDel := func() { del = e.do("DELETE", "/api/v3/apps/shop", token, nil) }
			if c.first == "DELETE" {
				hs.beforeDeleteApp.Store(&doPut)
				doDel()
			} else {
				hs.inUpdateDomain.Store(&doDel) // the PUT's write is an update
				doPut()
			}
			if put.status != c.putWant || del.status != c.delWant {
				t.Errorf("PUT domain %d, DELETE app %d; want %d and %d\nPUT: %s\nDELETE: %s",
					put.status, del.status, c.putWant, c.delWant, put.body, del.body)
			}
			if got := e.do("GET", "/api/v3/apps/shop", token, nil).status == 200; got != c.appKept {
				t.Errorf("app shop exists: %v, want %v", got, c.appKept)
			}
			if got := e.do("GET", dom, token, nil); (got.status == 200) != c.domKept {
				t.Errorf("mapping exists: %v, want %v: %s", got.status == 200, c.domKept, got.body)
			}
			e.do("DELETE", dom, token, nil)
			e.do("DELETE", "/api/v3/apps/shop", token, nil)
		})
	}
}

// TestPutDomainRacesVerify: a verify that lands between a PUT's read of
// a mapping and its write is not overwritten. The PUT, which moves the
// mapping to another app, answers 409 as it does for a mapping verified
// before it came (a verified mapping is not moved), and the mapping stays
// verified for the app that proved it. The verify runs from whichever
// hook the PUT reaches between its read and its write.
func TestPutDomainRacesVerify(t *testing.T) {
	e, hs := newHookEnv(t)
	const dom = "/api/v3/domains/www.customer.example"
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	e.ok("PUT", dom, `{"app":"shop"}`, 200)
	var ran atomic.Bool // the verify's own UpdateDomain reaches a hook too
	var verified resp
	verify := func() {
		if !ran.Swap(true) {
			verified = e.do("POST", dom+"/verify", token, `{"method":"manual"}`)
		}
	}
	hs.beforePutDomain.Store(&verify)
	hs.inUpdateDomain.Store(&verify)
	put := e.do("PUT", dom, token, `{"app":"blog"}`)
	hs.beforePutDomain.Store(nil)
	hs.inUpdateDomain.Store(nil)
	if verified.status != 200 {
		t.Fatalf("the verify in between: %d %s", verified.status, verified.body)
	}
	if put.status != http.StatusConflict {
		t.Errorf("PUT moving the mapping verified meanwhile: %d, want 409: %s", put.status, put.body)
	}
	var d route.Domain
	decodeInto(t, e.ok("GET", dom, nil, 200), &d)
	if d.App != "shop" || !d.Verified {
		t.Errorf("after the race the mapping is %+v, want the verified one for shop", d)
	}
}

// TestDeleteAppConflictIsBounded: an app with many mappings gets a 409
// that names the first 20 and counts the rest.
func TestDeleteAppConflictIsBounded(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	for i := range 25 {
		e.ok("PUT", fmt.Sprintf("/api/v3/domains/d%02d.example.org", i), `{"app":"shop"}`, 200)
	}
	p := problemOf(t, e.ok("DELETE", "/api/v3/apps/shop", nil, 409))
	if !strings.Contains(p.Detail, "domain d19.example.org") || strings.Contains(p.Detail, "d20.example.org") || !strings.Contains(p.Detail, "and 5 more") {
		t.Errorf("detail %q: want d00 to d19 named and 5 more counted", p.Detail)
	}
}

// TestRecordInsideInnerZone: the DNS server answers every name from the
// most specific zone it is in (internal/dns), so a record put in a zone
// for a name inside another zone under it would never be served: it is
// refused (409 naming that zone, nothing changed), and deleting such a
// record stays possible.
func TestRecordInsideInnerZone(t *testing.T) {
	e := newEnv(t, nil)
	gw := `{"gateways":["127.0.0.1"]}`
	e.ok("PUT", "/api/v3/dns/zones/example.com", gw, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", gw, 200)
	// one stored before the inner zone, as an older gateway allowed
	// (checkOuterRecords refuses that order now)
	if err := e.st.PutRecord(context.Background(), &route.Record{Zone: "example.com", Name: "shadow.apps.example.com", Type: "A", Values: []string{"192.0.2.9"}}); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	for _, name := range []string{"x.apps", "deep.x.apps.example.com", "apps", "*.apps", "_acme-challenge.apps"} {
		p := problemOf(t, e.ok("PUT", "/api/v3/dns/zones/example.com/records/"+name+"/TXT", `{"values":["v"]}`, 409))
		if !strings.Contains(p.Detail, `"apps.example.com"`) {
			t.Errorf("%s: detail %q does not name the inner zone", name, p.Detail)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused record changed the store\nbefore %s\nafter  %s", before, after)
	}
	// beside the inner zone, in the inner zone, and with it gone: fine
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/www/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/xapps/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/_dmarc/TXT", `{"values":["v=DMARC1; p=none"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/*.www/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/x/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("DELETE", "/api/v3/dns/zones/example.com/records/shadow.apps/A", nil, 204)
	e.ok("DELETE", "/api/v3/dns/zones/apps.example.com", nil, 204)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/x.apps/A", `{"values":["192.0.2.1"]}`, 200)
}

// TestZoneOverOuterRecords: a new zone would answer for every name at or
// under it, so records an outer zone holds there would stop being served
// without a word: its creation is refused (409 naming the outer zone and
// the records, nothing changed), as checkInnerZone refuses the other
// order. Beside them, or once they are gone, it is created; a zone
// already there is updated whatever the outer zone holds.
func TestZoneOverOuterRecords(t *testing.T) {
	e := newEnv(t, nil)
	gw := `{"gateways":["127.0.0.1"]}`
	e.ok("PUT", "/api/v3/dns/zones/example.com", gw, 200)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/x.apps/A", `{"values":["192.0.2.1"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/eu/TXT", `{"values":["v"]}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/example.com/records/*.eu/A", `{"values":["192.0.2.2"]}`, 200)
	before := e.snapshot()
	for _, c := range []struct{ zone, want string }{
		{"apps.example.com", "x.apps.example.com A"},
		{"x.apps.example.com", "x.apps.example.com A"}, // at the zone's own name
		{"eu.example.com", "eu.example.com TXT"},
		{"eu.example.com", "*.eu.example.com A"},
	} {
		p := problemOf(t, e.ok("PUT", "/api/v3/dns/zones/"+c.zone, gw, 409))
		if !strings.Contains(p.Detail, c.want) || !strings.Contains(p.Detail, `"example.com"`) {
			t.Errorf("zone %s: detail %q does not name %q in zone example.com", c.zone, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused zone changed the store\nbefore %s\nafter  %s", before, after)
	}
	e.ok("PUT", "/api/v3/dns/zones/xapps.example.com", gw, 200) // beside, not under
	e.ok("PUT", "/api/v3/dns/zones/y.apps.example.com", gw, 200)
	e.ok("DELETE", "/api/v3/dns/zones/example.com/records/x.apps/A", nil, 204)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", gw, 200)
	// records written under it before this check do not stop an update
	if err := e.st.PutRecord(context.Background(), &route.Record{Zone: "example.com", Name: "z.apps.example.com", Type: "A", Values: []string{"192.0.2.3"}}); err != nil {
		t.Fatal(err)
	}
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.2"]}`, 200)
}

// TestZoneOverMappedDomain: a zone that would contain a mapped custom
// domain is refused (409 naming it, nothing changed), since {app}.{zone}
// is looked up first and an app named after the domain's first label
// would take its traffic. putDomain already refuses the other order.
func TestZoneOverMappedDomain(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/domains/www.shop.example", `{"app":"shop"}`, 200)
	e.ok("POST", "/api/v3/domains/www.shop.example/verify", `{"method":"manual"}`, 200)
	e.ok("PUT", "/api/v3/domains/shop.example", `{"app":"shop"}`, 200)
	gw := `{"gateways":["127.0.0.1"]}`
	before := e.snapshot()
	for _, c := range []struct{ zone, want string }{
		{"shop.example", "www.shop.example"}, // over it
		{"shop.example", "(shop.example, "},  // at it
		{"example", "www.shop.example"},      // further up
	} {
		if p := problemOf(t, e.ok("PUT", "/api/v3/dns/zones/"+c.zone, gw, 409)); !strings.Contains(p.Detail, c.want) {
			t.Errorf("zone %s: detail %q does not name %q", c.zone, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused zone changed the store\nbefore %s\nafter  %s", before, after)
	}
	// below or beside the domains is fine: no mapped name is in them
	e.ok("PUT", "/api/v3/dns/zones/eu.www.shop.example", gw, 200)
	e.ok("PUT", "/api/v3/dns/zones/blog.example", gw, 200)
	e.ok("PUT", "/api/v3/dns/zones/hop.example", gw, 200)
	e.ok("DELETE", "/api/v3/domains/www.shop.example", nil, 204)
	e.ok("DELETE", "/api/v3/domains/shop.example", nil, 204)
	e.ok("PUT", "/api/v3/dns/zones/shop.example", gw, 200)
}

// TestWrongTokensLimited: each wrong bearer token, on a control route or
// a resolve route, is charged to the client address; once the window is
// spent every request with a token gets 429 with Retry-After, the right
// token too (else the answer would tell a guesser which guess was right),
// until the window has room. Right tokens are never charged, requests
// without a token guess nothing and are not metered, and another address
// has its own window. A concurrent burst is checked no more times than
// the window has room for.
func TestWrongTokensLimited(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e, _ := resolveEnvWith(t, func(o *Options) {
		o.BadTokens = limit.Quota{Limit: 5, Window: time.Minute}
		o.Now = clock
	})
	want := func(tok, path string, status int) resp {
		t.Helper()
		r := e.do("GET", path, tok, nil)
		if r.status != status {
			t.Fatalf("GET %s with %q: %d, want %d: %s", path, tok, r.status, status, r.body)
		}
		return r
	}
	for range 10 {
		want(token, "/api/v3/apps", 200) // never charged
	}
	for i := range 5 {
		path := "/api/v3/apps"
		if i%2 == 1 {
			path = "/api/v3/dns/resolve?name=a.apps.example.com"
		}
		want(fmt.Sprintf("guess-%d", i), path, 401)
	}
	for _, c := range []struct{ tok, path string }{
		{"guess-5", "/api/v3/apps"},
		{"guess-6", "/api/v3/dns/resolve?name=a.apps.example.com"},
		{token, "/api/v3/apps"},
	} {
		r := want(c.tok, c.path, 429)
		problemOf(t, r)
		if s := r.header.Get("Retry-After"); s == "" || s == "0" {
			t.Errorf("429 with Retry-After %q", s)
		}
	}
	want("", "/api/v3/apps", 401) // no token: no guess
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	t.Cleanup(other.CloseIdleConnections)
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v3/apps", nil)
	req.Header.Set("Authorization", "Bearer guess-from-elsewhere")
	if res, err := other.Do(req); err != nil {
		t.Fatal(err)
	} else if res.Body.Close(); res.StatusCode != 401 {
		t.Errorf("another address: %d, want 401", res.StatusCode)
	}

	advance(2 * time.Minute)
	burst := func(tok func(i int) string) map[int]int {
		codes := make([]int, 40)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() { codes[i] = e.do("GET", "/api/v3/apps", tok(i), nil).status })
		}
		wg.Wait()
		n := map[int]int{}
		for _, c := range codes {
			n[c]++
		}
		return n
	}
	if n := burst(func(int) string { return token }); n[200] != 40 {
		t.Errorf("40 right tokens at once: %v, want all 200", n)
	}
	if n := burst(func(i int) string { return fmt.Sprintf("burst-%d", i) }); n[401] != 5 || n[429] != 35 {
		t.Errorf("40 wrong tokens at once: %v, want 5 checked (401) and 35 refused (429)", n)
	}
}

// TestWrongTokenBurstHeldToWindow: a burst of wrong tokens that all find
// room in the window before any is charged is still checked no more
// times than the window has room for: here the checks block until the
// rest of the burst has been answered, and only 5 of 40 are inside.
func TestWrongTokenBurstHeldToWindow(t *testing.T) {
	var inside atomic.Int32
	release := make(chan struct{})
	e := newEnv(t, func(o *Options) {
		o.BadTokens = limit.Quota{Limit: 5, Window: time.Minute}
		o.VerifyPlatform = func(*http.Request) error {
			inside.Add(1)
			<-release
			return auth.ErrInvalid
		}
	})
	var done atomic.Int32
	codes := make([]int, 40)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			codes[i] = e.do("GET", "/api/v3/apps", fmt.Sprintf("burst-%d", i), nil).status
			done.Add(1)
		})
	}
	ok := testutil.Eventually(5*time.Second, func() bool { return done.Load() == 35 })
	got := inside.Load()
	close(release)
	wg.Wait()
	if !ok || got != 5 {
		t.Errorf("while the checks were held: %d answered and %d being checked, want 35 and 5", done.Load(), got)
	}
	n := map[int]int{}
	for _, c := range codes {
		n[c]++
	}
	if n[401] != 5 || n[429] != 35 {
		t.Errorf("codes %v, want 5 401 and 35 429", n)
	}
}

// TestRightTokenWaitsForChecksInPlay: while every unit of an address's
// window is held by checks under way, a request with a token waits for
// one of them to end instead of being refused; when they end good, it is
// checked and served. (Before, a platform's burst of right tokens from
// one address met 429 whenever it outnumbered the window's units.)
func TestRightTokenWaitsForChecksInPlay(t *testing.T) {
	var inside atomic.Int32
	release := make(chan struct{})
	e := newEnv(t, func(o *Options) {
		o.BadTokens = limit.Quota{Limit: 5, Window: time.Minute}
		o.VerifyPlatform = func(r *http.Request) error {
			if inside.Add(1) <= 5 {
				<-release
			}
			if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer platform-") {
				return nil
			}
			return auth.ErrInvalid
		}
	})
	codes := make([]int, 6)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() { codes[i] = e.do("GET", "/api/v3/apps", fmt.Sprintf("platform-%d", i), nil).status })
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return inside.Load() == 5 }, "five checks under way")
	sixth := make(chan int, 1)
	go func() { sixth <- e.do("GET", "/api/v3/apps", "platform-5", nil).status }()
	select {
	case codes[5] = <-sixth:
		t.Errorf("with every unit in play, the sixth answered %d at once, want a wait", codes[5])
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	if codes[5] == 0 {
		codes[5] = <-sixth
	}
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: %d, want 200 (right tokens are never refused while the window has room)", i, c)
		}
	}
}

// TestAmbiguousKeysRefused: a body that repeats a key, or spells a
// field's key in another case (encoding/json would match it, and keep
// the last of repeats), at any depth, is refused with 400 naming the key,
// and changes nothing; a key no field has keeps its unknown-field error.
func TestAmbiguousKeysRefused(t *testing.T) {
	e, _ := resolveEnv(t, ResolveLimits{})
	e.seed()
	before := e.snapshot()
	cases := []struct{ method, path, body, want string }{
		{"PUT", "/api/v3/apps/shop", `{"auth":{"required":true},"auth":{"required":false}}`, `key "auth" appears twice`},
		{"PUT", "/api/v3/apps/shop", `{"auth":{"required":true},"Auth":{"required":false}}`, `keys "auth" and "Auth" differ only in case`},
		{"PUT", "/api/v3/apps/shop", `{"Auth":{"required":true}}`, `key "Auth" must be spelled "auth"`},
		{"PUT", "/api/v3/apps/shop", `{"auth":{"Required":true}}`, `key "Required" in auth must be spelled "required"`},
		{"PUT", "/api/v3/apps/shop", `{"auth":{"required":false,"required":true}}`, `key "required" appears twice in auth`},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"allow","path":"/"},{"action":"deny","path":"/a","PATH":"/b"}]}`, `keys "path" and "PATH" in policy[1] differ only in case`},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/h","path":"/x"}}`, `key "path" appears twice in health`},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"1s","WINDOW":"1h"}}`, `differ only in case`},
		// simple folding, as encoding/json matches: ſ (U+017F) is s
		{"PUT", "/api/v3/apps/shop", `{"\u017ftatus":"retired"}`, `must be spelled "status"`},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":["shop"],"public_\u212aey":"x"}`, `differ only in case`},
		{"PUT", "/api/v3/domains/shop.example.org", `{"app":"shop","App":"shop"}`, `keys "app" and "App" differ only in case`},
		{"POST", "/api/v3/domains/shop.example.org/verify", `{"Method":"manual"}`, `must be spelled "method"`},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"],"ttl":60,"ttl":5}`, `key "ttl" appears twice`},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.9"],"Values":["192.0.2.1"]}`, `differ only in case`},
		{"POST", "/api/v3/dns/resolve/batch", `[{"name":"a.apps.example.com"},{"name":"a.apps.example.com","Name":"b"}]`, `keys "name" and "Name" in [1] differ only in case`},
		{"PUT", "/api/v3/apps/shop", `{"colour":"red"}`, `unknown field "colour"`},
		{"PUT", "/api/v3/apps/shop", `{"mode":`, `invalid JSON body`},
		// a value of the wrong JSON type is named by its path, not its Go struct
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":"ten"}}`, `invalid JSON body: rate_limit.requests: want an integer, got a JSON string`},
		{"PUT", "/api/v3/apps/shop", `{"auth":{"required":"yes"}}`, `auth.required: want true or false, got a JSON string`},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":"shop"}`, `apps: want an array, got a JSON string`},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"],"ttl":"60"}`, `ttl: want an integer, got a JSON string`},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"soon"}}`, `duration "soon" is not one: write a number and a unit, such as "60s"`},
		// nesting far past any body's is left to the decoder, unwalked
		{"POST", "/api/v3/dns/resolve/batch", strings.Repeat("[", 1<<16), `invalid JSON body`},
		{"PUT", "/api/v3/apps/shop", strings.Repeat(`{"auth":`, 1<<15), `invalid JSON body`},
	}
	for _, c := range cases {
		p := problemOf(t, e.ok(c.method, c.path, c.body, 400))
		if !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s %s %.100s: detail %.200q, want %q", c.method, c.path, c.body, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("ambiguous bodies changed the store\nbefore %s\nafter  %s", before, after)
	}
	// the same keys, each once and as spelled, are fine
	e.ok("PUT", "/api/v3/apps/shop", `{"auth":{"required":true},"policy":[{"action":"deny","path":"/a"}],"health":{"path":"/h"}}`, 200)
}

// TestBodyErrorsNameWhatIsWrong: a body refused for its shape names the
// key at fault and the JSON it wants, in the API's words (DESIGN §11: a
// clear error naming what is wrong), never a Go type of the gateway's
// ("api.appBody") nor "want a number" for a number that is not a whole
// one.
func TestBodyErrorsNameWhatIsWrong(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	before := e.snapshot()
	cases := []struct{ method, path, body, want string }{
		{"PUT", "/api/v3/apps/shop", `"shop"`, `invalid JSON body: want an object, got a JSON string`},
		{"PUT", "/api/v3/apps/shop", `[]`, `invalid JSON body: want an object, got a JSON array`},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `5`, `invalid JSON body: want an object, got a JSON number`},
		{"POST", "/api/v3/dns/resolve/batch", `{"name":"a.apps.example.com"}`, `invalid JSON body: want an array, got a JSON object`},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":1.5}}`, `invalid JSON body: rate_limit.requests: want an integer, got a JSON number 1.5`},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":99999999999999999999}}`, `rate_limit.requests: want an integer, got a JSON number 99999999999999999999 (out of range)`},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"],"ttl":6e1}`, `ttl: want an integer, got a JSON number 6e1`},
		// an app has two durations: the error says which one is wrong
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"5"}}`, `invalid JSON body: rate_limit.window: duration "5" is not one`},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/h","interval":"5"}}`, `invalid JSON body: health.interval: duration "5" is not one`},
		// A number of seconds past a duration's range wrapped negative (or
		// saturated, by CPU): the error said the window was -2562047h.
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":1e10}}`, `invalid JSON body: rate_limit.window: duration 1e10 s is out of range`},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":-1e300}}`, `invalid JSON body: rate_limit.window: duration -1e300 s is out of range`},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/h","interval":9.3e9}}`, `invalid JSON body: health.interval: duration 9.3e9 s is out of range`},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/h","interval":true}}`, `invalid JSON body: health.interval: duration must be a string like "60s"`},
		// past float64 and past a time.Duration: out of range, not "not one"
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":1e400}}`, `invalid JSON body: rate_limit.window: duration 1e400 s is out of range`},
		{"PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"9999999999999h"}}`, `invalid JSON body: rate_limit.window: duration "9999999999999h" is out of range (at most 2562047h)`},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/h","interval":"1h99999999999999999999s"}}`, `health.interval: duration "1h99999999999999999999s" is out of range`},
		{"PUT", "/api/v3/apps/shop", `{"health":{"path":"/h","interval":"5 s"}}`, `health.interval: duration "5 s" is not one`},
		// an unknown key says where it is, and which keys are known there
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/a"},{"action":"deny","path":"/b","method":"GET"}]}`, `unknown field "method" in policy[1] (known: action, methods, path)`},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":[],"allow_origins":["https://a.example"]}}`, `unknown field "allow_origins" in cors (known: allow_credentials, allow_headers, origins)`},
		{"POST", "/api/v3/dns/resolve/batch", `[{"name":"a.apps.example.com","class":"IN"}]`, `unknown field "class" in [0] (known: name, type)`},
		// text after the value is not always a second value: say where it is
		{"PUT", "/api/v3/apps/shop", `{} x`, `invalid JSON body: more than one JSON value, or text after it (from byte 3: "x")`},
		{"PUT", "/api/v3/apps/shop", "{}\n]", `(from byte 3: "]")`},
		{"PUT", "/api/v3/apps/shop", `{"mode":"http"}{"mode":"passthrough"}`, `(from byte 15: "{\"mode\":\"passthr...")`},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":["shop"]}garbage`, `(from byte 77: "garbage")`},
	}
	for _, c := range cases {
		p := problemOf(t, e.ok(c.method, c.path, c.body, 400))
		if !strings.Contains(p.Detail, c.want) || strings.Contains(p.Detail, "Go value") {
			t.Errorf("%s %s %s: detail %q, want %q", c.method, c.path, c.body, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused bodies changed the store\nbefore %s\nafter  %s", before, after)
	}
	// the same fields, well formed, are fine
	e.ok("PUT", "/api/v3/apps/shop", `{"rate_limit":{"requests":10,"window":60},"health":{"path":"/h","interval":"5s"}}`, 200)
	e.ok("PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":null},"health":{"path":"/h"}}`, 200)
}

// TestNullDurationIsLeftOut: a field sent as null is one left out
// (rate_limit.window: null takes the default), and so is a health
// probe's interval, which was refused as the duration "".
func TestNullDurationIsLeftOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	left := e.ok("PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"10s"},"health":{"path":"/h"}}`, 200)
	null := e.ok("PUT", "/api/v3/apps/shop", `{"rate_limit":{"window":"10s"},"health":{"path":"/h","interval":null}}`, 200)
	if !bytes.Equal(null.body, left.body) {
		t.Errorf("health.interval: null stored %s, want it as left out: %s", null.body, left.body)
	}
}

// TestNullListElementRefused: encoding/json reads a null in a list as its
// element's zero value, so ["a",null] was checked as ["a",""] and refused
// for a value nobody sent ("values[1]: a TXT value holds 1 to 2048
// bytes, got 0", "policy[0].action: ... got \"\""). The refusal names the
// null, and nothing changes.
func TestNullListElementRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed()
	before := e.snapshot()
	for _, c := range []struct{ method, path, body, want string }{
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/a"},null]}`, `policy[1]: want an object, got a JSON null`},
		{"PUT", "/api/v3/apps/shop", `{"policy":[{"action":"deny","path":"/a","methods":["GET",null]}]}`, `policy[0].methods[1]: want a string, got a JSON null`},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":[null]}}`, `cors.origins[0]: want a string, got a JSON null`},
		{"PUT", "/api/v3/apps/shop", `{"cors":{"origins":[],"allow_headers":[null]}}`, `cors.allow_headers[0]: want a string, got a JSON null`},
		{"PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1",null]}`, `gateways[1]: want a string, got a JSON null`},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/TXT", `{"values":["a", null ]}`, `values[1]: want a string, got a JSON null`},
		{"PUT", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":[null]}`, `apps[0]: want a string, got a JSON null`},
	} {
		if p := problemOf(t, e.ok(c.method, c.path, c.body, 400)); !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s %s %s: detail %q, want %q", c.method, c.path, c.body, p.Detail, c.want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a null in a list changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// TestEveryWriteRefusesMalformedBodies sends every body-taking route each
// kind of malformed JSON: each answers 400 saying what is wrong, and the
// store is as it was.
func TestEveryWriteRefusesMalformedBodies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed()
	before := e.snapshot()
	routes := []struct {
		method, path string
		key, value   string // one member of a good body
		rest         string // the other members, each with a leading comma
		huge, hugeIs string // a member holding a number past any field's range, and what it is refused as
		list         string // a member that is a list of strings ("": none)
	}{
		{"PUT", "/api/v3/apps/shop", "mode", `"http"`, `,"status":"active"`, `"rate_limit":{"requests":1e999}`, "want an integer, got a JSON number 1e999", `"cors":{"origins":["https://a.example",null]}`},
		{"PUT", "/api/v3/domains/shop.example.org", "app", `"shop"`, ``, `"app":1e999`, "want a string, got a JSON number", ``},
		{"POST", "/api/v3/domains/shop.example.org/verify", "method", `"manual"`, ``, `"method":-1e999`, "want a string, got a JSON number", ``},
		{"PUT", "/api/v3/dns/zones/apps.example.com", "gateways", `["127.0.0.1"]`, `,"ttl":60`, `"gateways":["127.0.0.1"],"ttl":99999999999999999999`, "want an integer, got a JSON number 99999999999999999999 (out of range)", `"gateways":["127.0.0.1",null]`},
		{"PUT", "/api/v3/dns/zones/apps.example.com/records/www/A", "values", `["192.0.2.1"]`, `,"ttl":60`, `"values":["192.0.2.1"],"ttl":-1e999`, "want an integer, got a JSON number -1e999", `"values":[null]`},
		{"PUT", "/api/v3/hosts/keys/web-1", "apps", `["shop"]`, `,"public_key":"` + testKey + `"`, `"apps":["shop"],"public_key":1e999`, "want a string, got a JSON number", `"apps":[null],"public_key":"` + testKey + `"`},
	}
	for _, rt := range routes {
		member := `"` + rt.key + `":` + rt.value
		good := "{" + member + rt.rest + "}"
		cases := []struct{ name, body, want string }{
			{"unknown key", `{"colour":"red",` + member + rt.rest + "}", `unknown field "colour"`},
			{"key twice", "{" + member + "," + member + rt.rest + "}", `key "` + rt.key + `" appears twice`},
			{"key in two cases", "{" + member + rt.rest + `,"` + strings.ToUpper(rt.key) + `":` + rt.value + "}", `differ only in case`},
			{"text after", good + " x", `text after it (from byte ` + strconv.Itoa(len(good)+1) + `: "x")`},
			{"two values", good + good, `more than one JSON value`},
			{"not finished", good[:len(good)-1], `invalid JSON body`},
			{"wrong type", `{"` + rt.key + `":{}` + rt.rest + "}", rt.key + `: want `},
			{"huge number", "{" + rt.huge + "}", rt.hugeIs},
			{"null body", "null", `want an object, got a JSON null`},
			{"array body", "[" + good + "]", `want an object, got a JSON array`},
			{"not UTF-8", "{" + member + rt.rest + ",\"x\xff\":1}", `not valid UTF-8`},
		}
		if rt.list != "" {
			cases = append(cases, struct{ name, body, want string }{"null in a list", "{" + rt.list + "}", `got a JSON null`})
		}
		for _, c := range cases {
			r := e.do(rt.method, rt.path, token, c.body)
			if r.status != 400 {
				t.Errorf("%s %s, %s %s: status %d, want 400: %s", rt.method, rt.path, c.name, c.body, r.status, r.body)
				continue
			}
			if p := problemOf(t, r); !strings.Contains(p.Detail, c.want) {
				t.Errorf("%s %s, %s %s: detail %q, want %q", rt.method, rt.path, c.name, c.body, p.Detail, c.want)
			}
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("malformed bodies changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// TestListItemsAreTheirGets: every list, whole or paged, shows each item
// as its own GET answers it.
func TestListItemsAreTheirGets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed()
	e.ok("PUT", "/api/v3/apps/full", `{"status":"suspended","cors":{"origins":["https://a.example"],"allow_credentials":true,"allow_headers":["x-a"]},
	  "rate_limit":{"requests":5,"window":"10s"},"auth":{"required":true},"policy":[{"action":"deny","methods":["get"],"path":"/a/*"}],"health":{"path":"/h","interval":"5s"}}`, 200)
	e.ok("POST", "/api/v3/domains/shop.example.org/verify", `{"method":"manual"}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/@/TXT", `{"values":["a","b"],"ttl":30}`, 200)
	for _, l := range []struct {
		list, field string
		item        func(map[string]any) string
	}{
		{"/api/v3/apps", "apps", func(m map[string]any) string { return "/api/v3/apps/" + m["id"].(string) }},
		{"/api/v3/domains", "domains", func(m map[string]any) string { return "/api/v3/domains/" + m["domain"].(string) }},
		{"/api/v3/dns/zones", "zones", func(m map[string]any) string { return "/api/v3/dns/zones/" + m["name"].(string) }},
		{"/api/v3/dns/zones/apps.example.com/records", "records", func(m map[string]any) string {
			return "/api/v3/dns/zones/" + m["zone"].(string) + "/records/" + m["name"].(string) + "/" + m["type"].(string)
		}},
		{"/api/v3/hosts/keys", "keys", func(m map[string]any) string { return "/api/v3/hosts/keys/" + m["host_id"].(string) }},
	} {
		for _, q := range []string{"", "?limit=1"} {
			var page map[string]json.RawMessage
			var items []json.RawMessage
			decodeInto(t, e.ok("GET", l.list+q, nil, 200), &page)
			if err := json.Unmarshal(page[l.field], &items); err != nil || len(items) == 0 {
				t.Errorf("GET %s%s: no %s (%v)", l.list, q, l.field, err)
			}
			for _, raw := range items {
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				got := e.ok("GET", l.item(m), nil, 200)
				if !bytes.Equal(bytes.TrimSpace(got.body), raw) {
					t.Errorf("GET %s%s lists %s, but GET %s answers %s", l.list, q, raw, l.item(m), got.body)
				}
			}
		}
	}
}

// TestHostKeyNamesLiveApps: a host key may name only apps that exist, as
// a domain mapping may: a key naming an app not created yet would pass
// to whichever app is created under that id later (the hazard deleteApp's
// 409 guards against), and its host would serve that app. A DELETE of
// the app that lands between the PUT's check and its write makes the PUT
// back out, so no key names a deleted app.
func TestHostKeyNamesLiveApps(t *testing.T) {
	e, hs := newHookEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	before := e.snapshot()
	r := e.do("PUT", "/api/v3/hosts/keys/web-1", token, map[string]any{"public_key": testKey, "apps": []string{"shop", "ghost"}})
	if r.status != 400 || !strings.Contains(problemOf(t, r).Detail, `"ghost"`) {
		t.Fatalf("key naming a missing app: %d %s, want 400 naming ghost", r.status, r.body)
	}
	if after := e.snapshot(); after != before {
		t.Errorf("refused key changed the store\nbefore %s\nafter  %s", before, after)
	}

	// an earlier enrolment is put back when the PUT backs out
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"shop"}}, 200)
	var del resp
	doDel := func() { del = e.do("DELETE", "/api/v3/apps/blog", token, nil) }
	hs.beforePutHostKey.Store(&doDel)
	r = e.do("PUT", "/api/v3/hosts/keys/web-1", token, map[string]any{"public_key": testKey, "apps": []string{"shop", "blog"}})
	if r.status != 409 || del.status != 204 {
		t.Fatalf("PUT key %d, DELETE app %d; want 409 and 204: %s", r.status, del.status, r.body)
	}
	var k route.HostKey
	decodeInto(t, e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 200), &k)
	if !slices.Equal(k.Apps, []string{"shop"}) {
		t.Errorf("key after the PUT backed out: %+v, want the earlier enrolment for shop", k)
	}
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 200)
	hs.beforePutHostKey.Store(&doDel)
	// a first enrolment is taken back altogether
	if r := e.do("PUT", "/api/v3/hosts/keys/web-2", token, map[string]any{"public_key": testKey, "apps": []string{"blog"}}); r.status != 409 {
		t.Fatalf("PUT new key: %d, want 409: %s", r.status, r.body)
	}
	e.ok("GET", "/api/v3/hosts/keys/web-2", nil, 404)
}

// TestZoneRecreatedWithoutOldRecords: the records of a deleted zone never
// come back with a new zone of the same name, neither one written by a
// PUT that raced the zone's DELETE, nor one a DELETE failed to remove
// (the zone is gone by then, so the platform cannot retry the DELETE).
func TestZoneRecreatedWithoutOldRecords(t *testing.T) {
	e, hs := newHookEnv(t)
	const zone = "/api/v3/dns/zones/apps.example.com"
	recreate := func(t *testing.T) {
		t.Helper()
		e.ok("PUT", zone, `{"gateways":["127.0.0.1"]}`, 200)
		var l struct{ Records []route.Record }
		decodeInto(t, e.ok("GET", zone+"/records", nil, 200), &l)
		if len(l.Records) != 0 {
			t.Errorf("the new zone has the old zone's records: %+v", l.Records)
		}
		e.ok("DELETE", zone, nil, 204)
	}
	t.Run("PUT record raced the DELETE", func(t *testing.T) {
		e.ok("PUT", zone, `{"gateways":["127.0.0.1"]}`, 200)
		var del resp
		doDel := func() { del = e.do("DELETE", zone, token, nil) }
		hs.beforePutRecord.Store(&doDel)
		put := e.do("PUT", zone+"/records/old/A", token, `{"values":["192.0.2.66"]}`)
		if del.status != 204 || put.status != 409 {
			t.Errorf("DELETE zone %d, PUT record %d; want 204 and 409: %s", del.status, put.status, put.body)
		}
		recreate(t)
	})
	t.Run("DELETE failed on a record", func(t *testing.T) {
		e.ok("PUT", zone, `{"gateways":["127.0.0.1"]}`, 200)
		e.ok("PUT", zone+"/records/old/A", `{"values":["192.0.2.66"]}`, 200)
		hs.failDeleteRecords.Store(true)
		e.ok("DELETE", zone, nil, 500)
		recreate(t)
	})
}

// TestUnicodeNameNamesItsALabel: a name in Unicode is refused, as the
// store and every Host lookup use the ASCII form, and the answer says
// which form to send instead of claiming it is no DNS name at all.
func TestUnicodeNameNamesItsALabel(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	for _, c := range []struct{ path, body string }{
		{"/api/v3/domains/bücher.example.net", `{"app":"shop"}`},
		{"/api/v3/dns/zones/bücher.example.net", `{"gateways":["127.0.0.1"]}`},
	} {
		p := problemOf(t, e.ok("PUT", c.path, c.body, 400))
		if !strings.Contains(p.Detail, `"xn--bcher-kva.example.net"`) {
			t.Errorf("PUT %s: detail %q does not name the ASCII form", c.path, p.Detail)
		}
	}
}

// smallOrderTestY are the y coordinates (little endian, x's sign bit
// clear) of Ed25519's points of order 1, 2, 4 and 8, and the other
// spellings (y+p) of y = 0 and y = 1.
var smallOrderTestY = []string{
	"0000000000000000000000000000000000000000000000000000000000000000",
	"0100000000000000000000000000000000000000000000000000000000000000",
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
}

// TestWeakHostKeyRefused: a public key of small order is refused at
// enrolment. crypto/ed25519 verifies signatures under such a key that
// anyone can make without a private key (R the identity, S zero: the
// check holds whenever the challenge hash is a multiple of the key's
// order), so a host id enrolled with one — an all-zero buffer a careless
// integration sent — could be claimed by anyone on the bus.
func TestWeakHostKeyRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	forged := make([]byte, ed25519.SignatureSize)
	forged[0] = 1 // R = the identity, S = 0
	for _, y := range smallOrderTestY {
		for _, sign := range []byte{0, 0x80} {
			key, err := hex.DecodeString(y)
			if err != nil {
				t.Fatal(err)
			}
			key[31] |= sign
			if sign == 0 {
				// the premise: this key takes a signature nobody made
				n := 0
				for i := range 200 {
					if ed25519.Verify(key, fmt.Appendf(nil, "challenge %d", i), forged) {
						n++
					}
				}
				if n == 0 {
					t.Fatalf("key %x: no forged signature verifies; not a weak key", key)
				}
			}
			b64 := base64.StdEncoding.EncodeToString(key)
			r := e.do("PUT", "/api/v3/hosts/keys/web-1", token, map[string]any{"public_key": b64, "apps": []string{"shop"}})
			if r.status != 400 {
				t.Errorf("weak key %s: status %d, want 400: %s", b64, r.status, r.body)
				continue
			}
			problemOf(t, r)
		}
	}
	e.ok("GET", "/api/v3/hosts/keys/web-1", nil, 404)
	e.ok("PUT", "/api/v3/hosts/keys/web-1", map[string]any{"public_key": testKey, "apps": []string{"shop"}}, 200)
}

// TestEscapedPairsKept: a character escaped as a UTF-16 surrogate pair,
// and a backslash before a u, are taken as written.
func TestEscapedPairsKept(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["127.0.0.1"]}`, 200)
	var rec route.Record
	decodeInto(t, e.ok("PUT", "/api/v3/dns/zones/apps.example.com/records/www/TXT", `{"values":["\ud83d\ude00","\\ud800","\"\\u"]}`, 200), &rec)
	if want := []string{"\U0001F600", `\ud800`, `"\u`}; !slices.Equal(rec.Values, want) {
		t.Errorf("values %q, want %q", rec.Values, want)
	}
}

// TestVerifyWriteIsConditional: the verify's write of the mapping it read
// is conditional on that read. A move to another app landing between the
// read and the write, here through the store as another gateway's PUT
// would, stands: the verify answers 409, and the old app's mapping is
// not written back verified over the new one.
func TestVerifyWriteIsConditional(t *testing.T) {
	e, hs := newHookEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", nil, 200)
	e.ok("PUT", "/api/v3/apps/blog", nil, 200)
	const dom = "/api/v3/domains/shop.example.org"
	e.ok("PUT", dom, `{"app":"shop"}`, 200)
	move := func() {
		if err := hs.Store.PutDomain(context.Background(), &route.Domain{Domain: "shop.example.org", App: "blog", Token: "moved-token-0123456789"}); err != nil {
			t.Error(err)
		}
	}
	hs.inUpdateDomain.Store(&move)
	if r := e.do("POST", dom+"/verify", token, `{"method":"manual"}`); r.status != http.StatusConflict {
		t.Errorf("verify racing a move: %d, want 409: %s", r.status, r.body)
	}
	got := e.do("GET", dom, token, nil)
	if !strings.Contains(string(got.body), `"app":"blog"`) || !strings.Contains(string(got.body), `"verified":false`) {
		t.Errorf("the move was overwritten by the verify: %s", got.body)
	}
}

// TestZoneNameLeavesRoomForItsNames: the DNS server names hostmaster.{zone}
// in the zone's SOA and ns.{zone} in its NS, and the gateway proves
// *.{zone} at _acme-challenge.{zone} (DESIGN §9): a zone name too long for
// those to be DNS names (253 characters at most) would have its SOA, its
// NS and every NODATA answer go out with a name past 255 octets, a
// message resolvers cannot read, and its certificate never issued. Such a
// zone is refused, naming the bound, and nothing is written; the longest
// that fits is served.
func TestZoneNameLeavesRoomForItsNames(t *testing.T) {
	e := newEnv(t, nil)
	// name returns a zone name of n characters: labels of 63 and the rest.
	name := func(n int) string {
		var labels []string
		for n > 0 {
			l := min(n, 63)
			if n-l == 1 { // a label of 0 after the dot: shorten this one
				l--
			}
			labels = append(labels, strings.Repeat(string(rune('a'+len(labels))), l))
			n -= l + 1
		}
		return strings.Join(labels, ".")
	}
	gw := `{"gateways":["192.0.2.1"]}`
	before := e.snapshot()
	for _, n := range []int{238, 242, 250, 253} {
		z := name(n)
		if len(z) != n {
			t.Fatalf("name(%d) has %d characters", n, len(z))
		}
		p := problemOf(t, e.ok("PUT", "/api/v3/dns/zones/"+z, gw, 400))
		if !strings.Contains(p.Detail, "237") {
			t.Errorf("zone of %d characters: detail %q does not give the bound", n, p.Detail)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused zone changed the store\nbefore %s\nafter  %s", before, after)
	}
	e.ok("PUT", "/api/v3/dns/zones/"+name(237), gw, 200)
	// one stored before the bound can still be read and deleted
	long := name(250)
	if err := e.st.PutZone(context.Background(), &route.Zone{Name: long, Gateways: []string{"192.0.2.1"}, TTL: 60}); err != nil {
		t.Fatal(err)
	}
	e.ok("GET", "/api/v3/dns/zones/"+long, nil, 200)
	e.ok("DELETE", "/api/v3/dns/zones/"+long, nil, 204)
}

// TestAnswersNotStored: no answer of the API may be kept by a cache, the
// browser's disk cache included: a control answer is what the platform
// credential got (apps, hosts, keys), and a refusal or a public route's
// answer is no more worth keeping. nginx and Envoy front-ends of such
// APIs say so with Cache-Control: no-store.
func TestAnswersNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) {
		o.Clusters = func() any { return map[string]any{"self": "eu-1"} }
	})
	e.seed()
	for _, c := range []struct {
		method, path, tok string
		want              int
	}{
		{"GET", "/api/v3/apps", token, 200},
		{"GET", "/api/v3/apps/shop", token, 200},
		{"GET", "/api/v3/hosts", token, 200},
		{"GET", "/api/v3/apps/nope", token, 404},
		{"GET", "/api/v3/apps", "wrong", 401},
		{"GET", "/api/v3/discovery/clusters", "", 200},
	} {
		r := e.do(c.method, c.path, c.tok, nil)
		if r.status != c.want || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: %d Cache-Control %q, want %d no-store", c.method, c.path, r.status, r.header.Get("Cache-Control"), c.want)
		}
	}
}

// TestAllowHeadersBounded: an allowed preflight names an app's whole
// cors.allow_headers back in Access-Control-Allow-Headers (internal/cors),
// so a list of tens of thousands was stored and then answered every
// preflight with a field of hundreds of KB, which curl (100 KB) and
// browsers refuse: every preflight failed. The list is bounded as origins
// are, the refusal names the field, and nothing changes.
func TestAllowHeadersBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.seed()
	headers := func(n int) string {
		hs := make([]string, n)
		for i := range hs {
			hs[i] = fmt.Sprintf(`"X-Header-%d"`, i)
		}
		return `{"cors":{"origins":["https://a.example"],"allow_headers":[` + strings.Join(hs, ",") + `]}}`
	}
	before := e.snapshot()
	for _, n := range []int{maxAllowHeaders + 1, 40000} {
		p := problemOf(t, e.ok("PUT", "/api/v3/apps/shop", headers(n), 400))
		if want := fmt.Sprintf("cors.allow_headers: at most %d header names", maxAllowHeaders); !strings.Contains(p.Detail, want) {
			t.Errorf("%d allow_headers: detail %q, want it to say %q", n, p.Detail, want)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused allow_headers changed the store\nbefore %s\nafter  %s", before, after)
	}
	e.ok("PUT", "/api/v3/apps/shop", headers(maxAllowHeaders), 200)
}
