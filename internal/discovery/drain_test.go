package discovery_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
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
// any port; an address a previous run closed: the same one again), down
// from the start if down.
func startHost(t *testing.T, url, id string, k ed25519.PrivateKey, apps []string, addr string, down bool) *testHost {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHost{addr: ln.Addr().String()}
	th.down.Store(down)
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
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	h := startHost(t, hostURL, "web-1", k, []string{"hello"}, "127.0.0.1:0", false)
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

// Announces are unsigned and anyone on the bus may send one, so a copy of
// a leaving host's announce must not put it back into rotation: it only
// starts a challenge, which a leaving host fails, and the host stays
// draining. The host restarted at the same address is routable again
// within a few heartbeats, even if its first challenge fails (its app not
// up yet) and whatever copies came before.
func TestDrainEndsOnlyThroughAPassingChallenge(t *testing.T) {
	t.Parallel()
	for _, firstFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart's first check fails=%v", firstFails), func(t *testing.T) {
			gatewayURL, hostURL := startGatewayBus(t)
			e := start(t, gatewayURL, func(o *discovery.Options) {
				// No heartbeats once the host leaves; it must stay tracked
				// (and drained) while the test watches.
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
			h1 := startHost(t, hostURL, "web-1", k, []string{"hello"}, "127.0.0.1:0", false)
			var raw []byte // the host's own announce, byte for byte
			select {
			case m := <-anns:
				raw = m.Data
			case <-time.After(5 * time.Second):
				t.Fatal("host did not announce")
			}
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")
			h1.leave()
			tu.WaitFor(t, 5*time.Second, func() bool {
				return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1")
			}, "host's leave did not drain it")

			anon := tu.Connect(t, hostURL)
			var a host.Announce
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatal(err)
			}
			later := a
			later.TS += 30
			elsewhere := a
			elsewhere.Addr = tu.FreeAddr(t)
			for _, c := range []struct {
				name   string
				body   any
				reason string // of the failed check it starts
			}{
				{"exact copy", raw, "bad_response"},
				{"copy with a later ts", later, "bad_response"},
				{"another addr", elsewhere, "unreachable"},
			} {
				b, ok := c.body.([]byte)
				if !ok {
					b, _ = json.Marshal(c.body)
				}
				n := e.failures(c.reason)
				if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
					t.Fatal(err)
				}
				tu.WaitFor(t, 10*time.Second, func() bool {
					if e.routable("hello", "web-1") {
						t.Fatalf("%s: a copied announce put the leaving host back into rotation", c.name)
					}
					return e.failures(c.reason) > n
				}, c.name+": the announce started no check that failed as "+c.reason)
				if s := e.info("web-1").State; s != route.HostDraining || e.routable("hello", "web-1") {
					t.Fatalf("%s: state %s after the failed check, want draining and not routable", c.name, s)
				}
			}

			// The host restarts at the same address.
			h1.closeSrv()
			n := e.failures("bad_response")
			h2 := startHost(t, hostURL, "web-1", k, []string{"hello"}, h1.addr, firstFails)
			if firstFails {
				tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("bad_response") > n }, "restarted host's first check did not fail")
				if e.routable("hello", "web-1") {
					t.Fatal("routable after a failed check")
				}
				h2.down.Store(false)
			}
			up := time.Now()
			tu.WaitFor(t, 30*hbEvery, func() bool {
				return e.routable("hello", "web-1") && e.info("web-1").State == route.HostVerified
			}, "restarted host not routable again within 30 heartbeat intervals")
			t.Logf("routable %v after it could answer", time.Since(up).Round(time.Millisecond))
			if hi := e.info("web-1"); hi.Addr != h2.addr || hi.LastError != "" {
				t.Fatalf("restarted host: addr %s, last error %q", hi.Addr, hi.LastError)
			}
		})
	}
}

// A restarted host's announce may reach the gateway before the previous
// run's leave (they come over two connections): the leave drains it, and
// the new run, which heartbeats, must not stay drained. A heartbeat of a
// draining host is answered "announce", and its check ends the drain;
// also while a client without credentials floods heartbeats for the id,
// which must not take the host's own replies.
func TestRestartedHostBackWhenTheOldLeaveComesLate(t *testing.T) {
	t.Parallel()
	for _, flood := range []bool{false, true} {
		t.Run(map[bool]string{false: "quiet", true: "heartbeat flood"}[flood], func(t *testing.T) {
			gatewayURL, hostURL := startGatewayBus(t)
			e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second })
			k, pub := newKey(t)
			e.keys.enrol("web-1", pub, "hello")

			// The first run, answering challenges and announcing by hand.
			old := newChallengeServer(t, "web-1", k)
			e.publish(host.KindAnnounce, announce("web-1", old.addr, pub, "hello"))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "first run not routable")
			verifiedAt := e.info("web-1").VerifiedAt

			// The second run at the same address announces and passes.
			old.Close()
			startHost(t, hostURL, "web-1", k, []string{"hello"}, old.addr, false)
			tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").VerifiedAt.After(verifiedAt) }, "second run not checked")
			if flood {
				floodHeartbeats(t, tu.Connect(t, hostURL), "web-1")
			}

			// Then the first run's leave arrives.
			ts := time.Now().Unix()
			e.publish(host.KindLeave, host.Leave{HostID: "web-1", TS: ts, Sig: host.SignLeave(k, "web-1", ts)})
			tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").State == route.HostDraining }, "late leave did not drain")

			tu.WaitFor(t, 30*hbEvery, func() bool {
				return e.routable("hello", "web-1") && e.info("web-1").State == route.HostVerified
			}, "the running host stayed drained after its previous run's leave")
		})
	}
}
