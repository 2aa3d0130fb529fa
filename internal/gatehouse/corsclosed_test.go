package gatehouse

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// TestCORSClosedAppReadableInChromium: a page on an allowed origin reads
// why a suspended or retired app refuses it (DESIGN §2 step 3), its calls
// that need a preflight too (a PUT, a header of its own), which are most
// of a page's API calls: the preflight was answered 503, which a browser
// takes as a refusal, so the page read a network error instead of the
// app's state. Another origin still reads nothing.
func TestCORSClosedAppReadableInChromium(t *testing.T) {
	t.Parallel()
	allowed, other := browser.Origins(t)
	cfg := testConfig(t)
	cfg.Zone = "localhost"
	r := start(t, cfg)
	for _, a := range []struct{ id, status string }{{"sus", "suspended"}, {"old", "retired"}} {
		if code, body := r.control(t, "PUT", "/api/v3/apps/"+a.id, `{"status":"`+a.status+`","cors":{"origins":["`+allowed+`"]}}`); code != 200 {
			t.Fatalf("put app %s: %d %s", a.id, code, body)
		}
		id := a.id
		testutil.WaitFor(t, 5*time.Second, func() bool { return r.g.Live().Load().Lookup(id+".localhost").App != nil }, id+" never reached the table")
	}
	_, port, _ := net.SplitHostPort(r.g.Addrs().HTTP)
	bctx := browser.Start(t)
	for _, c := range []struct{ origin, app, opts, want string }{
		{allowed, "sus", `{}`, "503 this app is suspended"},
		{allowed, "sus", `{method: "PUT", headers: {"X-Custom": "1"}, body: "x"}`, "503 this app is suspended"},
		{allowed, "old", `{method: "DELETE"}`, "503 this app is retired"},
		{other, "sus", `{}`, "failed: "},
		{other, "sus", `{method: "PUT", headers: {"X-Custom": "1"}, body: "x"}`, "failed: "},
	} {
		if err := chromedp.Do(bctx, chromedp.Navigate(c.origin+"/")); err != nil {
			t.Fatalf("navigate %s: %v", c.origin, err)
		}
		js := `fetch(` + browser.JSString("http://"+c.app+".localhost:"+port+"/data") + `, ` + c.opts + `)
			.then(r => r.json().then(b => r.status + " " + b.detail))
			.catch(err => "failed: " + err)`
		got, err := chromedp.Run(bctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch %s from %s: %v", c.app, c.origin, err)
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s from %s with %s: got %q, want it to begin %q", c.app, c.origin, c.opts, got, c.want)
		}
	}
}
