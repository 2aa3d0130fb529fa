package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gatehouse-dev/gatehouse/internal/testutil/browser"
)

// TestRetryAfterShownAsSent: the page says a refusal's Retry-After in
// seconds only when it is seconds. An HTTP-date (RFC 9110 §10.2.3, as a
// proxy in front of the management listener may send) is shown as a
// date, not as "… GMT s", and a value that is neither is left out.
func TestRetryAfterShownAsSent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ retryAfter, want, not string }{
		{"30", "(Retry-After: 30 s)", ""},
		{"Wed, 21 Oct 2015 07:28:00 GMT", "(Retry-After: Wed, 21 Oct 2015 07:28:00 GMT)", "GMT s"},
		{"soon<b>", "", "Retry-After"},
	} {
		t.Run(tt.retryAfter, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.Handle("/", Handler())
			mux.Handle("/dashboard/", Handler())
			mux.HandleFunc("/api/v3/", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", tt.retryAfter)
				w.WriteHeader(http.StatusTooManyRequests)
				w.Write([]byte(`{"status":429,"title":"Too Many Requests","detail":"too many wrong tokens from this address; retry later"}`))
			})
			mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(`{"status":"ready","active_connections":0}`))
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			bctx := browser.Start(t)
			if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
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
			eval(`document.querySelector("#token").value = "some-token"; document.querySelector("#load").click(); "ok"`)
			var shown string
			for shown = eval(`document.querySelector("#control-error").textContent`); !strings.Contains(shown, "429"); shown = eval(`document.querySelector("#control-error").textContent`) {
				if time.Now().After(deadline) {
					t.Fatalf("the control error shows %q, want a 429", shown)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !strings.Contains(shown, tt.want) {
				t.Errorf("shows %q, want it to contain %q", shown, tt.want)
			}
			if tt.not != "" && strings.Contains(shown, tt.not) {
				t.Errorf("shows %q, which contains %q", shown, tt.not)
			}
		})
	}
}
