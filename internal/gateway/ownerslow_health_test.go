package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestSlowHostAtOwnerCoolsDown: forwards the owner answers 504 itself,
// before the proxy's own head timeout, still count against the host
// that did not answer them, as that timeout's do (docs/config.md,
// cluster.deadline: three requests in a row without an answer and the
// host cools down, its share going to its siblings). Taken for the
// client leaving, a hung host that only forwarded requests reach was
// never cooled down, and gatehouse_upstream_errors_total said
// reason="canceled", a client gone, for each.
func TestSlowHostAtOwnerCoolsDown(t *testing.T) {
	const deadline = time.Second
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: deadline, edit: func(c *testCluster, o *Options) {
		// As gatehouse wires it.
		o.Proxy = proxy.Options{DialTimeout: time.Second, ResponseHeaderTimeout: deadline}
	}})
	us := cs["us"]
	u, _ := url.Parse(us.host.srv.URL)
	health := new(route.Health)
	us.b.SetHost(&route.Host{ID: "us-h1", Apps: append(slices.Clone(clApps), "gone"), Addr: u.Host, Scheme: "http", URL: u, State: route.HostVerified, Health: health})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	us.host.mode.Store(hostHang)
	for i := range 3 {
		res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil)
		if res.StatusCode != http.StatusOK || body != "served by eu" {
			t.Fatalf("GET %d with the owner's host hung = %d %q, want served by eu", i, res.StatusCode, body)
		}
	}
	if !health.Degraded(time.Now()) {
		t.Errorf("the owner's host left 3 forwards in a row unanswered and is not cooling down")
	}
	m := us.gw.Metrics().UpstreamErrors
	if n := promtest.ToFloat64(m.WithLabelValues(app, metrics.ReasonCanceled)); n != 0 {
		t.Errorf("upstream errors reason=canceled = %v at the owner, want 0: no client went away", n)
	}
	if n := promtest.ToFloat64(m.WithLabelValues(app, metrics.ReasonTimeout)); n != 3 {
		t.Errorf("upstream errors reason=timeout = %v at the owner, want 3", n)
	}
}
