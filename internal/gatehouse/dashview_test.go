package gatehouse

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// TestDashboardShowsValuesAsText drives the dashboard in Chromium with the
// browser answering its apps and hosts requests itself, to show it what a
// gateway's validation keeps out or is slow to reach: markup in every
// field, a host error thousands of bytes long without a space, and empty
// lists. The page says an empty
// list is empty (headers alone looked like a page still loading), shows
// markup as text and runs none of it, wraps a long value instead of
// pushing columns out of the window, and forgets the credential on request
// (there was no way but closing the tab), as it does an empty one: its
// apps and hosts leave the screen and it is not sent again. A credential
// no browser can send as typed is not sent; a 401's or a 429's detail is
// shown as text and the credential dropped. The page's CSP refuses
// nothing it does, and another origin cannot frame it.
func TestDashboardShowsValuesAsText(t *testing.T) {
	t.Parallel()
	r := start(t, testConfig(t))
	bctx := browser.Start(t)
	long := strings.Repeat("x", 3000) + "-the-end"
	hostile := map[string]any{
		"/api/v3/apps": map[string]any{"apps": []map[string]any{
			{"id": `<img src=x onerror="window.pwned=1">`, "mode": "<b>http</b>", "status": "active"}}},
		"/api/v3/hosts": map[string]any{"hosts": []map[string]any{
			{"host_id": `<script>window.pwned=2</script>`, "apps": []string{`<svg onload="window.pwned=3">`}, "addr": "10.0.0.1:80",
				"scheme": "http", "state": "verified", "inflight": 0, "last_error": long + `<img src=y onerror="window.pwned=4">`}}},
	}
	empty := map[string]any{"/api/v3/apps": map[string]any{"apps": []any{}}, "/api/v3/hosts": map[string]any{"hosts": []any{}}}
	refusal := map[string]any{"detail": `<img src=z onerror="window.pwned=5">`}

	var mu sync.Mutex
	answers := empty      // what the browser answers, or nil for a refusal; under mu
	refused := int64(401) // the status of a refusal; under mu
	authorized := 0       // API requests that carried a credential; under mu
	if err := chromedp.Listen(bctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if e.Request.Headers["Authorization"] != nil {
			authorized++
		}
		status, body := refused, any(refusal)
		if answers != nil {
			status, body = 200, answers[strings.SplitN(strings.TrimPrefix(e.Request.URL, "http://"+r.g.Addrs().Management), "?", 2)[0]]
		}
		b, _ := json.Marshal(body)
		// Not from the listener's goroutine, which must not wait for
		// the browser.
		go chromedp.Call(bctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: e.RequestID, ResponseCode: status,
			ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}, Body: b})
	}); err != nil {
		t.Fatal(err)
	}
	set := func(a map[string]any) { mu.Lock(); answers = a; mu.Unlock() }
	sent := func() int { mu.Lock(); defer mu.Unlock(); return authorized }
	if _, err := chromedp.Call(bctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*/api/v3/apps?*"}, {URLPattern: "*/api/v3/hosts?*"}}}); err != nil {
		t.Fatal(err)
	}
	// Every CSP refusal, kept from before the page's own script runs.
	if _, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.cspRefused = []; document.addEventListener("securitypolicyviolation", function (e) {
			window.cspRefused.push(e.violatedDirective + " " + e.blockedURI); });`}); err != nil {
		t.Fatal(err)
	}
	dash := "http://" + r.g.Addrs().Management + "/"
	if err := chromedp.Do(bctx, chromedp.Navigate(dash)); err != nil {
		t.Fatal(err)
	}
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	text := func(sel string) string {
		return eval(`document.querySelector(` + browser.JSString(sel) + `).textContent`)
	}
	waitText := func(sel, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := text(sel); !strings.Contains(got, want); got = text(sel) {
			if time.Now().After(deadline) {
				t.Fatalf("%s shows %.200q, want it to contain %.200q", sel, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	login := func(typed string) {
		t.Helper()
		q, _ := json.Marshal(typed) // a JavaScript string literal too
		eval(`document.querySelector("#token").value = ` + string(q) + `; document.querySelector("#load").click(); "ok"`)
	}
	const typed = "typed-credential"
	shown := func() string {
		return text("#apps tbody") + text("#hosts tbody") + text("#apps-more") + text("#hosts-more")
	}
	waitText("#status", "ready")

	login(typed)
	waitText("#apps-more", "no apps")
	waitText("#hosts-more", "no hosts")

	set(hostile)
	login(typed)
	waitText("#hosts", "<script>window.pwned=2</script>")
	for sel, want := range map[string]string{
		"#apps tbody":            `<img src=x onerror="window.pwned=1"><b>http</b>active`,
		"#hosts td:nth-child(2)": `<svg onload="window.pwned=3">`,
		"#hosts td:nth-child(7)": long + `<img src=y onerror="window.pwned=4">`,
	} {
		if got := text(sel); got != want {
			t.Errorf("%s shows %.200q, want %.200q", sel, got, want)
		}
	}
	if got := eval(`String(document.querySelectorAll("#apps *, #hosts *").length - document.querySelectorAll("#apps tr, #apps th, #apps td, #apps thead, #apps tbody, #hosts tr, #hosts th, #hosts td, #hosts thead, #hosts tbody").length)`); got != "0" {
		t.Errorf("%s elements other than the tables' own were made from the values", got)
	}
	const width = `var d = document.documentElement; (d.scrollWidth <= d.clientWidth) + ": " + d.scrollWidth + " wide in a window " + d.clientWidth + " wide"`
	if got := eval(width); !strings.HasPrefix(got, "true") {
		t.Errorf("the page is %s: a long value pushes columns out of sight", got)
	}

	// Sending nothing is forgetting: the last credential's apps and
	// hosts stayed on the screen, no longer refreshed.
	login("")
	waitText("#control-error", "enter the platform credential")
	if got := shown(); got != "" {
		t.Errorf("after an empty credential the page still shows %.200q", got)
	}
	login(typed)
	waitText("#hosts", "<script>window.pwned=2</script>")
	eval(`document.querySelector("#forget").click(); "ok"`)
	if got := shown() + text("#control-error"); got != "" {
		t.Errorf("after forgetting the credential the page still shows %.200q", got)
	}
	before := sent()
	// A credential no browser can send as typed, or that cannot be
	// right, is not sent: fetch refused the first, and the page said
	// the gateway was unreachable; the others were refused, and counted
	// toward the lockout of the operator's address.
	for _, bad := range []string{"tok\u20acen-0123456789", "t\u00f6k\u00e9n-0123456789", "two words-0123456789"} {
		login(bad)
		waitText("#control-error", "not sent: a credential is printable ASCII")
	}
	// The first-apps button asks again at once with a credential held.
	eval(`document.querySelector("#apps-first").click(); "ok"`)
	time.Sleep(500 * time.Millisecond)
	if n := sent() - before; n != 0 {
		t.Errorf("a forgotten or unusable credential was sent %d times", n)
	}

	set(nil)
	login(typed)
	waitText("#control-error", `refused: HTTP 401 <img src=z onerror="window.pwned=5">`)
	waitText("#control-error", "enter it again")
	// The lockout's 429 drops the credential as a 401 does (control.token).
	mu.Lock()
	refused = 429
	mu.Unlock()
	login(typed)
	waitText("#control-error", "refused: HTTP 429")
	waitText("#control-error", "enter it again")

	if got := eval(`String(window.pwned) + " " + JSON.stringify(window.cspRefused)`); got != "undefined []" {
		t.Errorf("pwned and CSP refusals: %s", got)
	}

	// Framed by a page of another origin, the dashboard is not shown.
	_, other := browser.Origins(t)
	if err := chromedp.Do(bctx, chromedp.Navigate(other+"/")); err != nil {
		t.Fatal(err)
	}
	eval(`var f = document.createElement("iframe"); f.src = ` + browser.JSString(dash) + `;
		f.onload = function () { document.title = "framed"; }; document.body.appendChild(f); "ok"`)
	deadline := time.Now().Add(10 * time.Second)
	for eval(`document.title`) != "framed" {
		if time.Now().After(deadline) {
			t.Fatal("the frame never loaded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The frame is another process (site isolation): ask it where it is.
	targets, err := chromedp.Targets(bctx)
	if err != nil {
		t.Fatal(err)
	}
	framed := 0
	for _, tg := range targets {
		if tg.Type != "iframe" {
			continue
		}
		framed++
		fctx, cancel := chromedp.NewContext(bctx, chromedp.WithTargetID(tg.TargetID))
		got, err := chromedp.Run(fctx, chromedp.Evaluate[string](`location.href + " " + document.title`))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, "gatehouse") || strings.HasPrefix(got, dash) {
			t.Errorf("framed by %s, the dashboard shows: %s", other, got)
		}
		t.Logf("frame: %s", got)
	}
	if framed != 1 {
		t.Errorf("%d frames, want 1", framed)
	}
}
