package discovery_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestAppWhoseOnlyHostLeftIsUnavailableAtOnce: when the only host of an
// app leaves (host.Host's leave on shutdown, as the sidecar sends on
// SIGTERM), requests get the 503 of an app with no host from the leave
// on, not a 502 "no healthy host" until host_ttl removes the host: a host
// that has left is gone, and a drain is no outage of a host that might
// come back. The host's server stays up, so nothing but the leave says so.
func TestAppWhoseOnlyHostLeftIsUnavailableAtOnce(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { o.HostTTL = time.Minute }) // far past the test: only the leave acts
	e.b.Replace(route.State{Zones: []*route.Zone{{Name: "apps.test"}},
		Apps: []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive}}})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	_, stop := runHost(t, e.url, "web-1", k, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable within 5s")

	p, err := proxy.New(proxy.Options{ClusterID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tbl := e.live.Load()
		rq := &route.Request{ID: "rid", Table: tbl, Match: tbl.Lookup("hello.apps.test"), ClientIP: netip.MustParseAddr("192.0.2.7")}
		p.ServeHTTP(w, r.WithContext(route.WithRequest(r.Context(), rq)))
	}))
	t.Cleanup(srv.Close)
	get := func() (int, string) {
		t.Helper()
		res, err := srv.Client().Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if s, b := get(); s != http.StatusOK || b != "web-1" {
		t.Fatalf("before the leave: %d %q, want 200 web-1", s, b)
	}

	stop() // leave
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").State == route.HostDraining }, "not draining after leave")
	s, b := get()
	if s != http.StatusServiceUnavailable {
		t.Fatalf("after the only host left: %d %s, want 503 as for an app with no host", s, b)
	}
	if _, ok := e.d.Host("web-1"); !ok {
		t.Fatal("the host was removed already: the test shows nothing of the leave")
	}
}
