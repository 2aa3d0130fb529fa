package gatehouse

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// TestCORSWholeGatewayInChromium drives a real headless Chromium at the
// whole gateway (the plaintext listener's lane, the chain, a real host on
// the bus), DESIGN §2 step 5: from an allowed origin a credentialed
// request with a preflight succeeds; a 429 and a 401 are readable there
// with their fields (a 401's WWW-Authenticate and X-Request-Id too), as
// the preflight comes before the rate limit and auth; and from any other
// origin nothing is readable, although every host answers
// Access-Control-Allow-Origin: * itself. Chromium resolves
// *.localhost to loopback, so the zone is localhost.
func TestCORSWholeGatewayInChromium(t *testing.T) {
	t.Parallel() // mostly waiting on the browser, with a gateway of its own
	allowed, other := browser.Origins(t)
	cfg := testConfig(t)
	cfg.Zone = "localhost"
	// authd requires a token, which the control API takes only from a
	// gateway that verifies some.
	_, keys := issuerKey(t)
	cfg.Auth.Issuers = []config.Issuer{{Issuer: "idp", KeysFile: keys}}
	r := start(t, cfg)
	for _, a := range []struct{ id, body string }{
		{"cred", `{"cors":{"origins":["` + allowed + `"],"allow_credentials":true}}`},
		{"lim", `{"cors":{"origins":["` + allowed + `"]},"rate_limit":{"requests":1,"window":"60s"}}`},
		{"authd", `{"cors":{"origins":["` + allowed + `"]},"auth":{"required":true}}`},
	} {
		if code, body := r.control(t, "PUT", "/api/v3/apps/"+a.id, a.body); code != 200 {
			t.Fatalf("put app %s: %d %s", a.id, code, body)
		}
		startHost(t, r, "host-"+a.id, a.id, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			io.WriteString(w, "ok")
		}))
		id := a.id
		testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool(id)) == 1 }, "host-"+id+" never became routable")
	}
	_, port, _ := net.SplitHostPort(r.g.Addrs().HTTP)
	bctx := browser.Start(t)
	fetchFrom := func(origin, app, opts string) string {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatalf("navigate %s: %v", origin, err)
		}
		js := `fetch(` + browser.JSString("http://"+app+".localhost:"+port+"/data") + `, ` + opts + `)
			.then(r => r.text().then(b => r.status + " retry " + r.headers.get("Retry-After") + " limit " + r.headers.get("X-RateLimit-Limit") + " " + b +
				" | auth " + r.headers.get("WWW-Authenticate") + " | id " + (r.headers.get("X-Request-Id") ? "set" : "null")))
			.catch(err => "failed: " + err)`
		got, err := chromedp.Run(bctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch %s from %s: %v", app, origin, err)
		}
		return got
	}
	check := func(got, want string) {
		t.Helper()
		if !strings.HasPrefix(got, want) {
			t.Errorf("got %q, want it to begin %q", got, want)
		}
	}
	check(fetchFrom(allowed, "cred", `{method: "PUT", credentials: "include", headers: {"X-Custom": "1"}, body: "x"}`), "200 retry null limit 600 ok")
	check(fetchFrom(allowed, "lim", `{}`), "200 retry null limit 1 ok")
	got := fetchFrom(allowed, "lim", `{method: "PUT", headers: {"X-Custom": "1"}}`)
	check(got, "429 retry ")
	if strings.HasPrefix(got, "429 retry null") {
		t.Errorf("Retry-After not readable: %q", got)
	}
	got = fetchFrom(allowed, "authd", `{headers: {"Authorization": "Bearer x"}}`)
	check(got, "401 retry null limit 600")
	// why the token was refused, and the id to quote to the platform
	if !strings.Contains(got, `| auth Bearer realm=`) || !strings.Contains(got, "invalid_token") || !strings.HasSuffix(got, "| id set") {
		t.Errorf("WWW-Authenticate or X-Request-Id not readable: %q", got)
	}
	for _, app := range []string{"cred", "authd"} {
		check(fetchFrom(other, app, `{}`), "failed: ")
		check(fetchFrom(other, app, `{headers: {"X-Custom": "1"}}`), "failed: ")
	}
}
