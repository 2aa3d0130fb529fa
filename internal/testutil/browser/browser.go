// Package browser starts the real headless Chromium that the dashboard
// and CORS tests drive (Debian's chromium, which make test installs). It
// is apart from internal/testutil so that chromedp is linked only into
// the tests that use a browser.
package browser

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
)

// ChromiumPath is where Debian's chromium package puts the browser.
const ChromiumPath = "/usr/bin/chromium"

// Start returns a chromedp context on a fresh headless Chromium, bounded
// by 60 s and closed when t ends. Without Chromium the test is skipped,
// except under CI, where that is a failure.
func Start(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no Chromium at %s (install the Debian chromium package; CI requires it)", ChromiumPath)
		}
		t.Fatalf("CI is set but Chromium is missing: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(ChromiumPath),
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
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	return bctx
}

// JSString quotes s as a JavaScript string literal (s is the test's own).
func JSString(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// Origins serves a blank page on loopback until t ends and returns two
// origins of it that differ by host name alone, for a page to fetch from:
// allowed.localhost and other.localhost (Chromium resolves *.localhost to
// loopback).
func Origins(t *testing.T) (allowed, other string) {
	t.Helper()
	pages := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!doctype html><title>page</title><p>origin page</p>")
	}))
	t.Cleanup(pages.Close)
	pu, _ := url.Parse(pages.URL)
	return "http://allowed.localhost:" + pu.Port(), "http://other.localhost:" + pu.Port()
}
