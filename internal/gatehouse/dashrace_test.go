package gatehouse

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// heldDashboard is the dashboard open in Chromium with its API requests
// paused by the browser, so a test can answer them late.
type heldDashboard struct {
	t    *testing.T
	bctx context.Context
	// mu guards held and whatever the test's hold function counts.
	mu   sync.Mutex
	held []fetch.RequestID
}

// openHeldDashboard opens r's dashboard; hold, called under d.mu for
// each API request, says whether to keep it (until release) or let it go.
func openHeldDashboard(t *testing.T, r *running, hold func(*fetch.EventRequestPaused) bool) *heldDashboard {
	t.Helper()
	d := &heldDashboard{t: t, bctx: browser.Start(t)}
	if err := chromedp.Listen(d.bctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if hold(e) {
			d.held = append(d.held, e.RequestID)
			return
		}
		// Not from the listener's goroutine, which must not wait for
		// the browser.
		go chromedp.Call(d.bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(d.bctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/v3/*"}}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(d.bctx, chromedp.Navigate("http://"+r.g.Addrs().Management+"/")); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *heldDashboard) eval(js string) string {
	d.t.Helper()
	s, err := chromedp.Run(d.bctx, chromedp.Evaluate[string](js))
	if err != nil {
		d.t.Fatalf("%s: %v", js, err)
	}
	return s
}

// waitFor waits up to 15 s for ok, then fails with what shown says.
func (d *heldDashboard) waitFor(what string, ok func() bool, shown func() string) {
	d.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: not within 15 s; %s", what, shown())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldCount is how many requests are held.
func (d *heldDashboard) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

// release lets every held request go, after stop (if not nil) ran under
// d.mu, so nothing is held after it.
func (d *heldDashboard) release(stop func()) {
	d.t.Helper()
	d.mu.Lock()
	if stop != nil {
		stop()
	}
	ids := d.held
	d.held = nil
	d.mu.Unlock()
	for _, id := range ids {
		if _, err := chromedp.Call(d.bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil {
			d.t.Fatal(err)
		}
	}
}

// TestDashboardLateRefusalKeepsNewCredential: a refusal that arrives for
// a credential the operator has already replaced drops nothing. The
// browser holds the requests made with a wrong token until the right one
// is typed in and its apps are shown, then lets them go: their 401s
// answer a credential the page no longer holds, so the page goes on
// polling with the right one and shows no refusal. It dropped the right
// one instead, and stopped polling with the apps of its last answer on
// the screen.
func TestDashboardLateRefusalKeepsNewCredential(t *testing.T) {
	t.Parallel() // mostly waiting on the page's 5 s polls, with a gateway and a browser of its own
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	var rightSent int // API requests sent with the right token; under d.mu
	d := openHeldDashboard(t, r, func(e *fetch.EventRequestPaused) bool {
		switch e.Request.Headers["Authorization"] {
		case "Bearer wrong":
			return true
		case "Bearer " + controlToken:
			rightSent++
		}
		return false
	})
	shown := func() string {
		return fmt.Sprintf("control error %q, apps %q", d.eval(`document.querySelector("#control-error").textContent`), d.eval(`document.querySelector("#apps tbody").textContent`))
	}
	appsShown := func() bool {
		return strings.Contains(d.eval(`document.querySelector("#apps tbody").textContent`), "hello")
	}
	login := func(token string) {
		t.Helper()
		d.eval(`document.querySelector("#token").value = ` + browser.JSString(token) + `; document.querySelector("#load").click(); "ok"`)
	}
	login("wrong")
	d.waitFor("the wrong token's requests held", func() bool { return d.heldCount() == 2 }, shown)
	login(controlToken)
	d.waitFor("the apps shown", appsShown, shown)

	var before int
	d.release(func() { before = rightSent })
	// The 401s reach the page; the next poll still carries the right
	// token, and the page shows no refusal.
	d.waitFor("the next poll with the right token", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return rightSent >= before+2 }, shown)
	d.waitFor("the apps shown after the poll", appsShown, shown)
	if got := d.eval(`document.querySelector("#control-error").textContent`); got != "" {
		t.Errorf("control error %q for a credential the page no longer holds", got)
	}
}

// TestDashboardLateAnswerKeepsPage: an answer for a page of apps the
// operator has already left is not shown. The browser holds a poll's
// request for the first page until the next button has brought the
// second page; let go, its answer put the first page back on the screen
// under the second page's buttons until the next poll.
func TestDashboardLateAnswerKeepsPage(t *testing.T) {
	t.Parallel() // mostly waiting on the page's 5 s polls, with a gateway and a browser of its own
	r := start(t, testConfig(t))
	for i := range 130 {
		if code, body := r.control(t, "PUT", fmt.Sprintf("/api/v3/apps/app-%03d", i), `{}`); code != 200 {
			t.Fatalf("put app: %d %s", code, body)
		}
	}
	hold := false      // under d.mu
	var secondSent int // requests for the second page; under d.mu
	d := openHeldDashboard(t, r, func(e *fetch.EventRequestPaused) bool {
		u := e.Request.URL
		if strings.Contains(u, "after=app-099") {
			secondSent++
		}
		return hold && strings.Contains(u, "/api/v3/apps?") && !strings.Contains(u, "after=")
	})
	const view = `(function () { var rows = document.querySelectorAll("#apps tbody tr");
	  return rows.length ? rows[0].cells[0].textContent : "-"; })()`
	shown := func() string { return fmt.Sprintf("first app shown %q", d.eval(view)) }
	d.eval(`document.querySelector("#token").value = ` + browser.JSString(controlToken) + `; document.querySelector("#load").click(); "ok"`)
	d.waitFor("the first page", func() bool { return d.eval(view) == "app-000" }, shown)
	d.mu.Lock()
	hold = true
	d.mu.Unlock()
	d.waitFor("a poll for the first page held", func() bool { return d.heldCount() > 0 }, shown)
	d.eval(`document.querySelector("#apps-next").click(); "ok"`)
	d.waitFor("the second page", func() bool { return d.eval(view) == "app-100" }, shown)

	var before int
	d.release(func() { hold, before = false, secondSent })
	// Until the next poll for the second page, the second page stays.
	d.waitFor("the next poll for the second page", func() bool {
		if got := d.eval(view); got != "app-100" {
			t.Fatalf("after the late answer for the first page, the first app shown is %q, want app-100", got)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		return secondSent > before
	}, shown)
}
