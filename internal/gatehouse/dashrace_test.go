package gatehouse

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// TestDashboardLateRefusalKeepsNewCredential: a refusal that arrives for
// a credential the operator has already replaced drops nothing. The
// browser holds the requests made with a wrong token until the right one
// is typed in and its apps are shown, then lets them go: their 401s
// answer a credential the page no longer holds, so the page goes on
// polling with the right one and shows no refusal. It dropped the right
// one instead, and stopped polling with the apps of its last answer on
// the screen.
func TestDashboardLateRefusalKeepsNewCredential(t *testing.T) {
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	bctx := browser.Start(t)

	var mu sync.Mutex
	var held []fetch.RequestID
	var rightSent int // API requests sent with the right token
	if err := chromedp.Listen(bctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch e.Request.Headers["Authorization"] {
		case "Bearer wrong":
			held = append(held, e.RequestID)
			return
		case "Bearer " + controlToken:
			rightSent++
		}
		// Not from the listener's goroutine, which must not wait for
		// the browser.
		go chromedp.Call(bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/v3/*"}}}); err != nil {
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
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15 s; control error %q, apps %q", what, eval(`document.querySelector("#control-error").textContent`), eval(`document.querySelector("#apps tbody").textContent`))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	login := func(token string) {
		t.Helper()
		eval(`document.querySelector("#token").value = ` + browser.JSString(token) + `; document.querySelector("#load").click(); "ok"`)
	}
	login("wrong")
	waitFor("the wrong token's requests held", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 2 })
	login(controlToken)
	waitFor("the apps shown", func() bool {
		return strings.Contains(eval(`document.querySelector("#apps tbody").textContent`), "hello")
	})

	mu.Lock()
	ids := held
	before := rightSent
	mu.Unlock()
	for _, id := range ids {
		if _, err := chromedp.Call(bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// The 401s reach the page; the next poll still carries the right
	// token, and the page shows no refusal.
	waitFor("the next poll with the right token", func() bool { mu.Lock(); defer mu.Unlock(); return rightSent >= before+2 })
	waitFor("the apps shown after the poll", func() bool {
		return strings.Contains(eval(`document.querySelector("#apps tbody").textContent`), "hello")
	})
	if got := eval(`document.querySelector("#control-error").textContent`); got != "" {
		t.Errorf("control error %q for a credential the page no longer holds", got)
	}
}

// TestDashboardLateAnswerKeepsPage: an answer for a page of apps the
// operator has already left is not shown. The browser holds a poll's
// request for the first page until the next button has brought the
// second page; let go, its answer put the first page back on the screen
// under the second page's buttons until the next poll.
func TestDashboardLateAnswerKeepsPage(t *testing.T) {
	r := start(t, testConfig(t))
	for i := range 130 {
		if code, body := r.control(t, "PUT", fmt.Sprintf("/api/v3/apps/app-%03d", i), `{}`); code != 200 {
			t.Fatalf("put app: %d %s", code, body)
		}
	}
	bctx := browser.Start(t)

	var mu sync.Mutex
	hold := false
	var held []fetch.RequestID
	var secondSent int // requests for the second page
	if err := chromedp.Listen(bctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		u := e.Request.URL
		if strings.Contains(u, "after=app-099") {
			secondSent++
		}
		if hold && strings.Contains(u, "/api/v3/apps?") && !strings.Contains(u, "after=") {
			held = append(held, e.RequestID)
			return
		}
		go chromedp.Call(bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/v3/*"}}}); err != nil {
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
	const view = `(function () { var rows = document.querySelectorAll("#apps tbody tr");
	  return rows.length ? rows[0].cells[0].textContent : "-"; })()`
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15 s; first app shown %q", what, eval(view))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	eval(`document.querySelector("#token").value = ` + browser.JSString(controlToken) + `; document.querySelector("#load").click(); "ok"`)
	waitFor("the first page", func() bool { return eval(view) == "app-000" })
	mu.Lock()
	hold = true
	mu.Unlock()
	waitFor("a poll for the first page held", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) > 0 })
	eval(`document.querySelector("#apps-next").click(); "ok"`)
	waitFor("the second page", func() bool { return eval(view) == "app-100" })

	mu.Lock()
	hold = false
	ids := held
	before := secondSent
	mu.Unlock()
	for _, id := range ids {
		if _, err := chromedp.Call(bctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// Until the next poll for the second page, the second page stays.
	waitFor("the next poll for the second page", func() bool {
		if got := eval(view); got != "app-100" {
			t.Fatalf("after the late answer for the first page, the first app shown is %q, want app-100", got)
		}
		mu.Lock()
		defer mu.Unlock()
		return secondSent > before
	})
}
