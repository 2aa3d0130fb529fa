package gatehouse

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestManagementAPIWhileStartingNotStored: before the API exists (the
// start waits for its bus) the management listener answers its paths
// 503 itself, and that answer, like every answer of the API (DESIGN §7),
// says no cache may keep it: it went out without Cache-Control.
func TestManagementAPIWhileStartingNotStored(t *testing.T) {
	t.Parallel()
	g := &Gatehouse{reg: prometheus.NewRegistry(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := g.managementMux(&atomic.Pointer[http.Handler]{})
	for _, path := range []string{"/api/v3/apps", "/api/v3/dns/resolve?name=x"} {
		req := httptest.NewRequest("GET", "http://127.0.0.1:9180"+path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
			t.Fatalf("GET %s while starting: %d, Retry-After %q; want 503 with Retry-After: 1", path, rec.Code, rec.Header().Get("Retry-After"))
		}
		if got := rec.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("GET %s while starting: Cache-Control %q, want no-store", path, got)
		}
	}
}

// TestPublicWhileStartingNotStored: before the routing table is loaded a
// public listener answers every host 503 itself, api.{zone} among them,
// whose answers no cache may keep (DESIGN §7); nor should any cache keep
// a 503 that lasts until the bus answers. It went out without
// Cache-Control.
func TestPublicWhileStartingNotStored(t *testing.T) {
	t.Parallel()
	h := delegate(&atomic.Pointer[http.Handler]{}, "eu-1")
	for _, target := range []string{"http://api.apps.example.com/api/v3/apps", "http://shop.apps.example.com/", "http://api.apps.example.com/healthz"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("X-Gatehouse-Cluster") != "eu-1" {
			t.Fatalf("GET %s while starting: %d, Retry-After %q, X-Gatehouse-Cluster %q; want 503, 1, eu-1", target, rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-Gatehouse-Cluster"))
		}
		if got := rec.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("GET %s while starting: Cache-Control %q, want no-store", target, got)
		}
	}
}
