package gatehouse

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDashboardPage: the management listener serves the dashboard at /
// (DESIGN §3), as a static page that carries no secret: the control token
// is nowhere in what it serves, its scripts come only from itself, and
// no other origin may frame it.
func TestDashboardPage(t *testing.T) {
	r := start(t, testConfig(t))
	base := "http://" + r.g.Addrs().Management
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / on management: %d %s\n%.300s", resp.StatusCode, resp.Header.Get("Content-Type"), page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	for _, path := range []string{"/", "/dashboard/dashboard.js", "/dashboard/dashboard.css"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
		if strings.Contains(string(b), controlToken) {
			t.Errorf("GET %s carries the control token", path)
		}
		// No other origin may frame it (clickjacking): frame-ancestors
		// for the browsers that read CSP, X-Frame-Options for the rest.
		for name, want := range map[string]string{
			"X-Frame-Options":        "DENY",
			"X-Content-Type-Options": "nosniff",
			"Referrer-Policy":        "no-referrer",
			"Cache-Control":          "no-store",
		} {
			if got := resp.Header.Get(name); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, name, got, want)
			}
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
}

// TestDashboardInChromium drives a real headless Chromium at the
// dashboard: it shows readiness and the cluster without any credential,
// refuses the control view to a wrong token, and with the control token
// the operator types in lists the apps and the verified host. A refused
// token is asked for again, not sent again: polling with it made about
// 60 refused calls a minute, which put the control API's wrong-token
// lockout (100 a minute per address, then 429 for every token, the right
// one too) on the operator's own address. The page asks for no favicon
// (a 404 in the log).
func TestDashboardInChromium(t *testing.T) {
	t.Parallel() // mostly waiting on the browser, with a gateway of its own
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	startHost(t, r, "host-1", "hello", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host-1 never became routable")

	bctx := browser.Start(t)

	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector(`+browser.JSString(sel)+`) || {}).textContent || ""`))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	waitText := func(sel, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := text(sel)
			if strings.Contains(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s shows %q, want it to contain %q", sel, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Count what the browser sends: requests carrying a token, and any
	// for /favicon.ico.
	var mu sync.Mutex
	var withToken, favicon int
	if err := chromedp.Listen(bctx, func(ev any) {
		e, ok := ev.(*network.EventRequestWillBeSent)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(e.Request.URL, "/favicon.ico") {
			favicon++
		}
		if _, ok := e.Request.Headers["Authorization"]; ok {
			withToken++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return withToken, favicon
	}
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+r.g.Addrs().Management+"/")); err != nil {
		t.Fatal(err)
	}
	waitText("#status", "ready")
	waitText("#clusters", "one")

	login := func(token string) {
		t.Helper()
		// As a user does: type the token into the field, press the button.
		js := `document.querySelector("#token").value = ` + browser.JSString(token) + `; document.querySelector("#load").click(); "ok"`
		if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](js)); err != nil {
			t.Fatal(err)
		}
	}
	login("wrong")
	waitText("#control-error", "401")
	time.Sleep(3*2*time.Second + 500*time.Millisecond) // three poll intervals
	if n, _ := counts(); n != 2 {
		t.Errorf("a refused token was sent %d times over three poll intervals, want 2 (apps and hosts, once)", n)
	}
	waitText("#control-error", "enter it again")
	login(controlToken)
	waitText("#apps", "hello")
	waitText("#hosts", "host-1")
	waitText("#hosts", "verified")
	if got := text("#control-error"); got != "" {
		t.Errorf("control error shown with the right token: %q", got)
	}
	// The token stays in the page's memory: not in its address, not stored.
	stored, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.href + JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "secret") {
		t.Errorf("the token leaked into the address or storage: %q", stored)
	}
	if _, n := counts(); n != 0 {
		t.Errorf("the page asked for /favicon.ico %d times", n)
	}
}

// TestDashboardPagesApps: with more apps than a page, the dashboard
// shows one page of them and says that more follow, and asks the API for
// pages only, never for the whole list, which on a large platform is
// megabytes for the gateway to build and the browser to lay out at every
// poll; the next button shows the rest.
func TestDashboardPagesApps(t *testing.T) {
	t.Parallel() // mostly waiting on the browser, with a gateway of its own
	r := start(t, testConfig(t))
	const apps = 130
	for i := range apps {
		if code, body := r.control(t, "PUT", fmt.Sprintf("/api/v3/apps/app-%03d", i), `{}`); code != 200 {
			t.Fatalf("put app: %d %s", code, body)
		}
	}
	bctx := browser.Start(t)
	var mu sync.Mutex
	var whole []string
	if err := chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && strings.Contains(e.Request.URL, "/api/v3/") && !strings.Contains(e.Request.URL, "limit=") &&
			!strings.Contains(e.Request.URL, "/discovery/") {
			mu.Lock()
			whole = append(whole, e.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+r.g.Addrs().Management+"/")); err != nil {
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
	// rows, first id, last id and the line under the apps
	const view = `(function () { var rows = document.querySelectorAll("#apps tbody tr");
	  return rows.length + " " + (rows.length ? rows[0].cells[0].textContent + " " + rows[rows.length-1].cells[0].textContent : "- -") +
	    " | " + (document.querySelector("#apps-more") || {}).textContent; })()`
	waitView := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got := eval(view); got != want; got = eval(view) {
			if time.Now().After(deadline) {
				t.Fatalf("apps show %q, want %q", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	eval(`document.querySelector("#token").value = ` + browser.JSString(controlToken) + `; document.querySelector("#load").click(); "ok"`)
	waitView("100 app-000 app-099 | apps app-000 to app-099; more follow")
	eval(`document.querySelector("#apps-next").click(); "ok"`)
	waitView("30 app-100 app-129 | apps app-100 to app-129; the last")
	eval(`document.querySelector("#apps-first").click(); "ok"`)
	waitView("100 app-000 app-099 | apps app-000 to app-099; more follow")
	mu.Lock()
	defer mu.Unlock()
	if len(whole) > 0 {
		t.Errorf("the dashboard asked for whole lists: %v", whole)
	}
}
