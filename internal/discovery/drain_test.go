package discovery_test

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// testHost is one run of a real host.Host, serving its challenges and its
// app on its own listener, on its own bus connection.
type testHost struct {
	addr string
	// down makes its server answer challenges 503, as a host whose app
	// is not up yet: a check fails and the next may pass.
	down atomic.Bool
	// leave ends Run, which sends the signed leave, and waits for it. The
	// server goes on serving, as a draining host's does, until closeSrv.
	leave    func()
	closeSrv func()
}

// startHost runs id with its server listening on addr ("127.0.0.1:0":
// any port; an address a previous run closed: the same one again).
func startHost(t *testing.T, url, id string, k ed25519.PrivateKey, apps []string, addr string) *testHost {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHost{addr: ln.Addr().String()}
	srv := httptest.NewUnstartedServer(nil)
	srv.Listener.Close()
	srv.Listener = ln
	th.closeSrv = srv.Close
	t.Cleanup(srv.Close)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := host.New(host.Options{Conn: nc, Cluster: cluster, HostID: id, Key: k, Apps: apps, Addr: th.addr, HeartbeatInterval: hbEvery, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	app := h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(id)) }))
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == host.ChallengePath && th.down.Load() {
			http.Error(w, "not up yet", http.StatusServiceUnavailable)
			return
		}
		app.ServeHTTP(w, r)
	})
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	th.leave = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(10 * time.Second):
				t.Error("host Run did not return after its ctx ended")
			}
		})
	}
	t.Cleanup(th.leave)
	return th
}

// A host's leave drains it even when its latest check failed: a host that
// has begun to leave refuses challenges, and a re-check that reaches it
// then must not make the gateway ignore the leave that follows.
func TestLeaveDrainsAfterAFailedCheck(t *testing.T) {
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	h := startHost(t, hostURL, "web-1", k, []string{"hello"}, "127.0.0.1:0")
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")

	h.down.Store(true)
	n := e.failures("bad_response")
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.failures("bad_response") > n && e.info("web-1").State == route.HostProvisional
	}, "re-check did not fail")

	h.leave()
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").State == route.HostDraining }, "the host's leave did not drain it after a failed check")
	if e.routable("hello", "web-1") {
		t.Fatal("draining host routable")
	}
}
