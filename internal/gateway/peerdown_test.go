package gateway

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// blackhole returns a loopback address whose connects hang: a listener
// with a backlog of zero that never accepts, its one queue slot taken.
// Linux drops the SYNs of a listener whose accept queue is full, as a
// firewall that drops packets would.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			return addr // the queue is full: this connect hung
		}
		t.Cleanup(func() { c.Close() })
		if i == 8 {
			t.Fatal("the listener's queue never filled")
		}
	}
}

// TestUnreachablePeerCoolsDown: a cluster that stays active in the set (it
// announces, or its /healthz answers) but whose gateway cannot be reached
// at its URL. Every forward to it used to wait out the connect timeout, so
// with a cluster deadline under that timeout every request for its apps
// got 504. A failed connect now cools the peer down and the gateway serves
// locally meanwhile; once it can be reached again it is the owner again.
func TestUnreachablePeerCoolsDown(t *testing.T) {
	hole := "http://" + blackhole(t)
	var cut atomic.Bool
	cut.Store(true)
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: time.Second, edit: func(c *testCluster, o *Options) {
		if c.id != "eu" {
			return
		}
		members := o.Cluster.Members
		o.Cluster.Members = func() cluster.Set {
			set := members()
			if !cut.Load() {
				return set
			}
			return withPeerURL(set, "us", hole)
		}
	}})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)

	res, _ := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil)
	if res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("first GET while us hangs = %d, want 504 (the connect outlasts the 1 s deadline)", res.StatusCode)
	}
	var last string
	testutil.WaitFor(t, 15*time.Second, func() bool {
		res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil)
		last = res.Status + " " + body
		return res.StatusCode == 200 && body == "served by eu"
	}, "eu never stopped waiting for the unreachable owner")
	// Cooling down, us costs the next requests nothing: each is served
	// here, and a write too (the owner got none of it).
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if res, body := send(t, cl, cs["eu"], m, app, "/", nil); res.StatusCode != 200 || body != "served by eu" {
			t.Fatalf("%s while us cools down = %d %q (before: %s)", m, res.StatusCode, body, last)
		}
	}
	if n := len(cs["us"].host.requests()); n != 0 {
		t.Fatalf("us's host saw %d requests", n)
	}

	// Reachable again: once its cool-down is over us serves its apps.
	cut.Store(false)
	testutil.WaitFor(t, 40*time.Second, func() bool {
		res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil)
		return res.StatusCode == 200 && body == "served by us"
	}, "us never became the owner again")
}

// TestHungPeerCoolsDown: a peer gateway that accepts connections and never
// answers, still active in the set (its probes have not missed three
// times yet, or it is listed as up). A forward to it ends at the cluster
// deadline: 504, a warning, and a cool-down, so the next requests for its
// apps are served here at once instead of each waiting out the deadline
// too. Before, every one of them got 504, and nothing was logged.
func TestHungPeerCoolsDown(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(hung.Close)
	var logs testutil.SyncBuffer
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: time.Second, edit: func(c *testCluster, o *Options) {
		if c.id != "eu" {
			return
		}
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		members := o.Cluster.Members
		o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", hung.URL) }
	}})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)

	if res, _ := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil); res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("first GET while us hangs = %d, want 504", res.StatusCode)
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodGet} {
		start := time.Now()
		res, body := send(t, cl, cs["eu"], m, app, "/", nil)
		if res.StatusCode != 200 || body != "served by eu" {
			t.Fatalf("%s right after = %d %q, want served by eu while us cools down", m, res.StatusCode, body)
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("%s took %s: it waited for the hung peer", m, took)
		}
	}
	const warning = `"msg":"gateway: a peer cluster did not answer a forward within cluster.deadline`
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("%d warnings about the hung peer, want 1:\n%s", n, logs.String())
	}
	if n := promtest.ToFloat64(cs["eu"].gw.Metrics().ClusterForwards.WithLabelValues("us", "owner", "deadline")); n != 1 {
		t.Fatalf("deadline forwards counted %v, want 1", n)
	}
}

// withPeerURL is set with peer id's URL replaced by url: a gateway whose
// idea of where that peer is differs from the truth.
func withPeerURL(set cluster.Set, id, url string) cluster.Set {
	ps := set.Peers()
	out := make([]cluster.Peer, len(ps))
	for i, p := range ps {
		if p.ID == id {
			p.URL = url
		}
		out[i] = p
	}
	return cluster.NewSet(set.Self(), out)
}
