package gatehouse

import (
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// appLines counts /metrics lines labelled app=app.
func appLines(t *testing.T, r *running, app string) int {
	t.Helper()
	code, body := mgmtGet(t, r.g.Addrs().Management, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return strings.Count(body, `app="`+app+`"`)
}

// TestDeletedAppLeavesMetrics: an app deleted through the API leaves
// /metrics once the table's sweep has seen it gone for its grace; an app
// still there keeps its series.
func TestDeletedAppLeavesMetrics(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	r := startWith(t, testConfig(t), func(g *Gatehouse) {
		g.forgetGrace, g.forgetEvery = 300*time.Millisecond, 50*time.Millisecond
	})
	for _, app := range []string{"gone", "kept"} {
		if code, body := r.control(t, "PUT", "/api/v3/apps/"+app, `{}`); code != 200 {
			t.Fatalf("put %s: %d %s", app, code, body)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return r.g.Live().Load().App("kept") != nil }, "apps not in the table")
	for _, app := range []string{"gone", "kept"} {
		for range 3 {
			r.get(t, app+".test.local", "/", nil) // no host: 503, counted with an upstream error
		}
	}
	gone, kept := appLines(t, r, "gone"), appLines(t, r, "kept")
	if gone < 17 || kept != gone {
		t.Fatalf("series before the delete: gone %d, kept %d; want the same, at least 17", gone, kept)
	}
	t.Logf("/metrics lines with app=\"gone\" before the delete: %d", gone)
	if code, body := r.control(t, "DELETE", "/api/v3/apps/gone", ""); code != 200 && code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return appLines(t, r, "gone") == 0 }, "the deleted app's series stayed on /metrics")
	if n := appLines(t, r, "kept"); n != kept {
		t.Errorf("kept's series: %d lines, want %d", n, kept)
	}
}
