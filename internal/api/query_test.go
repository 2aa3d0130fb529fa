package api

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestUnknownQueryFieldRefused: a query field a route does not take
// answers 400 naming it, and changes nothing, on every route: a list's
// ?Limit=10 (a typo for limit) answered the whole list, and a PUT's
// ?dryRun=1 wrote. A field that differs from one the route takes only in
// case is named with that one. The queries the dashboard and gatehouse
// ctl send are taken.
func TestUnknownQueryFieldRefused(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Clusters = func() any { return map[string]any{"self": "c1"} } })
	e.seed()
	before := e.snapshot()
	for _, c := range []struct {
		method, path string
		body         any
		field, hint  string // named in the detail; hint: the field meant
	}{
		{"GET", "/api/v3/apps?Limit=10", nil, "Limit", "limit"},
		{"GET", "/api/v3/apps?limit=10&After=shop", nil, "After", "after"},
		{"GET", "/api/v3/apps?limits=10", nil, "limits", ""},
		{"GET", "/api/v3/apps?page=2", nil, "page", ""},
		{"GET", "/api/v3/apps?limit=10&x", nil, "x", ""},
		{"GET", "/api/v3/domains?offset=5", nil, "offset", ""},
		{"GET", "/api/v3/dns/zones?LIMIT=1", nil, "LIMIT", "limit"},
		{"GET", "/api/v3/dns/zones/apps.example.com/records?type=A", nil, "type", ""},
		{"GET", "/api/v3/hosts/keys?app=shop", nil, "app", ""},
		{"GET", "/api/v3/hosts?state=up", nil, "state", ""},
		{"GET", "/api/v3/apps/shop?fields=id", nil, "fields", ""},
		{"HEAD", "/api/v3/apps/shop?fields=id", nil, "", ""},
		{"PUT", "/api/v3/apps/shop?dryRun=1", map[string]any{"status": "suspended"}, "dryRun", ""},
		{"PUT", "/api/v3/apps/shop?limit=1", map[string]any{"status": "suspended"}, "limit", ""},
		{"DELETE", "/api/v3/hosts/keys/web-1?force=true", nil, "force", ""},
		{"GET", "/api/v3/domains/shop.example.org?x=1", nil, "x", ""},
		{"PUT", "/api/v3/domains/shop.example.org?app=other", map[string]any{"app": "shop"}, "app", ""},
		{"DELETE", "/api/v3/domains/shop.example.org?cascade=1", nil, "cascade", ""},
		{"POST", "/api/v3/domains/shop.example.org/verify?method=manual", map[string]any{"method": "manual"}, "method", ""},
		{"PUT", "/api/v3/dns/zones/apps.example.com?ttl=5", map[string]any{"gateways": []string{"127.0.0.2"}}, "ttl", ""},
		{"DELETE", "/api/v3/dns/zones/apps.example.com/records/www/A?x=", nil, "x", ""},
		{"GET", "/api/v3/apps/shop?__=1", nil, "__", ""},
		{"GET", "/api/v3/apps?_x=1", nil, "_x", ""},
	} {
		r := e.do(c.method, c.path, token, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s: %d, want 400: %s", c.method, c.path, r.status, r.body)
			continue
		}
		if c.method == "HEAD" {
			continue // no body to name it in
		}
		d := problemOf(t, r).Detail
		if !strings.Contains(d, strconv.Quote(c.field)) {
			t.Errorf("%s %s: detail %q does not name %q", c.method, c.path, d, c.field)
		}
		if c.hint != "" && !strings.Contains(d, strconv.Quote(c.hint)) {
			t.Errorf("%s %s: detail %q does not name %q, the field meant", c.method, c.path, d, c.hint)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a refused query changed the store\nbefore %s\nafter  %s", before, after)
	}
	// what the dashboard and gatehouse ctl send, and an empty query
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v3/apps?limit=100"},
		{"GET", "/api/v3/apps?limit=100&after=a"},
		{"GET", "/api/v3/apps?after=a"},
		{"GET", "/api/v3/hosts?limit=100"},
		{"GET", "/api/v3/dns/zones/apps.example.com/records?after=www%2FA&limit=5"},
		{"GET", "/api/v3/apps?"},
		{"GET", "/api/v3/apps/shop?"},
		{"GET", "/api/v3/apps/shop"},
		{"GET", "/api/v3/discovery/clusters"},
	} {
		if r := e.do(c.method, c.path, token, nil); r.status != 200 {
			t.Errorf("%s %s: %d, want 200: %s", c.method, c.path, r.status, r.body)
		}
	}
	// the credential is still asked for first
	if r := e.do("GET", "/api/v3/apps?Limit=10", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("GET /api/v3/apps?Limit=10 without a credential: %d, want 401", r.status)
	}
}

// TestResolveUnknownQueryFieldRefused: a resolve query with a field other
// than name and type answers 400 naming it and charges nothing, rather
// than answering another question than the one asked (?Type=TXT was
// answered for A); the batch route takes no query field.
func TestResolveUnknownQueryFieldRefused(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	for _, c := range []struct {
		method, path string
		body         any
		field, hint  string
	}{
		{"GET", "/api/v3/dns/resolve?name=a.apps.example.com&Type=TXT", nil, "Type", "type"},
		{"GET", "/api/v3/dns/resolve?name=a.apps.example.com&qtype=TXT", nil, "qtype", ""},
		{"GET", "/api/v3/dns/resolve?name=a.apps.example.com&DO=1", nil, "DO", "do"},
		{"GET", "/api/v3/dns/resolve?name=a.apps.example.com&do=yes", nil, "do", ""},
		{"GET", "/api/v3/dns/resolve?name=a.apps.example.com&ct=text/html", nil, "ct", ""},
		{"POST", "/api/v3/dns/resolve/batch?type=TXT", `[{"name":"a.apps.example.com"}]`, "type", ""},
	} {
		r := e.do(c.method, c.path, alice, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s: %d, want 400: %s", c.method, c.path, r.status, r.body)
			continue
		}
		d := problemOf(t, r).Detail
		if !strings.Contains(d, strconv.Quote(c.field)) || c.hint != "" && !strings.Contains(d, strconv.Quote(c.hint)) {
			t.Errorf("%s %s: detail %q, want it to name %q (and %q)", c.method, c.path, d, c.field, c.hint)
		}
	}
	if r := e.do("HEAD", "/api/v3/dns/resolve?name=a.apps.example.com&Type=TXT", alice, nil); r.status != http.StatusBadRequest {
		t.Errorf("HEAD with Type: %d, want 400", r.status)
	}
	r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=TXT", alice, nil)
	if r.status != 200 || r.header.Get("X-RateLimit-Identity-Remaining") != "299" {
		t.Errorf("after the refused queries: %d, identity remaining %q, want 200 and 299 (nothing charged)", r.status, r.header.Get("X-RateLimit-Identity-Remaining"))
	}
}

// TestResolveTypeNumberInPlainDecimal: a type given as a number is taken
// in plain decimal only, on the query and in a batch: 028 was read as 28
// (AAAA), and is 23 (NIMLOC) to a client that reads it as octal.
func TestResolveTypeNumberInPlainDecimal(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	for _, typ := range []string{"028", "0028", "01", "00"} {
		r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type="+typ, alice, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(problemOf(t, r).Detail, "type") {
			t.Errorf("GET type=%s: %d %s, want 400 naming type", typ, r.status, r.body)
		}
		r = e.do("POST", "/api/v3/dns/resolve/batch", alice, `[{"name":"a.apps.example.com","type":"`+typ+`"}]`)
		if r.status != http.StatusBadRequest || !strings.Contains(problemOf(t, r).Detail, "type") {
			t.Errorf("batch type %s: %d %s, want 400 naming type", typ, r.status, r.body)
		}
	}
	r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=28", alice, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"Question":[{"name":"a.apps.example.com.","type":28}]`) {
		t.Errorf("type=28: %d %s, want 200 for AAAA", r.status, r.body)
	}
	if got := r.header.Get("X-RateLimit-Identity-Remaining"); got != "299" {
		t.Errorf("after the refused queries: identity remaining %q, want 299 (nothing charged)", got)
	}
}

// TestResolveTakesDoHJSONFields: the optional fields a DNS-over-HTTPS JSON
// client sends beside name and type (Google's and Cloudflare's JSON API)
// are taken and change nothing, so that such a client works unchanged;
// each is charged as the plain query is. A ct is a media type, whose case
// is not significant, as cd's and do's values' is not.
func TestResolveTakesDoHJSONFields(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	plain := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=A", alice, nil)
	if plain.status != 200 {
		t.Fatalf("plain query: %d: %s", plain.status, plain.body)
	}
	for i, extra := range []string{
		"cd=0", "do=1", "cd=false&do=true", "ct=application/dns-json", "ct=application/x-javascript",
		"ct=Application/DNS-JSON", // a media type's case is not significant (RFC 9110 §8.3.1)
		"edns_client_subnet=0.0.0.0/0", "random_padding=XXXXXXXXXXXXXXXX",
	} {
		r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=A&"+extra, alice, nil)
		if r.status != 200 || string(r.body) != string(plain.body) {
			t.Errorf("with %s: %d %s, want 200 and the plain query's answer %s", extra, r.status, r.body, plain.body)
		}
		if want := strconv.Itoa(298 - i); r.header.Get("X-RateLimit-Identity-Remaining") != want {
			t.Errorf("with %s: identity remaining %q, want %s (one unit, as the plain query)", extra, r.header.Get("X-RateLimit-Identity-Remaining"), want)
		}
	}
}

// TestCacheBusterTaken: a GET or HEAD of any route takes the query field
// _ that jQuery's cache: false and many dashboards add to defeat caches,
// whatever its value, and answers as without it: it asks for nothing,
// and refusing it made the clusters route unreachable from them. A write
// still refuses it (a client adds it to GETs only, so on a write it is
// some other tool's field), as it does __ or _x on a GET.
func TestCacheBusterTaken(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Clusters = func() any { return map[string]any{"self": "c1"} } })
	e.seed()
	for _, c := range []struct{ plain, busted string }{
		{"/api/v3/discovery/clusters", "/api/v3/discovery/clusters?_=1700000000000"},
		{"/api/v3/apps", "/api/v3/apps?_=1700000000000"},
		{"/api/v3/apps?limit=1", "/api/v3/apps?limit=1&_=x7"},
		{"/api/v3/apps?after=a", "/api/v3/apps?_=&after=a"},
		{"/api/v3/apps/shop", "/api/v3/apps/shop?_=1"},
		{"/api/v3/domains/shop.example.org", "/api/v3/domains/shop.example.org?_=1&_=2"},
		{"/api/v3/dns/zones/apps.example.com/records/www/A", "/api/v3/dns/zones/apps.example.com/records/www/A?_=1"},
		{"/api/v3/hosts", "/api/v3/hosts?_=1"},
	} {
		want := e.do("GET", c.plain, token, nil)
		for _, method := range []string{"GET", "HEAD"} {
			r := e.do(method, c.busted, token, nil)
			if r.status != want.status || method == "GET" && string(r.body) != string(want.body) {
				t.Errorf("%s %s: %d %s, want %d %s as without _", method, c.busted, r.status, r.body, want.status, want.body)
			}
		}
	}
	before := e.snapshot()
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v3/apps/shop?_=1", `{"status":"suspended"}`},
		{"DELETE", "/api/v3/hosts/keys/web-1?_=1", ""},
		{"POST", "/api/v3/domains/shop.example.org/verify?_=1", `{"method":"manual"}`},
	} {
		r := e.doIf(c.method, c.path, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(problemOf(t, r).Detail, `"_"`) {
			t.Errorf("%s %s: %d %s, want 400 naming _", c.method, c.path, r.status, r.body)
		}
	}
	if after := e.snapshot(); after != before {
		t.Errorf("a write with _ changed the store\nbefore %s\nafter  %s", before, after)
	}
}

// TestResolveTakesCacheBuster: GET /api/v3/dns/resolve takes _ as every
// GET does, answering and charging as without it; the batch, a POST,
// does not.
func TestResolveTakesCacheBuster(t *testing.T) {
	e, sign := resolveEnv(t, ResolveLimits{})
	alice := sign("alice")
	plain := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=A", alice, nil)
	r := e.do("GET", "/api/v3/dns/resolve?name=a.apps.example.com&type=A&_=1700000000000", alice, nil)
	if r.status != 200 || string(r.body) != string(plain.body) || r.header.Get("X-RateLimit-Identity-Remaining") != "298" {
		t.Errorf("with _: %d %s (identity remaining %s), want 200, %s, 298", r.status, r.body, r.header.Get("X-RateLimit-Identity-Remaining"), plain.body)
	}
	r = e.do("POST", "/api/v3/dns/resolve/batch?_=1", alice, `[{"name":"a.apps.example.com"}]`)
	if r.status != http.StatusBadRequest {
		t.Errorf("batch with _: %d %s, want 400", r.status, r.body)
	}
}
