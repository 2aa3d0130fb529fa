package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

const chromiumPath = "/usr/bin/chromium"

// TestCORSInChromium drives a real headless Chromium: a page on the allowed
// origin fetches the app with a custom header (so the browser sends a
// preflight first) and succeeds; the same page on another origin fails;
// and the host never saw a preflight. Chromium resolves *.localhost to
// loopback, so the origins differ by host name on one loopback server.
func TestCORSInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no Chromium at %s (install the Debian chromium package; CI requires it)", chromiumPath)
		}
		t.Fatalf("CI is set but Chromium is missing: %v", err)
	}
	pages := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!doctype html><title>page</title><p>origin page</p>")
	}))
	t.Cleanup(pages.Close)
	pu, _ := url.Parse(pages.URL)
	allowed := "http://allowed.localhost:" + pu.Port()
	other := "http://other.localhost:" + pu.Port()

	e := newEdgeEnv(t, "localhost", []*route.App{{ID: "app", CORS: route.CORS{Origins: []string{allowed}}}}, nil)
	gu, _ := url.Parse(e.srv.URL)
	appURL := "http://app.localhost:" + gu.Port() + "/data"

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	script := `fetch(` + jsString(appURL) + `, {method: "PUT", headers: {"X-Custom": "1"}, body: "hi"})
		.then(r => r.text().then(b => "status " + r.status + " limit " + r.headers.get("X-RateLimit-Limit") + " body " + b))
		.catch(err => "failed: " + err)`
	fetchFrom := func(origin string) string {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatalf("navigate %s: %v", origin, err)
		}
		got, err := chromedp.Run(bctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch from %s: %v", origin, err)
		}
		return got
	}
	if got := fetchFrom(allowed); got != "status 200 limit 600 body ok" {
		t.Fatalf("from the allowed origin: %q", got)
	}
	if got := fetchFrom(other); !strings.HasPrefix(got, "failed: ") {
		t.Fatalf("from another origin: %q", got)
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

// jsString quotes s as a JavaScript string literal (s is a URL we built).
func jsString(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
