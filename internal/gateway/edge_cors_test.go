package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

func TestCORSThroughChain(t *testing.T) {
	apps := []*route.App{
		{ID: "shop", CORS: route.CORS{Origins: []string{"https://a.example"}}},
		{ID: "creds", CORS: route.CORS{Origins: []string{"https://a.example"}, AllowCredentials: true}},
		{ID: "closed"},
	}
	e := newEdgeEnv(t, "apps.test", apps, nil)
	// the backend of shop tries to open CORS itself; the gateway decides
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Write([]byte("ok"))
	})
	pre := func(origin, method, headers string) http.Header {
		h := http.Header{"Origin": {origin}, "Access-Control-Request-Method": {method}}
		if headers != "" {
			h.Set("Access-Control-Request-Headers", headers)
		}
		return h
	}
	privateNet := func(h http.Header) http.Header {
		h.Set("Access-Control-Request-Private-Network", "true")
		return h
	}
	cases := []struct {
		name    string
		method  string
		app     string
		hdr     http.Header
		status  int
		reached bool
		want    map[string]string // "" = must be absent
	}{
		{"preflight allowed", "OPTIONS", "shop", pre("https://a.example", "PUT", "x-custom"), 204, false, map[string]string{
			"Access-Control-Allow-Origin": "https://a.example", "Access-Control-Allow-Methods": "PUT",
			"Access-Control-Allow-Headers": "x-custom", "Access-Control-Max-Age": "600", "Access-Control-Allow-Credentials": ""}},
		// Private Network Access: a page on a public origin that calls a
		// gateway on a private address asks first. The gateway answers
		// every preflight (the host cannot), so it answers this too, for
		// an origin the app lists and only when asked.
		{"preflight private network", "OPTIONS", "shop", privateNet(pre("https://a.example", "GET", "")), 204, false, map[string]string{
			"Access-Control-Allow-Origin": "https://a.example", "Access-Control-Allow-Private-Network": "true"}},
		{"preflight private network other origin", "OPTIONS", "shop", privateNet(pre("https://evil.example", "GET", "")), 403, false, map[string]string{
			"Access-Control-Allow-Origin": "", "Access-Control-Allow-Private-Network": ""}},
		{"preflight private network not asked", "OPTIONS", "shop", pre("https://a.example", "GET", ""), 204, false, map[string]string{
			"Access-Control-Allow-Private-Network": ""}},
		{"preflight with credentials", "OPTIONS", "creds", pre("https://a.example", "POST", ""), 204, false, map[string]string{
			"Access-Control-Allow-Origin": "https://a.example", "Access-Control-Allow-Credentials": "true"}},
		{"preflight other origin", "OPTIONS", "shop", pre("https://evil.example", "PUT", ""), 403, false, map[string]string{
			"Access-Control-Allow-Origin": "", "Access-Control-Allow-Methods": ""}},
		{"preflight default deny", "OPTIONS", "closed", pre("https://a.example", "GET", ""), 403, false, map[string]string{
			"Access-Control-Allow-Origin": ""}},
		{"plain OPTIONS reaches host", "OPTIONS", "shop", http.Header{"Origin": {"https://a.example"}}, 200, true, map[string]string{
			"Access-Control-Allow-Origin": "https://a.example"}},
		{"actual allowed", "GET", "shop", http.Header{"Origin": {"https://a.example"}}, 200, true, map[string]string{
			"Access-Control-Allow-Origin": "https://a.example", "Vary": "Origin", "Access-Control-Allow-Credentials": ""}},
		{"actual allowed credentials", "GET", "creds", http.Header{"Origin": {"https://a.example"}}, 200, true, map[string]string{
			"Access-Control-Allow-Origin": "https://a.example", "Access-Control-Allow-Credentials": "true"}},
		// The answer depends on Origin, so it says so even when it allows
		// none: a cache that kept it without Vary would hand it to the
		// allowed origin, whose browser would then refuse it (Fetch,
		// "CORS protocol and HTTP caches").
		{"actual other origin: host's * removed", "GET", "shop", http.Header{"Origin": {"https://evil.example"}}, 200, true, map[string]string{
			"Access-Control-Allow-Origin": "", "Vary": "Origin"}},
		{"no origin: untouched", "GET", "closed", nil, 200, true, map[string]string{"Access-Control-Allow-Origin": "", "Vary": ""}},
		// A cache keeps what a request without Origin got and may hand it
		// to a cross-origin one: the host's * must not get past there either.
		{"no origin: host's * removed", "GET", "shop", nil, 200, true, map[string]string{"Access-Control-Allow-Origin": "", "Vary": "Origin"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.backendOf(c.app).count()
			res, body := e.do(edgeReq{method: c.method, app: c.app, path: "/data", hdr: c.hdr})
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, c.status, body)
			}
			if c.status == 403 {
				edgeProblem(t, res, body, 403)
			}
			if reached := e.backendOf(c.app).count() > before; reached != c.reached {
				t.Fatalf("backend reached: %v, want %v", reached, c.reached)
			}
			for k, v := range c.want {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
	for _, r := range e.backendOf("shop").all() {
		if r.Header.Get("Access-Control-Request-Method") != "" {
			t.Fatalf("the host saw a preflight: %+v", r)
		}
	}
}

// TestPreflightCostsNothing: a preflight is answered in step 5, before
// the rate limit of step 6 (DESIGN §2), so it spends none of the app's
// window and carries none of its fields, whether it is allowed or not;
// the actual request after it is the first the window counts.
func TestPreflightCostsNothing(t *testing.T) {
	apps := []*route.App{{ID: "shop", CORS: route.CORS{Origins: []string{"https://a.example"}}, RateLimit: route.RateLimit{Requests: 2, Window: route.Duration(time.Minute)}}}
	e := newEdgeEnv(t, "apps.test", apps, nil)
	for i, origin := range []string{"https://a.example", "https://a.example", "https://a.example", "https://evil.example", "https://evil.example"} {
		res, body := e.do(edgeReq{method: "OPTIONS", app: "shop", path: "/x", hdr: http.Header{"Origin": {origin}, "Access-Control-Request-Method": {"PUT"}}})
		want := http.StatusNoContent
		if origin != "https://a.example" {
			want = http.StatusForbidden
		}
		if res.StatusCode != want {
			t.Fatalf("preflight %d from %s: %d %s, want %d", i, origin, res.StatusCode, body, want)
		}
		for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := res.Header.Values(k); len(v) != 0 {
				t.Errorf("preflight %d: %s %q, want none", i, k, v)
			}
		}
	}
	res, body := e.do(edgeReq{method: "PUT", app: "shop", path: "/x", hdr: http.Header{"Origin": {"https://a.example"}}})
	if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("PUT after the preflights: %d, X-RateLimit-Remaining %q, want 200, 1: %s", res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), body)
	}
}
