package discovery_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A host that serves only HTTP/2 cleartext, the backend the h2c scheme
// exists for and the protocol the proxy speaks to it, verifies and passes
// its app's health probe.
func TestH2COnlyHost(t *testing.T) {
	t.Parallel()
	e := start(t, "", nil)
	// The interval is also each probe's timeout: 50 ms failed probes on a
	// loaded machine under -race, a full second does not.
	e.b.PutApp(&route.App{ID: "grpc", Status: route.StatusActive, Health: &route.HealthCheck{Path: "/healthz", Interval: route.Duration(time.Second)}})
	k, pub := newKey(t)
	e.keys.enrol("grpc-1", pub, "grpc")

	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := host.New(host.Options{Conn: nc, Cluster: cluster, HostID: "grpc-1", Key: k, Apps: []string{"grpc"},
		Addr: srv.Listener.Addr().String(), Scheme: host.SchemeH2C, HeartbeatInterval: hbEvery, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var probes atomic.Int32
	srv.Config.Handler = h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			probes.Add(1)
		}
	}))
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("grpc", "grpc-1") }, "h2c-only host not routable")
	// Several probes reach it (over h2c: the server speaks nothing else),
	// and it stays routable throughout and after them.
	tu.WaitFor(t, 20*time.Second, func() bool {
		if !e.routable("grpc", "grpc-1") {
			t.Fatalf("h2c-only host dropped: %+v", e.info("grpc-1"))
		}
		return probes.Load() >= 3
	}, "the health probe did not reach the h2c-only host 3 times")
	if !e.routable("grpc", "grpc-1") {
		t.Fatalf("h2c-only host dropped after its probes: %+v", e.info("grpc-1"))
	}
}
