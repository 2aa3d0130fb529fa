package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestWriteServedLocallyWhenOwnerHasNoHost: an app not deployed on its
// owner cluster. A request landing on a cluster that has its host is
// forwarded to the owner first (affinity), which has no host for it and
// says so, signed; no host saw the request, so even a write is served
// here, body and all, rather than failed. A host at the owner cannot fake
// that answer, and a body too large to keep is not resent.
func TestWriteServedLocallyWhenOwnerHasNoHost(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodGet} {
		t.Run(method, func(t *testing.T) {
			cs := startClusters(t, clusterSetup{ids: threeIDs})
			cl := clClient(t)
			app := ownedBy(t, "us", threeIDs)
			cs["us"].b.DeleteHost("us-h1")
			res, body := send(t, cl, cs["ap"], method, app, "/write", nil)
			if res.StatusCode != http.StatusOK || body != "served by ap" {
				t.Fatalf("%s via ap, owner us without a host = %d %q, want 200 served by ap", method, res.StatusCode, body)
			}
			if got := res.Header.Get(cluster.HeaderCluster); got != "ap" {
				t.Errorf("X-Gatehouse-Cluster = %q, want ap", got)
			}
			if _, ok := res.Header[cluster.HeaderNoHost]; ok {
				t.Errorf("the client got the owner's %s", cluster.HeaderNoHost)
			}
			seen := cs["ap"].host.requests()
			if len(seen) != 1 {
				t.Fatalf("ap's host saw %d requests, want 1", len(seen))
			}
			if want := map[string]int64{http.MethodPost: 7, http.MethodPut: 7}[method]; seen[0].Body != want {
				t.Errorf("ap's host read %d body bytes, want %d", seen[0].Body, want)
			}
		})
	}
	t.Run("the owner's host says so", func(t *testing.T) {
		cs := startClusters(t, clusterSetup{ids: threeIDs})
		cl := clClient(t)
		app := ownedBy(t, "us", threeIDs)
		cs["us"].host.mode.Store(host503NoHost)
		res, body := send(t, cl, cs["ap"], http.MethodPost, app, "/write", nil)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "host says no host") {
			t.Fatalf("POST via ap, the owner's host answering 503 = %d %q; want that answer: a write the owner's host may have done is never resent", res.StatusCode, body)
		}
		if _, ok := res.Header[cluster.HeaderNoHost]; ok {
			t.Errorf("the client got the host's %s", cluster.HeaderNoHost)
		}
		if n := len(cs["ap"].host.requests()); n != 0 {
			t.Errorf("ap's host saw %d requests: the write was resent", n)
		}
	})
	t.Run("a body too large to keep", func(t *testing.T) {
		cs := startClusters(t, clusterSetup{ids: threeIDs})
		cl := clClient(t)
		app := ownedBy(t, "us", threeIDs)
		cs["us"].b.DeleteHost("us-h1")
		req, err := http.NewRequest(http.MethodPost, cs["ap"].url+"/write", strings.NewReader(strings.Repeat("x", maxKeptBody+1)))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = app + "." + testZone
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a %d-byte POST via ap, owner us without a host = %d, want the owner's 503", maxKeptBody+1, res.StatusCode)
		}
		if n := len(cs["ap"].host.requests()); n != 0 {
			t.Errorf("ap's host saw %d requests", n)
		}
	})
}

// TestWriteServedLocallyWhenOwnerHostsCannotTakeIt: the owner has a host
// for the app, but none it can route to (unhealthy, draining) or none it
// could connect to. No byte of the request reached a host there, so the
// owner says so, signed, as when it has no host at all, and the cluster
// that forwarded the write serves it with its own healthy host. The owner
// used to answer its 502, which the client got.
func TestWriteServedLocallyWhenOwnerHostsCannotTakeIt(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(c *testCluster)
	}{
		{"unhealthy", func(c *testCluster) { setHostState(c, route.HostUnhealthy) }},
		{"draining", func(c *testCluster) { setHostState(c, route.HostDraining) }},
		{"refusing connections", func(c *testCluster) { c.host.kill() }},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodPost, http.MethodDelete} {
			t.Run(tt.name+" "+method, func(t *testing.T) {
				cs := startClusters(t, clusterSetup{ids: threeIDs})
				cl := clClient(t)
				app := ownedBy(t, "us", threeIDs)
				tt.spoil(cs["us"])
				res, body := send(t, cl, cs["ap"], method, app, "/write", nil)
				if res.StatusCode != http.StatusOK || body != "served by ap" {
					t.Fatalf("%s via ap, owner us's host %s = %d %q, want 200 served by ap", method, tt.name, res.StatusCode, body)
				}
				if _, ok := res.Header[cluster.HeaderNoHost]; ok {
					t.Errorf("the client got the owner's %s", cluster.HeaderNoHost)
				}
				if n := len(cs["ap"].host.requests()); n != 1 {
					t.Fatalf("ap's host saw %d requests, want 1", n)
				}
			})
		}
	}
}

// setHostState puts c's one host in state s.
func setHostState(c *testCluster, s route.HostState) {
	u, _ := url.Parse(c.host.srv.URL)
	c.b.SetHost(&route.Host{ID: c.id + "-h1", Apps: append(slices.Clone(clApps), "gone"), Addr: u.Host, Scheme: "http", URL: u, State: s})
}

// TestServedLocallyWhenOwnerDoesNotKnowTheApp: with separate stores the
// owner need not know an app its peers serve. A verified forward for it
// gets the owner's signed no-host 503, not its 404, and the cluster that
// forwarded it serves it, a write included. Those forwards are not
// charged to the owner's unknown-host budget (here 1 a minute): the
// forwarding gateway is no name scanner. A client asking the owner
// directly still gets the 404.
func TestServedLocallyWhenOwnerDoesNotKnowTheApp(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs, edit: func(c *testCluster, o *Options) {
		o.Edge.UnknownRateLimit = 1
	}})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	cs["us"].b.DeleteApp(app)
	for i, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodGet} {
		res, body := send(t, cl, cs["ap"], method, app, "/write", nil)
		if res.StatusCode != http.StatusOK || body != "served by ap" {
			t.Fatalf("%d: %s via ap, owner us without the app = %d %q, want 200 served by ap", i, method, res.StatusCode, body)
		}
		if _, ok := res.Header[cluster.HeaderNoHost]; ok {
			t.Errorf("the client got the owner's %s", cluster.HeaderNoHost)
		}
	}
	if n := len(cs["ap"].host.requests()); n != 4 {
		t.Fatalf("ap's host saw %d requests, want 4", n)
	}
	res, _ := send(t, cl, cs["us"], http.MethodGet, app, "/", nil)
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET at us directly = %d, want its 404", res.StatusCode)
	}
}

// TestOwnerNoHostAnswerIgnoresItsFailover: cluster.failover: false on the
// owner turns off its own failover to peers, not its answer to a forward.
// With no host it can use it still says so, signed, and the cluster that
// forwarded a write serves it with its own host. The owner used to answer
// such a forward unsigned (its proxy's 503 or 502), which the client got.
func TestOwnerNoHostAnswerIgnoresItsFailover(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(c *testCluster)
	}{
		{"no host", func(c *testCluster) { c.b.DeleteHost(c.id + "-h1") }},
		{"unhealthy", func(c *testCluster) { setHostState(c, route.HostUnhealthy) }},
		{"refusing connections", func(c *testCluster) { c.host.kill() }},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodPost, http.MethodDelete} {
			t.Run(tt.name+" "+method, func(t *testing.T) {
				cs := startClusters(t, clusterSetup{ids: threeIDs, edit: func(c *testCluster, o *Options) {
					o.Cluster.NoFailover = c.id == "us"
				}})
				cl := clClient(t)
				app := ownedBy(t, "us", threeIDs)
				tt.spoil(cs["us"])
				res, body := send(t, cl, cs["ap"], method, app, "/write", nil)
				if res.StatusCode != http.StatusOK || body != "served by ap" {
					t.Fatalf("%s via ap, owner us (failover off) %s = %d %q, want 200 served by ap", method, tt.name, res.StatusCode, body)
				}
				if got := res.Header.Get(cluster.HeaderCluster); got != "ap" {
					t.Errorf("X-Gatehouse-Cluster = %q, want ap", got)
				}
				if _, ok := res.Header[cluster.HeaderNoHost]; ok {
					t.Errorf("the client got the owner's %s", cluster.HeaderNoHost)
				}
				if n := len(cs["ap"].host.requests()); n != 1 {
					t.Fatalf("ap's host saw %d requests, want 1", n)
				}
			})
		}
	}
}
