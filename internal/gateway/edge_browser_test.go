package gateway

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestCORSInChromium drives a real headless Chromium: a page on the allowed
// origin fetches the app with a custom header (so the browser sends a
// preflight first) and succeeds; the same page on another origin fails;
// and the host never saw a preflight. Chromium resolves *.localhost to
// loopback, so the origins differ by host name on one loopback server.
func TestCORSInChromium(t *testing.T) {

	allowed, other := browser.Origins(t)

	// star lists its allowed headers as "*", as nginx and Express users
	// write it: any header.
	e := newEdgeEnv(t, "localhost", []*route.App{{ID: "app", CORS: route.CORS{Origins: []string{allowed}}},
		{ID: "star", CORS: route.CORS{Origins: []string{allowed}, AllowHeaders: []string{"*"}, AllowCredentials: true}},
		{ID: "authd", CORS: route.CORS{Origins: []string{allowed}}, Auth: route.Auth{Required: true}}}, nil)
	gu, _ := url.Parse(e.srv.URL)

	bctx := browser.Start(t)

	fetchFrom := func(origin, app, opts string) string {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatalf("navigate %s: %v", origin, err)
		}
		script := `fetch(` + browser.JSString("http://"+app+".localhost:"+gu.Port()+"/data") + `, ` + opts + `)
			.then(r => r.text().then(b => "status " + r.status + " limit " + r.headers.get("X-RateLimit-Limit") + " body " + b))
			.catch(err => "failed: " + err)`
		got, err := chromedp.Run(bctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch from %s: %v", origin, err)
		}
		return got
	}
	const put = `{method: "PUT", headers: {"X-Custom": "1"}, body: "hi"}`
	if got := fetchFrom(allowed, "app", put); got != "status 200 limit 600 body ok" {
		t.Fatalf("from the allowed origin: %q", got)
	}
	if got := fetchFrom(other, "app", put); !strings.HasPrefix(got, "failed: ") {
		t.Fatalf("from another origin: %q", got)
	}
	if got := fetchFrom(allowed, "star", `{method: "PUT", credentials: "include", headers: {"X-Custom": "1", "X-Other": "2"}, body: "hi"}`); got != "status 200 limit 600 body ok" {
		t.Fatalf("allow_headers [\"*\"], from the allowed origin: %q", got)
	}
	// A refused token's 401 says why in WWW-Authenticate (RFC 6750:
	// invalid_token, insufficient_scope), the gateway's own field, which
	// a page on an allowed origin reads to know whether to get a new
	// token or ask for more scope.
	why := `fetch(` + browser.JSString("http://authd.localhost:"+gu.Port()+"/data") + `, {headers: {"Authorization": "Bearer x"}})
		.then(r => r.status + " " + r.headers.get("WWW-Authenticate")).catch(err => "failed: " + err)`
	got, err := chromedp.Run(bctx, chromedp.Evaluate[string](why, chromedp.EvalAwaitPromise))
	if err != nil || got != `401 Bearer realm="gatehouse", error="invalid_token", error_description="the token is not a well-formed JWT"` {
		t.Fatalf("a 401 read from the allowed origin: %q %v", got, err)
	}
	if seen := e.backendOf("star").all(); len(seen) != 1 || seen[0].Method != "PUT" {
		t.Fatalf("star's host saw %+v; want exactly the PUT", seen)
	}
	seen := e.backendOf("app").all()
	if len(seen) != 1 || seen[0].Method != "PUT" || seen[0].Header.Get("Origin") != allowed {
		t.Fatalf("the host saw %+v; want exactly the allowed origin's PUT", seen)
	}
	for _, r := range seen {
		if r.Method == "OPTIONS" {
			t.Fatal("the host saw a preflight")
		}
	}
}
