package discovery_test

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// blackhole listens on loopback and accepts connections it never
// answers: a challenge sent there holds for the whole VerifyTimeout.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// TestOtherClaimsDoNotSpareTheProbe: while other claims a bus client
// announced for a verified host are being checked, the host stays routed
// by the claims it proved; their health must still be probed. Otherwise
// anyone who keeps announcing the host's id at an address that never
// answers keeps a host whose app fails its health check in rotation.
func TestOtherClaimsDoNotSpareTheProbe(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { quiet(o); o.VerifyTimeout = 2 * time.Second })
	e.b.PutApp(&route.App{ID: "hello", Status: route.StatusActive, Health: &route.HealthCheck{Path: "/healthz", Interval: route.Duration(50 * time.Millisecond)}})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	// An anonymous client announces the id, with its public key, at two
	// addresses that never answer, in turn: each announce is of other
	// claims, so the host is always waiting on a check of them.
	anon := tu.Connect(t, e.url)
	holes := []string{blackhole(t), blackhole(t)}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(hbEvery / 2)
		defer tk.Stop()
		for i := 0; i < 200; i++ { // bounded: 10 s at most
			b, _ := json.Marshal(announce("web-1", holes[i%2], pub, "hello"))
			anon.Publish(host.AnnounceSubject(cluster), b)
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(3 * hbEvery)
	if !e.routable("hello", "web-1") {
		t.Fatalf("host taken out by announces of claims that are not its own: %+v", e.info("web-1"))
	}

	cs.setHealth(503)
	if !tu.Eventually(3*time.Second, func() bool { return !e.routable("hello", "web-1") }) {
		t.Fatalf("host failing its health check stays routed while other claims are announced: %+v", e.info("web-1"))
	}
}
