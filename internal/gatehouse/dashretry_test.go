package gatehouse

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// TestDashboardSaysWhenToRetry: once wrong tokens from the operator's
// address have spent the control API's window, the right one is refused
// 429 too, and the dashboard asks for it again. It says how long to wait,
// from the answer's Retry-After, as gatehouse ctl does: "retry later"
// alone had the operator type it again at once and be refused again.
func TestDashboardSaysWhenToRetry(t *testing.T) {
	t.Parallel()
	r := start(t, testConfig(t))
	// The test's own client and Chromium both come from 127.0.0.1, one
	// address to the control API's meter of wrong tokens.
	spend := func() {
		t.Helper()
		for i := 0; ; i++ {
			req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().Management+"/api/v3/apps", nil)
			req.Header.Set("Authorization", "Bearer wrong-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				return
			}
			if i == 1000 {
				t.Fatalf("1000 wrong tokens and no 429 (last %d)", resp.StatusCode)
			}
		}
	}
	bctx := browser.Start(t)
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
	deadline := time.Now().Add(10 * time.Second)
	for eval(`document.readyState`) != "complete" {
		if time.Now().After(deadline) {
			t.Fatal("the dashboard never loaded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The window is spent just before the credential is sent, and again
	// if it was admitted: the meter's windows are aligned on the clock
	// (internal/limit), so one that turns between the two frees room for
	// the right credential, which is then kept and the hosts listed.
	var shown string
	for attempt := 0; !strings.Contains(shown, "429"); attempt++ {
		if attempt == 3 {
			t.Fatalf("the control error shows %q, want a 429", shown)
		}
		spend()
		eval(`document.querySelector("#control-error").textContent = ""; document.querySelector("#hosts-more").textContent = ""; document.querySelector("#token").value = ` + browser.JSString(controlToken) + `; document.querySelector("#load").click(); "ok"`)
		deadline := time.Now().Add(10 * time.Second)
		for shown = eval(`document.querySelector("#control-error").textContent`); !strings.Contains(shown, "429"); shown = eval(`document.querySelector("#control-error").textContent`) {
			if eval(`document.querySelector("#hosts-more").textContent`) != "" {
				break // admitted: a window turned
			}
			if time.Now().After(deadline) {
				t.Fatalf("the control error shows %q, want a 429", shown)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !regexp.MustCompile(`Retry-After: [1-9][0-9]* s`).MatchString(shown) {
		t.Errorf("the 429 does not say when to retry: %q", shown)
	}
	if !strings.Contains(shown, "enter it again") {
		t.Errorf("the 429 does not ask for the credential again: %q", shown)
	}
}
