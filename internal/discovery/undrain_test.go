package discovery_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// hostAt runs a real host.Host for id with its server listening on addr
// ("127.0.0.1:0": any port), on its own bus connection to url. leave ends
// Run, which sends the signed leave, and waits for it; the server keeps
// serving, as a draining host's does, until closeSrv.
func hostAt(t *testing.T, url, id string, k ed25519.PrivateKey, apps []string, addr string) (got string, leave, closeSrv func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Listener.Close()
	srv.Listener = ln
	t.Cleanup(srv.Close)
	got = ln.Addr().String()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h, err := host.New(host.Options{Conn: nc, Cluster: cluster, HostID: id, Key: k, Apps: apps, Addr: got, HeartbeatInterval: hbEvery, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(id)) }))
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	stopped := false
	leave = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("host Run did not return after its ctx ended")
		}
	}
	t.Cleanup(leave)
	return got, leave, srv.Close
}

// Announces are unsigned and anyone on the bus may send one, so a copy of
// a leaving host's announce must not put it back into rotation: it only
// starts a verification, which the leaving host fails (it answers 503),
// and the host stays draining. The same host restarted at the same
// address announces, passes, and is routed again.
func TestAnnounceDoesNotUndrainWithoutChallenge(t *testing.T) {
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) {
		// No heartbeats once the host leaves; it must stay tracked (and
		// drained) while the test watches.
		o.MissedHeartbeats, o.HostTTL = 20, 20*time.Second
	})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")

	anns := make(chan *nats.Msg, 64)
	sub, err := e.nc.ChanSubscribe(host.AnnounceSubject(cluster), anns)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	addr, leave, closeSrv := hostAt(t, hostURL, "web-1", k, []string{"hello"}, "127.0.0.1:0")
	var raw []byte // the host's own announce, byte for byte
	select {
	case m := <-anns:
		raw = m.Data
	case <-time.After(5 * time.Second):
		t.Fatal("host did not announce")
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")

	leave()
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1")
	}, "host's leave did not drain it")

	anon, err := nats.Connect(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	var a host.Announce
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	later := a
	later.TS += 30
	elsewhere := a
	elsewhere.Addr = tu.FreeAddr(t)
	cases := []struct {
		name   string
		body   any
		reason string // of the failed verification it starts
	}{
		{"exact copy", raw, "bad_response"},
		{"copy with a later ts", later, "bad_response"},
		{"another addr", elsewhere, "unreachable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, ok := c.body.([]byte)
			if !ok {
				b, _ = json.Marshal(c.body)
			}
			n := e.failures(c.reason)
			if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
				t.Fatal(err)
			}
			if err := anon.Flush(); err != nil {
				t.Fatal(err)
			}
			tu.WaitFor(t, 10*time.Second, func() bool {
				if e.routable("hello", "web-1") {
					t.Fatal("a copied announce put the leaving host back into rotation")
				}
				return e.failures(c.reason) > n
			}, "the announce started no verification that failed as "+c.reason)
			if s := e.info("web-1").State; s != route.HostDraining || e.routable("hello", "web-1") {
				t.Fatalf("state %s after the failed check, want draining and not routable", s)
			}
		})
	}

	// The host restarts at the same address: its announce, and the
	// challenge it answers, bring it back.
	closeSrv()
	_, _, _ = hostAt(t, hostURL, "web-1", k, []string{"hello"}, addr)
	tu.WaitFor(t, 10*time.Second, func() bool {
		return e.routable("hello", "web-1") && e.info("web-1").State == route.HostVerified
	}, "restarted host not routable again")
	if hi := e.info("web-1"); hi.Addr != addr || hi.LastError != "" {
		t.Fatalf("restarted host: addr %s, last error %q", hi.Addr, hi.LastError)
	}
}
