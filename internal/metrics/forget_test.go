package metrics

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestForgetApp: a forgotten app's series leave /metrics, whatever status
// classes, methods and upstream error reasons it recorded; other apps and
// the labels of requests that reached no app stay; a request recorded
// after the forget counts from zero in series that are exported.
func TestForgetApp(t *testing.T) {
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace, "BREW"}
	tests := []struct {
		name   string
		forget string
		gone   []string // apps with no series left
		kept   []string // apps whose series all stay
	}{
		{"app", "old", []string{"old"}, []string{"other", AppUnknown, AppAPI, AppNone}},
		{"unknown app", "never", nil, []string{"old", "other", AppUnknown, AppAPI, AppNone}},
		{"reserved label", AppUnknown, nil, []string{"old", "other", AppUnknown, AppAPI, AppNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s, err := New(reg)
			if err != nil {
				t.Fatal(err)
			}
			before := map[string]map[string]int{}
			for _, app := range []string{"old", "other", AppUnknown, AppAPI, AppNone} {
				for _, code := range []int{101, 200, 301, 404, 502} {
					for _, m := range methods {
						s.App(app).Request(code, m, time.Millisecond)
					}
				}
				for _, r := range reasons {
					s.UpstreamErrors.WithLabelValues(app, r).Inc()
				}
				before[app] = testutil.AppSeries(t, reg, app)
			}
			// 50 requests series, 17 of the histogram (15 buckets, sum,
			// count) and 6 upstream error reasons.
			if n := before["old"]["gatehouse_http_requests_total"]; n != 50 {
				t.Fatalf("requests series before = %d, want 50", n)
			}
			s.ForgetApp(tt.forget)
			for _, app := range tt.gone {
				if got := testutil.AppSeries(t, reg, app); len(got) != 0 {
					t.Errorf("%s: series after ForgetApp: %v", app, got)
				}
				held := false
				s.HeldApps(func(id string) bool { held = held || id == app; return true })
				if held {
					t.Errorf("%s: still held after ForgetApp", app)
				}
				s.App(app).Request(200, "GET", time.Millisecond)
				if got := testutil.AppSeries(t, reg, app)["gatehouse_http_requests_total"]; got != 1 {
					t.Errorf("%s: requests series after a new request = %d, want 1", app, got)
				}
			}
			for _, app := range tt.kept {
				got := testutil.AppSeries(t, reg, app)
				for name, n := range before[app] {
					if got[name] != n {
						t.Errorf("%s: %s series = %d, want %d", app, name, got[name], n)
					}
				}
			}
		})
	}
}

// TestHeldApps: the apps recorded, without the labels of requests that
// reached no app (no table holds them, so none may be forgotten).
func TestHeldApps(t *testing.T) {
	s, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"a", "b", AppUnknown, AppAPI, AppNone} {
		s.App(app).Request(200, "GET", 0)
	}
	got := map[string]bool{}
	s.HeldApps(func(id string) bool { got[id] = true; return true })
	if len(got) != 2 || !got["a"] || !got["b"] {
		t.Fatalf("HeldApps = %v, want a and b", got)
	}
}

// TestLabelSets: ForgetApp deletes by full label values, so the sets it
// walks must hold every value Class, Method and the reasons produce.
func TestLabelSets(t *testing.T) {
	in := func(set []string, v string) bool {
		for _, s := range set {
			if s == v {
				return true
			}
		}
		return false
	}
	for _, code := range []int{0, 100, 199, 200, 299, 300, 399, 400, 499, 500, 599, 999} {
		if c := Class(code); !in(classes[:], c) {
			t.Errorf("Class(%d) = %s, not in classes", code, c)
		}
	}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "BREW", ""} {
		if f := Method(m); !in(methods[:], f) {
			t.Errorf("Method(%q) = %s, not in methods", m, f)
		}
	}
}
