package discovery_test

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// slowChallenger answers challenges as id at its own address, signing with
// k, but holds each one until the test lets it go: held receives when a
// challenge arrives, and a send on answer answers it.
func slowChallenger(t *testing.T, id string, k ed25519.PrivateKey) (addr string, held <-chan struct{}, answer chan<- struct{}) {
	t.Helper()
	h, a := make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		h <- struct{}{}
		select {
		case <-a:
		case <-r.Context().Done():
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, id, addr, req.Nonce, req.Gateway)})
	}))
	addr = srv.Listener.Addr().String()
	t.Cleanup(srv.Close)
	return addr, h, a
}

// An announce repeated while its challenge is under way, by the host or
// by anyone copying it, does not throw that challenge away: the host is
// verified by the first challenge it answers, however often the same
// claims are announced meanwhile.
func TestRepeatedAnnounceDoesNotStarveVerification(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	addr, held, answer := slowChallenger(t, "web-1", k)
	a := announce("web-1", addr, pub, "hello")
	e.publish(host.KindAnnounce, a)

	challenges := 0
	tu.WaitFor(t, 10*time.Second, func() bool {
		select {
		case <-held:
			challenges++
			if challenges > 3 {
				t.Fatalf("%d challenges answered, the host still not verified: each copy of its announce discarded the one in flight", challenges-1)
			}
			// The same claims again (a later ts, as a host's own re-announce
			// has) while the challenge is in flight; the heartbeat behind
			// it on the same connection says both were handled.
			a.TS++
			e.publish(host.KindAnnounce, a)
			e.publish(host.KindHeartbeat, heartbeat("web-1", int64(challenges)))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").Inflight == int64(challenges) }, "copy not handled")
			answer <- struct{}{}
		default:
		}
		return e.routable("hello", "web-1")
	}, "host not verified while its announce was repeated")
	if hi := e.info("web-1"); hi.State != route.HostVerified || hi.LastError != "" {
		t.Fatalf("info %+v", hi)
	}
	if challenges != 1 {
		t.Fatalf("%d challenges for one set of claims, want 1", challenges)
	}
}

// One announce of a new host's id and key at another address, while the
// real host's first check is under way, replaces its claims and fails.
// The real host is then known to the gateway, which used to leave its
// heartbeats unanswered: it stayed provisional until it reconnected. Its
// heartbeats are now answered "announce", and it gets in.
func TestForgedAnnounceOfNewHostDoesNotHoldItBack(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	gk := &gatedKeys{held: make(chan struct{}, 1)}
	e := start(t, gatewayURL, func(o *discovery.Options) {
		gk.keys = o.Keys.(*keys)
		o.Keys = gk
		o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second
	})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	release := gk.hold()
	addr, _ := runHost(t, hostURL, "web-1", k, []string{"hello"})
	select {
	case <-gk.held: // the real host's first check
	case <-time.After(5 * time.Second):
		t.Fatal("the real host was not checked")
	}

	anon := tu.Connect(t, hostURL)
	forged := tu.RefusedAddr(t) // nothing answers there
	n := e.failures("unreachable")
	b, _ := json.Marshal(announce("web-1", forged, pub, "hello"))
	if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
		t.Fatal(err)
	}
	e.handled(anon)
	close(release)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("unreachable") > n }, "forged claims not checked")

	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "real host not routable after a forged announce")
	if hi := e.info("web-1"); hi.State != route.HostVerified || hi.Addr != addr || hi.LastError != "" {
		t.Fatalf("info %+v", hi)
	}
}

// A host whose check failed is asked to announce at most once a
// heartbeat interval, however many heartbeats anyone sends for it.
func TestFailedHostAskedAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	const every = time.Hour // one ask in the test's life
	e := start(t, "", func(o *discovery.Options) { o.HeartbeatInterval, o.HostTTL = every, 4*every })
	_, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", tu.FreeAddr(t), pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("unreachable") > 0 }, "check did not fail")

	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, 1024)
	sub, err := e.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	hb, _ := json.Marshal(heartbeat("web-1", 0))
	for range 200 {
		if err := e.nc.PublishMsg(&nats.Msg{Subject: host.HeartbeatSubject(cluster), Reply: inbox, Data: hb}); err != nil {
			t.Fatal(err)
		}
	}
	e.handled(e.nc)
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The sync heartbeat's answer came after any to these, on one connection.
	if n := len(replies); n != 1 {
		t.Fatalf("%d answers to 200 heartbeats of a failed host, want 1", n)
	}
}

// Announces of other claims, each of which starts a check of its own,
// must not keep the claims a host proved from being checked again: those
// stay routed while the new ones are checked, and a stream of forged
// announces (anyone may send them, at bus speed) would otherwise keep a
// host routed at an address that stopped answering its challenge, past
// every Reverify.
func TestAnnounceStreamCannotSkipReverification(t *testing.T) {
	t.Parallel()
	// Forged claims at addresses that refuse at once, and at ones that
	// never answer (the host is then never seen verified between them).
	t.Run("refusing addresses", func(t *testing.T) {
		testAnnounceStream(t, func(t *testing.T) string { return tu.FreeAddr(t) })
	})
	t.Run("unanswering addresses", func(t *testing.T) {
		testAnnounceStream(t, func(t *testing.T) string { a, _ := tarpit(t); return a })
	})
}

func testAnnounceStream(t *testing.T, forgedAddr func(*testing.T) string) {
	e := start(t, "", func(o *discovery.Options) {
		o.Reverify, o.VerifyTimeout, o.HostTTL = 300*time.Millisecond, time.Second, time.Minute
	})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	// The host; once gone, its address takes a connection and never
	// answers (a host that hangs, or an address whose packets are lost).
	var gone atomic.Bool
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		if gone.Load() {
			<-r.Context().Done()
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	e.publish(host.KindAnnounce, announce("web-1", addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	anon := tu.Connect(t, e.url)
	var forged [2][]byte
	for i := range forged {
		forged[i], _ = json.Marshal(announce("web-1", forgedAddr(t), pub, "hello"))
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			anon.Publish(host.AnnounceSubject(cluster), forged[i%2])
			time.Sleep(200 * time.Microsecond)
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(100 * time.Millisecond) // the stream is under way

	// The host's address stops answering: its next check fails, after
	// VerifyTimeout (1 s).
	gone.Store(true)
	if !tu.Eventually(5*time.Second, func() bool { return !e.routable("hello", "web-1") }) {
		t.Fatalf("still routed to an address that stopped answering, 5 s and a Reverify of 300 ms later: %+v", e.info("web-1"))
	}
}

// A host its app's health check found failing stays out of rotation until
// a probe passes. An announce of the same claims, which anyone may copy,
// says nothing about its health and must not put it back meanwhile.
func TestCopiedAnnounceDoesNotEndAFailedProbe(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { o.HostTTL = time.Minute })
	e.b.PutApp(&route.App{ID: "hello", Status: route.StatusActive, Health: &route.HealthCheck{Path: "/healthz", Interval: route.Duration(50 * time.Millisecond)}})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	var sick atomic.Bool
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if sick.Load() {
				time.Sleep(300 * time.Millisecond) // a slow failure
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	a := announce("web-1", addr, pub, "hello")
	e.publish(host.KindAnnounce, a)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")
	sick.Store(true)
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.info("web-1").State == route.HostUnhealthy && !e.routable("hello", "web-1")
	}, "failed probe did not make it unhealthy")

	anon := tu.Connect(t, e.url)
	b, _ := json.Marshal(a)
	if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
		t.Fatal(err)
	}
	e.handled(anon)
	if tu.Eventually(250*time.Millisecond, func() bool { return e.routable("hello", "web-1") }) {
		t.Fatalf("a copy of its announce put a host failing its health check back: %+v", e.info("web-1"))
	}
}

// Every announce is checked, but copies of a host's announce, which anyone
// may send at bus speed, must not turn into as many challenges at the
// host: checks of the same claims come at most once a heartbeat interval.
func TestAnnounceCopiesDoNotFloodTheHostWithChallenges(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { o.HostTTL = time.Minute })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	var challenges atomic.Int64
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		challenges.Add(1)
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	a := announce("web-1", addr, pub, "hello")
	e.publish(host.KindAnnounce, a)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	anon := tu.Connect(t, e.url)
	b, _ := json.Marshal(a)
	const span = time.Second
	began, before := time.Now(), challenges.Load()
	for time.Since(began) < span {
		if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	e.handled(anon)
	n := challenges.Load() - before
	if limit := int64(time.Since(began)/hbEvery) + 2; n > limit {
		t.Fatalf("%d challenges at the host for copies of its announce over %v, want at most %d (one a heartbeat interval)", n, time.Since(began).Round(time.Millisecond), limit)
	}
	t.Logf("%d challenges over %v", n, time.Since(began).Round(time.Millisecond))
	if !e.routable("hello", "web-1") {
		t.Fatal("not routable")
	}
}

// Alternating a host's own announce with one of other claims makes every
// announce "changed", and changed claims are checked at once: so a bus
// client that flips the id between its claims and another address at bus
// speed turned each flip into a challenge at the host (thousands a
// second), past the bound on copies. A return to the claims that last
// passed is held to one check a heartbeat interval, as a copy is; the
// host stays routed meanwhile.
func TestFlippedClaimsDoNotFloodTheHostWithChallenges(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { o.HostTTL = time.Minute })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	var challenges atomic.Int64
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		challenges.Add(1)
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	own := announce("web-1", addr, pub, "hello")
	e.publish(host.KindAnnounce, own)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	anon := tu.Connect(t, e.url)
	bo, _ := json.Marshal(announce("web-1", tu.FreeAddr(t), pub, "hello"))
	ba, _ := json.Marshal(own)
	const span = time.Second
	began, before := time.Now(), challenges.Load()
	for time.Since(began) < span {
		if err := anon.Publish(host.AnnounceSubject(cluster), bo); err != nil {
			t.Fatal(err)
		}
		if err := anon.Publish(host.AnnounceSubject(cluster), ba); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	e.handled(anon)
	n := challenges.Load() - before
	if limit := int64(time.Since(began)/hbEvery) + 2; n > limit {
		t.Fatalf("%d challenges at the host for flips of its claims over %v, want at most %d (one a heartbeat interval)", n, time.Since(began).Round(time.Millisecond), limit)
	}
	t.Logf("%d challenges over %v", n, time.Since(began).Round(time.Millisecond))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") && e.info("web-1").Addr == addr }, "host not routed by its own claims")
}
