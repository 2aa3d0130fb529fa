package discovery_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestHeartbeatFloodCannotTakeTheAsk: the "announce" reply to a failed
// host's heartbeats is limited per reply inbox, not per host id. An
// anonymous client that forges the host's announce at a dead address and
// heartbeats its id (reply in _INBOX.) faster than the host must not take
// every reply: the real host, whose claims were replaced, is asked and
// becomes routable.
func TestHeartbeatFloodCannotTakeTheAsk(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 20*time.Second })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	// The real host; its app is not up yet, so its first check fails.
	h := startHost(t, hostURL, "web-1", k, []string{"hello"}, "127.0.0.1:0", true)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("bad_response") > 0 }, "first check did not fail")

	anon := tu.Connect(t, hostURL)
	floodHeartbeats(t, anon, "web-1")
	time.Sleep(3 * hbEvery) // asks already under way reach the host

	forged := announce("web-1", tu.FreeAddr(t), pub, "hello")
	n := e.failures("unreachable")
	b, _ := json.Marshal(forged)
	if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("unreachable") > n }, "forged announce not checked")
	h.down.Store(false)
	tu.WaitFor(t, 30*hbEvery, func() bool { return e.routable("hello", "web-1") },
		"real host (now answering) never asked to announce: stuck at "+e.info("web-1").Addr)
}

// TestClaimsBackDoNotMoveTheLeaveFloor: announcing other claims and then
// the real ones again (the host stays routed by its proven claims) must
// not move the time its run began: with a copy with a huge ts on top, that
// would lift the leave floor to now, and a host whose clock lags the
// gateway's by a few seconds would have its signed leave refused as
// stale_leave and stay routed while it shuts down.
func TestClaimsBackDoNotMoveTheLeaveFloor(t *testing.T) {
	t.Parallel()
	const lag = 2 * time.Second
	for _, c := range []struct {
		name  string
		other bool // announce another addr first
	}{
		{"copy with a huge ts", false},
		{"another addr, then a copy with a huge ts", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each on its own buses; both wait out the lag
			gatewayURL, hostURL := startGatewayBus(t)
			e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 50, 20*time.Second })
			k, pub := newKey(t)
			e.keys.enrol("web-1", pub, "hello")
			addr, leave := runHostWith(t, hostURL, "web-1", k, []string{"hello"}, func(o *host.Options) {
				o.Now = func() time.Time { return time.Now().Add(-lag) }
			})
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")
			first := e.info("web-1").VerifiedAt
			// Long enough after its check that the host's own leave is fresh.
			tu.WaitFor(t, 5*time.Second, func() bool { return time.Since(first) > lag+1500*time.Millisecond }, "")

			anon := tu.Connect(t, hostURL)
			pubAnn := func(a host.Announce) {
				b, _ := json.Marshal(a)
				if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
					t.Fatal(err)
				}
				anon.Flush()
			}
			if c.other {
				// Back to back: the real claims are re-checked while not verified.
				// An address that accepts and never answers holds the check.
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				pubAnn(announce("web-1", ln.Addr().String(), pub, "hello"))
			}
			copyAnn := announce("web-1", addr, pub, "hello")
			copyAnn.TS = time.Now().Unix() + 1_000_000
			pubAnn(copyAnn)
			tu.WaitFor(t, 5*time.Second, func() bool {
				hi := e.info("web-1")
				return hi.VerifiedAt.After(first) && hi.State == route.HostVerified
			}, "copy not re-checked")
			if !e.routable("hello", "web-1") {
				t.Fatal("not routable after the copies")
			}
			leave()
			if !tu.Eventually(3*time.Second, func() bool { return e.info("web-1").State == route.HostDraining }) {
				t.Fatalf("the host's own signed leave did not drain it: state %s, routable %v, stale_leave dropped %v",
					e.info("web-1").State, e.routable("hello", "web-1"), e.dropped("stale_leave"))
			}
		})
	}
}

// TestOneIDCannotHoldEveryWorker: announces of one id alternating between
// two addresses that accept and never answer each start a check; a check
// of claims announced over must end at once, or one anonymous client
// holds every worker for VerifyTimeout with a single id, and every other
// host's check waits.
func TestOneIDCannotHoldEveryWorker(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.Workers, o.VerifyTimeout = 8, 5*time.Second })
	_, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	var mu sync.Mutex
	held, peak := 0, 0
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		addrs = append(addrs, ln.Addr().String())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
				mu.Lock()
				held++
				peak = max(peak, held)
				mu.Unlock()
				go func() {
					io.Copy(io.Discard, c) // until the gateway gives up on it
					mu.Lock()
					held--
					mu.Unlock()
				}()
			}
		}()
	}
	anon := tu.Connect(t, hostURL)
	for i := range 40 {
		b, _ := json.Marshal(announce("web-1", addrs[i%2], pub, "hello"))
		anon.Publish(host.AnnounceSubject(cluster), b)
		anon.Flush()
		time.Sleep(5 * time.Millisecond) // let a worker take each
	}
	// Held for VerifyTimeout, the checks would take all 8 workers and stay
	// open 5 s; cancelled, only the last one is left, well before that.
	// The peak counts a check the gateway already cancelled until this
	// test's reader sees its close, which a loaded machine delays: one
	// check, one being cancelled, and up to two closes not yet seen.
	if !tu.Eventually(3*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return held <= 1
	}) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d checks of one host id still open 3 s after its last announce, want at most 1 (the last one's)", held)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak > 4 {
		t.Fatalf("%d concurrent checks of one host id (of 8 workers), want at most 4 (one, one being cancelled, two closes not yet seen)", peak)
	}
}

// floodHeartbeats has nc heartbeat id, with a reply inbox of its own,
// every 100 µs until the test ends: a client without credentials taking
// the gateway's "announce" replies to that id.
func floodHeartbeats(t *testing.T, nc *nats.Conn, id string) {
	hb, _ := json.Marshal(heartbeat(id, 0))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = nc.PublishMsg(&nats.Msg{Subject: host.HeartbeatSubject(cluster), Reply: "_INBOX.anon.x", Data: hb})
			time.Sleep(100 * time.Microsecond)
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// tarpit listens on 127.0.0.1, accepts every connection and never answers
// it: a check of a host announced there holds its worker for the whole
// VerifyTimeout. It returns the address and how many connections it holds.
func tarpit(t *testing.T) (addr string, held func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	open := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			open++
			mu.Unlock()
			go func() {
				io.Copy(io.Discard, c) // until the gateway gives up on it
				mu.Lock()
				open--
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return open }
}

// TestOneAddressCannotHoldEveryWorker: an anonymous client announces 50
// enrolled host ids (their public keys are on the bus for anyone to read)
// at one address that accepts and never answers. One check per id would
// take every worker for VerifyTimeout, three times over, and a real host
// announced after them would wait behind all of them; the checks at one
// address must be few at a time, so the real host is verified at once,
// and so is a host whose own id was among the forged ones (its check,
// waiting for the unanswering address, must not wait once it announces
// its own). Nor may other spellings of the address (IPv4-mapped IPv6,
// written out in full or with its hex groups) count as other addresses.
func TestOneAddressCannotHoldEveryWorker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		spellings func(ip, port string) []string
	}{
		{"one spelling", func(ip, port string) []string { return []string{net.JoinHostPort(ip, port)} }},
		{"many spellings", func(ip, port string) []string {
			var out []string
			for _, h := range []string{ip, "::ffff:" + ip, "0::ffff:" + ip, "0:0:0:0:0:ffff:" + ip, "::ffff:7f00:1", "::FFFF:7F00:0001", "0:0::ffff:7f00:1", "::0:ffff:7f00:1"} {
				out = append(out, net.JoinHostPort(h, port))
			}
			return out
		}},
	} {
		t.Run(c.name, func(t *testing.T) { testOneAddress(t, c.spellings) })
	}
}

func testOneAddress(t *testing.T, spellings func(ip, port string) []string) {
	const ids, workers, timeout = 50, 16, 5 * time.Second
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) {
		o.Workers, o.VerifyTimeout = workers, timeout
		o.MissedHeartbeats, o.HostTTL = 100, time.Minute
	})
	_, pub := newKey(t)
	addr, held := tarpit(t)
	ip, port, _ := net.SplitHostPort(addr)
	addrs := spellings(ip, port)
	anon := tu.Connect(t, hostURL)
	for i := range ids {
		id := fmt.Sprintf("web-%d", i)
		e.keys.enrol(id, pub, "hello")
		b, _ := json.Marshal(announce(id, addrs[i%len(addrs)], pub, "hello"))
		if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
			t.Fatal(err)
		}
	}
	e.handled(anon)
	tu.WaitFor(t, 5*time.Second, func() bool { return held() > 0 }, "no check reached the tarpit")

	for _, id := range []string{"real-1", fmt.Sprintf("web-%d", ids-1)} {
		k, realPub := newKey(t)
		e.keys.enrol(id, realPub, "hello")
		began := time.Now()
		runHost(t, hostURL, id, k, []string{"hello"})
		if !tu.Eventually(timeout/2, func() bool { return e.routable("hello", id) }) {
			t.Fatalf("real host %s not routable %v after it announced (behind %d checks at one unanswering address, %d held there now; serially %v)",
				id, time.Since(began).Round(time.Millisecond), ids, held(), time.Duration((ids+workers-1)/workers)*timeout)
		}
		t.Logf("real host %s routable after %v; %d checks held at the tarpit", id, time.Since(began).Round(time.Millisecond), held())
	}
}

// A host whose last check failed is asked to announce at its heartbeats,
// since a forged announce may have replaced its claims; a forged announce
// the enrolment refuses (another key, an app it does not allow) must not
// end that. Its claims, which nobody proved, are then all the gateway
// holds for the host and are what every retry checks: unasked, the real
// host stayed out until it reconnected.
func TestForgedClaimsTheEnrolmentRefusesDoNotStrandAHost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		forged func(addr string, pub, other ed25519.PublicKey) host.Announce
	}{
		{"another key", func(addr string, _, other ed25519.PublicKey) host.Announce {
			return announce("web-1", addr, other, "hello")
		}},
		{"an app not allowed", func(addr string, pub, _ ed25519.PublicKey) host.Announce {
			return announce("web-1", addr, pub, "hello", "shop")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gatewayURL, hostURL := startGatewayBus(t)
			e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 20*time.Second })
			k, pub := newKey(t)
			_, other := newKey(t)
			e.keys.enrol("web-1", pub, "hello")
			h := startHost(t, hostURL, "web-1", k, []string{"hello"}, "127.0.0.1:0", false)
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

			// A check fails (the host is busy a moment): not routed, and
			// asked to announce at its heartbeats, which it does.
			h.down.Store(true)
			n := e.failures("bad_response")
			if err := e.d.Reverify("web-1"); err != nil {
				t.Fatal(err)
			}
			tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("bad_response") > n }, "check did not fail")

			// Someone announces claims for it that the enrolment refuses.
			anon := tu.Connect(t, hostURL)
			b, _ := json.Marshal(c.forged(h.addr, pub, other))
			refusals := e.failures("key_mismatch") + e.failures("app_not_allowed")
			if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
				t.Fatal(err)
			}
			tu.WaitFor(t, 5*time.Second, func() bool {
				return e.failures("key_mismatch")+e.failures("app_not_allowed") > refusals
			}, "forged claims not refused")

			h.down.Store(false)
			tu.WaitFor(t, 40*hbEvery, func() bool { return e.routable("hello", "web-1") },
				"real host never asked to announce after forged claims the enrolment refused")
		})
	}
}
