package gateway

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestForgetDeletedApp: an app deleted from the table leaves /metrics a
// grace after the table's sweep saw it gone — its requests, latency,
// upstream errors, policy denials and rate limiting — and its
// round-robin counter goes; an app still in the table keeps everything.
func TestForgetDeletedApp(t *testing.T) {
	limited := route.RateLimit{Requests: 4, Window: route.Duration(time.Minute)}
	deny := []route.PolicyRule{{Action: "deny", Path: "/admin/*"}}
	e := newEdgeEnv(t, "apps.test", []*route.App{
		{ID: "old", RateLimit: limited, Policy: deny},
		{ID: "keep", RateLimit: limited, Policy: deny},
	}, nil)
	for _, app := range []string{"old", "keep"} {
		for _, q := range []struct {
			path   string
			status int
		}{{"/", 200}, {"/admin/x", 403}} {
			if res, body := e.do(edgeReq{app: app, path: q.path}); res.StatusCode != q.status {
				t.Fatalf("%s %s: %d, want %d: %s", app, q.path, res.StatusCode, q.status, body)
			}
		}
		e.b.DeleteHost("h-" + app)
		for _, status := range []int{503, 503, 429} {
			if res, body := e.do(edgeReq{app: app, path: "/"}); res.StatusCode != status {
				t.Fatalf("%s without hosts: %d, want %d: %s", app, res.StatusCode, status, body)
			}
		}
	}
	families := []string{"gatehouse_http_requests_total", "gatehouse_http_request_duration_seconds",
		"gatehouse_upstream_errors_total", "gatehouse_policy_denied_total", "gatehouse_rate_limited_total"}
	keep := testutil.AppSeries(t, e.reg, "keep")
	old := testutil.AppSeries(t, e.reg, "old")
	for _, f := range families {
		if old[f] == 0 || keep[f] == 0 {
			t.Fatalf("before the delete: no %s series (old %v, keep %v)", f, old, keep)
		}
	}
	holds := func(app string) bool {
		found := false
		e.gw.proxy.HeldApps(func(id string) bool { found = found || id == app; return true })
		return found
	}
	if !holds("old") {
		t.Fatal("no round-robin counter for old before the delete")
	}

	e.b.DeleteApp("old")
	f := route.NewForget(e.live, time.Minute, e.gw)
	t0 := time.Now()
	f.Sweep(t0)
	if got := testutil.AppSeries(t, e.reg, "old"); len(got) == 0 {
		t.Fatal("old's series went at once: no grace for requests in flight")
	}
	t.Logf("old: %v before the sweep", old)
	if n := f.Sweep(t0.Add(time.Minute)); n != 1 {
		t.Errorf("sweep forgot %d apps, want 1", n)
	}
	if got := testutil.AppSeries(t, e.reg, "old"); len(got) != 0 {
		t.Errorf("old's series after the sweep: %v", got)
	}
	if holds("old") {
		t.Error("old's round-robin counter kept after the sweep")
	}
	if got := testutil.AppSeries(t, e.reg, "keep"); len(got) != len(keep) {
		t.Errorf("keep's series = %v, want %v", got, keep)
	} else {
		for name, n := range keep {
			if got[name] != n {
				t.Errorf("keep's %s series = %d, want %d", name, got[name], n)
			}
		}
	}
	if !holds("keep") {
		t.Error("keep's round-robin counter forgotten")
	}
}
