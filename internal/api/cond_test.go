package api

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// doIf is e.do with the platform's token, a body unless it is "", and
// the fields in hdr (pairs of name and value).
func (e *env) doIf(method, path, body string, hdr ...string) resp {
	e.t.Helper()
	var b any
	if body != "" {
		b = body
	}
	return e.do(method, path, token, b, hdr...)
}

// okIf is doIf failing unless the answer is want.
func (e *env) okIf(want int, method, path, body string, hdr ...string) resp {
	e.t.Helper()
	r := e.doIf(method, path, body, hdr...)
	if r.status != want {
		e.t.Fatalf("%s %s %q: status %d, want %d: %s", method, path, hdr, r.status, want, r.body)
	}
	return r
}

var etagRE = regexp.MustCompile(`^"[0-9a-f]{32}"$`)

// tagOf is r's ETag, failing the test unless it is one of gatehouse's.
func tagOf(t *testing.T, r resp) string {
	t.Helper()
	tag := r.header.Get("ETag")
	if !etagRE.MatchString(tag) {
		t.Fatalf("ETag %q, want a quoted 32-digit hex digest", tag)
	}
	return tag
}

// item is one kind of control item: where it lives, a body, and another
// body that changes it.
type item struct {
	name, path, body, changed string
}

// items sets up what each kind needs beside it (apps shop and blog, zone
// apps.example.com) and returns one of each kind, not yet created.
func items(e *env) []item {
	e.ok("PUT", "/api/v3/apps/shop", `{}`, 200)
	e.ok("PUT", "/api/v3/apps/blog", `{}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	return []item{
		{"app", "/api/v3/apps/web", `{}`, `{"status":"suspended"}`},
		{"domain", "/api/v3/domains/www.customer.example", `{"app":"shop"}`, `{"app":"blog"}`},
		{"zone", "/api/v3/dns/zones/other.example.com", `{"gateways":["192.0.2.1"]}`, `{"gateways":["192.0.2.2"]}`},
		{"record", "/api/v3/dns/zones/apps.example.com/records/www/A", `{"values":["192.0.2.7"]}`, `{"values":["192.0.2.8"]}`},
		{"host key", "/api/v3/hosts/keys/web-1", `{"public_key":"` + testKey + `","apps":["shop"]}`, `{"public_key":"` + testKey + `","apps":["shop","blog"]}`},
	}
}

// Every item is answered with an ETag: the same on its PUT and on a GET
// of it, on every gateway alike (a digest of the stored item, not of a
// gateway's state), and another once it changes. A GET with the tag in
// If-None-Match answers 304 without a body.
func TestETags(t *testing.T) {
	e := newEnv(t, nil)
	for _, it := range items(e) {
		t.Run(it.name, func(t *testing.T) {
			e.t = t
			put := tagOf(t, e.okIf(200, "PUT", it.path, it.body))
			get := e.okIf(200, "GET", it.path, "")
			if tag := tagOf(t, get); tag != put {
				t.Fatalf("GET's ETag %s, PUT's %s", tag, put)
			}
			if again := tagOf(t, e.okIf(200, "PUT", it.path, it.body)); again != put {
				t.Errorf("the same PUT again: ETag %s, first %s", again, put)
			}
			r := e.okIf(304, "GET", it.path, "", "If-None-Match", put)
			if len(r.body) != 0 || r.header.Get("ETag") != put {
				t.Errorf("304: ETag %q, body %q", r.header.Get("ETag"), r.body)
			}
			e.okIf(304, "GET", it.path, "", "If-None-Match", `"x", W/`+put) // weak comparison
			e.okIf(304, "GET", it.path, "", "If-None-Match", `*`)
			e.okIf(200, "GET", it.path, "", "If-None-Match", `"0123"`)
			e.okIf(200, "GET", it.path, "", "If-Match", put)
			e.okIf(412, "GET", it.path, "", "If-Match", `"0123"`)

			changed := tagOf(t, e.okIf(200, "PUT", it.path, it.changed))
			if changed == put {
				t.Fatalf("changed, the ETag stayed %s", put)
			}
			e.okIf(200, "GET", it.path, "", "If-None-Match", put)
		})
	}
	e.t = t
	// Lists carry none: they are not items a write can be made on.
	if tag := e.ok("GET", "/api/v3/apps", nil, 200).header.Get("ETag"); tag != "" {
		t.Errorf("a list's ETag %q", tag)
	}
}

// A PUT or DELETE made on an item as it was read (If-Match with its
// ETag) answers 412 once another writer has changed it, and writes
// nothing; with the current tag it goes through. If-None-Match: * makes
// a PUT create only, If-Match: * replace only.
func TestConditionalWrites(t *testing.T) {
	e := newEnv(t, nil)
	for _, it := range items(e) {
		t.Run(it.name, func(t *testing.T) {
			e.t = t
			before := e.snapshot()
			e.okIf(412, "PUT", it.path, it.body, "If-Match", "*")
			e.okIf(412, "PUT", it.path, it.body, "If-Match", `"00000000000000000000000000000000"`)
			e.okIf(404, "DELETE", it.path, "", "If-Match", "*")
			if now := e.snapshot(); now != before {
				t.Fatalf("a refused write changed the store:\n%s\nwas\n%s", now, before)
			}
			read := tagOf(t, e.okIf(200, "PUT", it.path, it.body, "If-None-Match", "*"))
			e.okIf(200, "PUT", it.path, it.changed) // another writer
			before = e.snapshot()
			r := e.okIf(412, "PUT", it.path, it.body, "If-Match", read)
			if !strings.Contains(string(r.body), "has changed since it was read") {
				t.Errorf("412's problem: %s", r.body)
			}
			e.okIf(412, "DELETE", it.path, "", "If-Match", read)
			e.okIf(412, "PUT", it.path, it.body, "If-None-Match", "*")
			e.okIf(412, "PUT", it.path, it.body, "If-Match", "W/"+read) // If-Match compares strongly
			if now := e.snapshot(); now != before {
				t.Fatalf("a refused write changed the store:\n%s\nwas\n%s", now, before)
			}
			cur := tagOf(t, e.okIf(200, "GET", it.path, ""))
			e.okIf(412, "DELETE", it.path, "", "If-Match", "W/"+cur)
			next := tagOf(t, e.okIf(200, "PUT", it.path, it.body, "If-Match", `"0123", `+cur))
			e.okIf(204, "DELETE", it.path, "", "If-Match", next)
			e.okIf(404, "GET", it.path, "")
		})
	}
}

// A field that does not parse is refused, before anything is written:
// ignoring it would make a conditional write unconditional. Without the
// platform's credential it is 401 like everything else.
func TestConditionFieldsThatDoNotParse(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", `{}`, 200)
	before := e.snapshot()
	for _, v := range []string{`abc`, `"unterminated`, `W/`, `"a" "b"`, `*, "a"`, `"a b"`, `,`, ``} {
		for _, f := range []string{"If-Match", "If-None-Match"} {
			r := e.okIf(400, "PUT", "/api/v3/apps/shop", `{"status":"suspended"}`, f, v)
			if !strings.Contains(string(r.body), f) {
				t.Errorf("%s: %q: problem %s", f, v, r.body)
			}
			e.okIf(400, "DELETE", "/api/v3/apps/shop", "", f, v)
			e.okIf(400, "GET", "/api/v3/apps", "", f, v)
		}
	}
	if now := e.snapshot(); now != before {
		t.Fatalf("the store changed:\n%s\nwas\n%s", now, before)
	}
	req, _ := http.NewRequest("DELETE", e.srv.URL+"/api/v3/apps/shop", nil)
	req.Header.Set("If-Match", "abc")
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("without a credential: %d, want 401", res.StatusCode)
	}
	if r := e.okIf(400, "PUT", "/api/v3/apps/shop", `{}`, "If-Match", `"not"valid"`); !strings.Contains(string(r.body), `If-Match: \"not\" is followed by \"valid\\\"\"`) {
		t.Errorf("a tag run into the next: %s", r.body)
	}
	if r := e.okIf(412, "GET", "/api/v3/apps/shop", "", "If-Match", `"0123"`); !strings.Contains(string(r.body), `has another ETag`) {
		t.Errorf("a GET's 412: %s", r.body)
	}
	// A list may start with empty elements, and a field may repeat.
	tag := tagOf(t, e.okIf(200, "GET", "/api/v3/apps/shop", ""))
	e.okIf(200, "PUT", "/api/v3/apps/shop", `{}`, "If-Match", `, "0123"`, "If-Match", tag)
}

// The check and the write are one step: a change that lands between the
// conditional write's read and its write (put there by a hook inside the
// store's update) makes the write answer 412, not overwrite it.
func TestConditionalWriteRacesAnother(t *testing.T) {
	e, hs := newHookEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", `{}`, 200)
	e.ok("PUT", "/api/v3/apps/blog", `{}`, 200)
	cases := []struct {
		name, path, body string
		hook             *atomic.Pointer[func()]
		other            func()
		want             string // in the GET after
	}{
		{"app", "/api/v3/apps/shop", `{"status":"retired"}`, &hs.inUpdateApp,
			func() { e.ok("PUT", "/api/v3/apps/shop", `{"status":"suspended"}`, 200) }, `"suspended"`},
		{"domain", "/api/v3/domains/www.customer.example", `{"app":"blog"}`, &hs.inUpdateDomain,
			func() { e.ok("POST", "/api/v3/domains/www.customer.example/verify", `{"method":"manual"}`, 200) }, `"verified":true`},
	}
	e.ok("PUT", "/api/v3/domains/www.customer.example", `{"app":"shop"}`, 200)
	for _, c := range cases {
		tag := tagOf(t, e.okIf(200, "GET", c.path, ""))
		ran := false
		f := func() { ran = true; c.other() }
		c.hook.Store(&f)
		e.okIf(412, "PUT", c.path, c.body, "If-Match", tag)
		if !ran {
			t.Fatalf("%s: the conditional PUT did not write through the store's update", c.name)
		}
		if got := e.okIf(200, "GET", c.path, ""); !strings.Contains(string(got.body), c.want) {
			t.Errorf("%s: after the race the store holds %s, want the other writer's %s", c.name, got.body, c.want)
		}
	}
}

// Writers that read one ETag and write at once: exactly one goes
// through, whatever the interleaving.
func TestConditionalWritersOneWins(t *testing.T) {
	e := newEnv(t, nil)
	e.ok("PUT", "/api/v3/apps/shop", `{}`, 200)
	tag := tagOf(t, e.okIf(200, "GET", "/api/v3/apps/shop", ""))
	const writers = 8
	codes := make(chan int, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			body := `{"rate_limit":{"requests":` + string(rune('1'+i)) + `}}`
			codes <- e.doIf("PUT", "/api/v3/apps/shop", body, "If-Match", tag).status
		})
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 1 || n[412] != writers-1 {
		t.Fatalf("answers %v, want one 200 and %d 412s", n, writers-1)
	}
}

// An item whose stored value does not read has no ETag: a conditional
// write on it answers 412 saying so and leaves it, where an
// unconditional one replaces it (DESIGN §7).
func TestConditionOnUnreadableItem(t *testing.T) {
	e, js, st := newBusEnv(t)
	e.ok("PUT", "/api/v3/apps/shop", `{}`, 200)
	e.ok("PUT", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`, 200)
	for _, b := range []struct{ bucket, key, path, body string }{
		{"gatehouse_apps", "shop", "/api/v3/apps/shop", `{}`},
		{"gatehouse_zones", "apps.example.com", "/api/v3/dns/zones/apps.example.com", `{"gateways":["192.0.2.1"]}`},
	} {
		kv, err := js.KeyValue(t.Context(), b.bucket)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.Keys(t.Context())
		if err != nil || len(keys) != 1 {
			t.Fatalf("%s keys %v, %v", b.bucket, keys, err)
		}
		if _, err := kv.Put(t.Context(), keys[0], []byte(`{"id":`)); err != nil {
			t.Fatal(err)
		}
		for _, h := range [][]string{{"If-Match", "*"}, {"If-Match", `"0123"`}, {"If-None-Match", "*"}} {
			r := e.okIf(412, "PUT", b.path, b.body, h...)
			if !strings.Contains(string(r.body), "does not read") {
				t.Errorf("%s %v: %s", b.path, h, r.body)
			}
			e.okIf(412, "DELETE", b.path, "", h...)
		}
		if e, err := kv.Get(context.Background(), keys[0]); err != nil || string(e.Value()) != `{"id":` {
			t.Fatalf("%s: the unreadable value was touched: %v", b.path, err)
		}
		e.ok("PUT", b.path, b.body, 200)
	}
	if _, err := st.GetApp(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
}

// If-Match compares strongly, so the item's own tag sent weak (W/, as a
// compressing proxy between may rewrite it) never matches. The 412 said
// the item "has changed since it was read; GET it again", which it had
// not, and a GET through the same proxy gets the same weak tag: it now
// says what is wrong, on a write and on a GET alike, and writes nothing.
func TestWeakTagInIfMatchSaysSo(t *testing.T) {
	e := newEnv(t, nil)
	for _, it := range items(e) {
		t.Run(it.name, func(t *testing.T) {
			e.t = t
			cur := tagOf(t, e.okIf(200, "PUT", it.path, it.body))
			before := e.snapshot()
			for _, c := range []struct{ method, body string }{{"PUT", it.changed}, {"DELETE", ""}, {"GET", ""}} {
				p := problemOf(t, e.okIf(412, c.method, it.path, c.body, "If-Match", "W/"+cur))
				if !strings.Contains(p.Detail, "weak") || strings.Contains(p.Detail, "changed since") || strings.Contains(p.Detail, "another ETag") {
					t.Errorf("%s with If-Match W/ and its own tag: detail %q, want it to say the tag is weak, not that the item changed", c.method, p.Detail)
				}
			}
			if now := e.snapshot(); now != before {
				t.Fatalf("a refused write changed the store:\n%s\nwas\n%s", now, before)
			}
		})
	}
}

// A GET whose If-Match fails names the item, as a write's 412 does: it
// said "the item has another ETag", where a client reading several
// items at once cannot tell which.
func TestGetPreconditionNamesTheItem(t *testing.T) {
	e := newEnv(t, nil)
	names := map[string]string{
		"app":      `app "web"`,
		"domain":   `domain "www.customer.example"`,
		"zone":     `zone "other.example.com"`,
		"record":   `record www.apps.example.com A`,
		"host key": `host key "web-1"`,
	}
	for _, it := range items(e) {
		t.Run(it.name, func(t *testing.T) {
			e.t = t
			e.okIf(200, "PUT", it.path, it.body)
			p := problemOf(t, e.okIf(412, "GET", it.path, "", "If-Match", `"0123"`))
			if want := names[it.name] + " has another ETag"; !strings.HasPrefix(p.Detail, want) {
				t.Errorf("GET with a stale If-Match: detail %q, want it to start %q", p.Detail, want)
			}
		})
	}
}

// A list carries no ETag, but it exists, so If-Match and If-None-Match
// are evaluated on it as on an item (RFC 9110 §13.1.1-2): If-Match naming
// a tag never matches and answers 412 with no list, If-Match: * holds;
// If-None-Match: * does not hold, and a GET or HEAD answers 304, while
// If-None-Match naming a tag holds. An item's tag sent to its list (a
// dashboard that keeps one tag per page) is no list's tag. A list that
// is not there (a missing zone's records) answers 404 whatever the
// conditions, as an item does (§13.2.2).
func TestListPreconditions(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Clusters = func() any { return map[string]any{"self": "c1"} } })
	e.seed()
	shop := tagOf(t, e.okIf(200, "GET", "/api/v3/apps/shop", ""))
	lists := []string{
		"/api/v3/apps", "/api/v3/apps?limit=1", "/api/v3/domains", "/api/v3/dns/zones",
		"/api/v3/dns/zones/apps.example.com/records", "/api/v3/hosts/keys", "/api/v3/hosts",
		"/api/v3/discovery/clusters",
	}
	for _, path := range lists {
		for _, method := range []string{"GET", "HEAD"} {
			for _, c := range []struct {
				field, value string
				want         int
			}{
				{"If-Match", shop, 412},
				{"If-Match", `"0123abcd", ` + shop, 412},
				{"If-Match", `*`, 200},
				{"If-None-Match", `*`, 304},
				{"If-None-Match", shop, 200},
			} {
				r := e.doIf(method, path, "", c.field, c.value)
				if r.status != c.want {
					t.Errorf("%s %s %s: %s: %d, want %d: %s", method, path, c.field, c.value, r.status, c.want, r.body)
					continue
				}
				if r.header.Get("ETag") != "" {
					t.Errorf("%s %s: ETag %q on a list", method, path, r.header.Get("ETag"))
				}
				if c.want == 412 && method == "GET" {
					if d := problemOf(t, r).Detail; !strings.Contains(d, "no ETag") {
						t.Errorf("%s %s If-Match: detail %q does not say a list has no ETag", method, path, d)
					}
				}
				if c.want != 200 && method == "GET" && strings.Contains(string(r.body), `"shop"`) {
					t.Errorf("%s %s %s: %d answered the list: %s", method, path, c.field, c.want, r.body)
				}
			}
		}
	}
	e.okIf(404, "GET", "/api/v3/dns/zones/none.example.com/records", "", "If-Match", shop)
	e.okIf(400, "GET", "/api/v3/apps", "", "If-Match", "shop")
	e.okIf(400, "GET", "/api/v3/discovery/clusters", "", "If-Match", "shop")
}

// A write on an item that has changed since it was read answers 412 even
// when its body would be refused as well: RFC 9110 §13.2.1 has the
// conditions evaluated before the content is processed, and a client
// told 400 would fix its body only to learn that its write was stale all
// along. A body that is bad on an item the conditions hold for is still
// 400, and neither writes anything.
func TestStaleWriteBeforeBadBody(t *testing.T) {
	e := newEnv(t, nil)
	for _, it := range items(e) {
		t.Run(it.name, func(t *testing.T) {
			e.t = t
			read := tagOf(t, e.okIf(200, "PUT", it.path, it.body))
			cur := tagOf(t, e.okIf(200, "PUT", it.path, it.changed))
			before := e.snapshot()
			e.okIf(412, "PUT", it.path, `{"no_such_field":1}`, "If-Match", read)
			e.okIf(412, "PUT", it.path, `{"no_such_field":1}`, "If-None-Match", "*")
			e.okIf(400, "PUT", it.path, `{"no_such_field":1}`, "If-Match", cur)
			if it.name == "domain" {
				e.okIf(412, "POST", it.path+"/verify", `{"method":"no-such-method"}`, "If-Match", read)
				e.okIf(400, "POST", it.path+"/verify", `{"method":"no-such-method"}`, "If-Match", cur)
			}
			if now := e.snapshot(); now != before {
				t.Fatalf("a refused write changed the store:\n%s\nwas\n%s", now, before)
			}
		})
	}
}
