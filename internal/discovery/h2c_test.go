package discovery_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	e := start(t, "", nil)
	e.b.PutApp(&route.App{ID: "grpc", Status: route.StatusActive, Health: &route.HealthCheck{Path: "/healthz", Interval: route.Duration(50 * time.Millisecond)}})
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
	srv.Config.Handler = h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("grpc", "grpc-1") }, "h2c-only host not routable")
	// Several probe intervals: it stays routable.
	until := time.Now().Add(500 * time.Millisecond)
	tu.WaitFor(t, 2*time.Second, func() bool {
		if !e.routable("grpc", "grpc-1") {
			t.Fatalf("h2c-only host dropped: %+v", e.info("grpc-1"))
		}
		return time.Now().After(until)
	}, "")
}
