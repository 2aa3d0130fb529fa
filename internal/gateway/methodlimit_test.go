package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestMethodRefusalSpendsNoBudget: the method checks come before the rate
// limit (step 4 before 6), so a client whose TRACE or lower-case method
// is refused has spent nothing of the app's window: with a budget of 2,
// two GETs after five refusals are both served, and the third is the
// 429.
func TestMethodRefusalSpendsNoBudget(t *testing.T) {
	e := newEnv(t, nil)
	e.b.PutApp(&route.App{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive, RateLimit: route.RateLimit{Requests: 2}})
	var host seenRequests
	e.backend("h1", "hello", host.handler())
	httpAddr, httpsAddr := e.serve(false)
	H := " /b HTTP/1.1\r\nHost: hello." + testZone + "\r\n\r\n"
	for _, m := range []string{"TRACE", "get", "patch", "TRACE", strings.Repeat("X", 33)} {
		if a := h1Answer(t, httpAddr, false, m+H); a.status != http.StatusMethodNotAllowed && a.status != http.StatusBadRequest {
			t.Fatalf("%.40s: %d %q, want the refusal", m, a.status, a.body)
		}
	}
	if a := h2Answer(t, httpsAddr, "get", ""); a.status != http.StatusBadRequest {
		t.Fatalf("h2 get: %d %q", a.status, a.body)
	}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if a := h1Answer(t, httpAddr, false, "GET"+H); a.status != want {
			t.Fatalf("GET %d after the refusals: %d %q, want %d", i+1, a.status, a.body, want)
		}
	}
}
