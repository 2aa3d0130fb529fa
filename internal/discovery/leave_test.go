package discovery_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// startGatewayBus starts the gateway's own embedded bus, with its access
// rules: gatewayURL carries the gateway credential, hostURL none (what
// every host, and anyone else who reaches the port, connects with).
func startGatewayBus(t *testing.T) (gatewayURL, hostURL string) {
	t.Helper()
	dir := t.TempDir()
	b, err := bus.New(bus.Options{DataDir: dir, Listen: "127.0.0.1:0", Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	secret, err := os.ReadFile(filepath.Join(dir, bus.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	hostURL = b.ClientURL()
	scheme, rest, _ := strings.Cut(hostURL, "://")
	return scheme + "://" + bus.GatewayUser + ":" + strings.TrimSpace(string(secret)) + "@" + rest, hostURL
}

// gatedKeys holds one enrolment lookup, and with it the verification that
// made it, until the test closes the gate.
type gatedKeys struct {
	*keys
	mu   sync.Mutex
	gate chan struct{} // non-nil: the next lookup waits for it to close
	held chan struct{} // receives when a lookup starts waiting
}

func (g *gatedKeys) GetHostKey(ctx context.Context, id string) (*route.HostKey, error) {
	g.mu.Lock()
	gate := g.gate
	g.gate = nil
	g.mu.Unlock()
	if gate != nil {
		g.held <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	return g.keys.GetHostKey(ctx, id)
}

func (g *gatedKeys) hold() chan struct{} {
	c := make(chan struct{})
	g.mu.Lock()
	g.gate = c
	g.mu.Unlock()
	return c
}

func signed(k ed25519.PrivateKey, id string, ts int64) host.Leave {
	return host.Leave{HostID: id, TS: ts, Sig: host.SignLeave(k, id, ts)}
}

// refused publishes l from nc and waits until it is counted as reason;
// web-1 must stay routable and verified throughout.
func (e *env) refused(t *testing.T, nc *nats.Conn, l host.Leave, reason string) {
	t.Helper()
	n := e.dropped(reason)
	b, _ := json.Marshal(l)
	if err := nc.Publish(host.LeaveSubject(cluster), b); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool {
		if !e.routable("hello", "web-1") {
			t.Fatalf("%+v took the host out of rotation", l)
		}
		return e.dropped(reason) == n+1
	}, "leave not refused as "+reason)
	if s := e.info("web-1").State; s != route.HostVerified {
		t.Fatalf("state %s after a refused leave", s)
	}
}

// A leave drains a host only when the host signed it, recently, with the
// key it proved. Anything a bus client without credentials can send (no
// sig, another key, a leave replayed from a minute ago or from the host's
// previous life) changes nothing, is counted and logged; the leave a real
// host.Host sends on shutdown drains it.
func TestLeaveMustBeSignedByTheHost(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	var logs tu.SyncBuffer
	gk := &gatedKeys{held: make(chan struct{}, 1)}
	e := start(t, gatewayURL, func(o *discovery.Options) {
		gk.keys = o.Keys.(*keys)
		o.Keys = gk
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		// Heartbeats every 100 ms; a busy machine must not make the host
		// unhealthy while the test watches it stay put.
		o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second
	})
	k, pub := newKey(t)
	kOther, pubOther := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	before := time.Now().Unix() // every announce of this life is at least this
	addr, stop := runHost(t, hostURL, "web-1", k, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")

	anon, err := nats.Connect(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()

	now := time.Now().Unix()
	tbl := e.live.Load()
	cases := []struct {
		name   string
		leave  host.Leave
		reason string
	}{
		{"unsigned", host.Leave{HostID: "web-1", TS: now}, "unsigned_leave"},
		{"another key", signed(kOther, "web-1", now), "bad_signature"},
		{"sig for another host", host.Leave{HostID: "web-1", TS: now, Sig: host.SignLeave(k, "web-2", now)}, "bad_signature"},
		{"sig for another ts", host.Leave{HostID: "web-1", TS: now, Sig: host.SignLeave(k, "web-1", now-1)}, "bad_signature"},
		{"challenge answer as sig", host.Leave{HostID: "web-1", TS: now, Sig: host.SignChallenge(k, "web-1", addr, "bm9uY2U=", "gw-1")}, "bad_signature"},
		{"5 minutes old", signed(k, "web-1", now-300), "stale_leave"},
		{"5 minutes ahead", signed(k, "web-1", now+300), "stale_leave"},
		{"before the current announce", signed(k, "web-1", before-1), "stale_leave"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { e.refused(t, anon, c.leave, c.reason) })
	}
	if e.live.Load() != tbl {
		t.Fatal("a refused leave republished the table")
	}
	// The counter moves just before the line is written: wait for the
	// last line rather than read the log at once.
	refusedLines := func() int {
		return strings.Count(logs.String(), `msg="discovery: refused leave" host_id=web-1 reason=`)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return refusedLines() >= len(cases) }, "refused-leave log lines")
	if got := refusedLines(); got != len(cases) {
		t.Fatalf("%d refused-leave log lines naming host and reason, want %d:\n%s", got, len(cases), logs.String())
	}

	// A forged announce with another key is being checked: the host is
	// still routed by the key it proved, and only that key's leave counts.
	t.Run("key of unproven claims", func(t *testing.T) {
		mismatches := e.failures("key_mismatch")
		release := gk.hold()
		forged := announce("web-1", addr, pubOther, "hello")
		b, _ := json.Marshal(forged)
		if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
			t.Fatal(err)
		}
		select {
		case <-gk.held:
		case <-time.After(5 * time.Second):
			t.Fatal("forged claims not being checked")
		}
		e.refused(t, anon, signed(kOther, "web-1", time.Now().Unix()), "bad_signature")
		close(release)
		tu.WaitFor(t, 5*time.Second, func() bool {
			return e.failures("key_mismatch") > mismatches && e.routable("hello", "web-1") && e.info("web-1").State == route.HostVerified
		}, "forged claims not rejected")
	})

	// The real host shuts down: its leave drains it.
	n := e.dropped("unsigned_leave") + e.dropped("bad_signature") + e.dropped("stale_leave")
	stop()
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1")
	}, "host's own leave did not drain it")
	if m := e.dropped("unsigned_leave") + e.dropped("bad_signature") + e.dropped("stale_leave"); m != n {
		t.Fatalf("the host's own leave was counted as refused (%v -> %v)", n, m)
	}
}

// A leave for a host that never proved a key, or for an id the gateway
// does not know, drains nothing: there is no key to check it against and
// nothing routed. Like every other leave refused, it is counted, signed or
// not (an unsigned one always was): as unverified_leave, apart from
// bad_signature, which a host that failed its challenge would otherwise
// add to at every shutdown.
func TestLeaveForUnverifiedHostRefused(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	k, pub := newKey(t)
	kOther, _ := newKey(t)
	// Enrolled, but its challenge is answered with another key: announced,
	// never verified.
	e.keys.enrol("web-1", pub, "hello")
	cs := newChallengeServer(t, "web-1", kOther)
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").LastError != "" }, "verification did not fail")
	ts := time.Now().Unix()
	bad, unsigned, unverified := e.dropped("bad_signature"), e.dropped("unsigned_leave"), e.dropped("unverified_leave")
	e.publish(host.KindLeave, host.Leave{HostID: "web-1", TS: ts, Sig: host.SignLeave(k, "web-1", ts)})
	e.publish(host.KindLeave, host.Leave{HostID: "nobody", TS: ts, Sig: host.SignLeave(k, "nobody", ts)})
	e.publish(host.KindLeave, host.Leave{HostID: "nobody", TS: ts})
	e.publish(host.KindHeartbeat, heartbeat("web-1", 7)) // handled after the leaves
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").Inflight == 7 }, "sentinel heartbeat not seen")
	if s := e.info("web-1").State; s != route.HostProvisional {
		t.Fatalf("state %s", s)
	}
	if got := e.dropped("unsigned_leave") - unsigned; got != 1 {
		t.Errorf("unsigned leave of an unknown id: unsigned_leave +%v, want +1", got)
	}
	if got := e.dropped("unverified_leave") - unverified; got != 2 {
		t.Errorf("signed leaves of a never-verified and an unknown host: unverified_leave +%v, want +2", got)
	}
	if got := e.dropped("bad_signature") - bad; got != 0 {
		t.Errorf("leaves of hosts that proved no key: bad_signature +%v, want +0", got)
	}
}

// A host announces only at start and on reconnect, so the announce it is
// routed by may be long past; a signed leave must still be within a minute
// of the gateway's clock, either way.
func TestLeaveOutsideClockWindow(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 100, time.Minute })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	cs := newChallengeServer(t, "web-1", k)
	now := time.Now().Unix()
	a := announce("web-1", cs.addr, pub, "hello")
	a.TS = now - 600
	e.publish(host.KindAnnounce, a)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable")

	for _, ts := range []int64{now - 300, now - 90, now + 90} {
		t.Run(fmt.Sprint(ts-now), func(t *testing.T) { e.refused(t, e.nc, signed(k, "web-1", ts), "stale_leave") })
	}
	e.publish(host.KindLeave, signed(k, "web-1", now-30))
	tu.WaitFor(t, 5*time.Second, func() bool { return !e.routable("hello", "web-1") }, "a leave 30 s old did not drain")
}

// Announces are unsigned, so what a leave must be newer than cannot be
// read from them: a copy of a host's announce with any ts neither makes
// its real leave stale nor lets a leave captured from its previous run
// drain it again.
func TestCopiedAnnounceCannotMoveTheLeaveRule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ts   int64 // of the copy
	}{
		{"ts far ahead", time.Now().AddDate(10, 0, 0).Unix()},
		{"ts 1", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewayURL, hostURL := startGatewayBus(t)
			e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second })
			k, pub := newKey(t)
			e.keys.enrol("web-1", pub, "hello")
			anon := tu.Connect(t, hostURL)
			leaves := make(chan *nats.Msg, 4)
			sub, err := e.nc.ChanSubscribe(host.LeaveSubject(cluster), leaves)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}

			// The host's first run verifies and leaves; its leave is captured.
			_, stop1 := runHost(t, hostURL, "web-1", k, []string{"hello"})
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "first run not routable")
			stop1()
			var captured host.Leave
			select {
			case m := <-leaves:
				if err := json.Unmarshal(m.Data, &captured); err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("first run sent no leave")
			}
			tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").State == route.HostDraining }, "first run's leave did not drain it")

			// It comes back; anyone copies its announce with another ts.
			addr2, stop2 := runHost(t, hostURL, "web-1", k, []string{"hello"})
			tu.WaitFor(t, 5*time.Second, func() bool {
				return e.routable("hello", "web-1") && e.info("web-1").Addr == addr2 && e.info("web-1").State == route.HostVerified
			}, "second run not routable")
			copied := announce("web-1", addr2, pub, "hello")
			copied.TS = c.ts
			b, _ := json.Marshal(copied)
			if err := anon.Publish(host.AnnounceSubject(cluster), b); err != nil {
				t.Fatal(err)
			}
			e.handled(anon)

			// The first run's leave, replayed within its minute, drains nothing.
			e.refused(t, anon, captured, "stale_leave")

			// The second run's own leave drains it. Two leaves of one key
			// in one second are the same bytes, a replay for all anyone
			// can tell: let the second come a second later.
			tu.WaitFor(t, 5*time.Second, func() bool { return time.Now().Unix() > captured.TS }, "clock")
			n := e.dropped("unsigned_leave") + e.dropped("bad_signature") + e.dropped("stale_leave")
			stop2()
			tu.WaitFor(t, 5*time.Second, func() bool {
				return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1")
			}, "second run's own leave did not drain it")
			if m := e.dropped("unsigned_leave") + e.dropped("bad_signature") + e.dropped("stale_leave"); m != n {
				t.Fatalf("the host's own leave was counted as refused (%v -> %v)", n, m)
			}
		})
	}
}

// A host whose key was replaced comes back, and its new run leaves within
// the same second as the old run did (one leave signs only host_id and
// ts): the leave drains it, and is no replay. Leaves of either run
// replayed against the run after remain refused.
func TestNewKeyLeavesInTheOldRunsSecond(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second })
	k1, pub1 := newKey(t)
	k2, pub2 := newKey(t)
	anon := tu.Connect(t, hostURL)
	// Both runs' clocks stand still: their announces and leaves carry ts.
	ts := time.Now().Unix()
	stopped := func(o *host.Options) { o.Now = func() time.Time { return time.Unix(ts, 0) } }

	e.keys.enrol("web-1", pub1, "hello")
	_, stop1 := runHostWith(t, hostURL, "web-1", k1, []string{"hello"}, stopped)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "first run not routable")
	stop1()
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").State == route.HostDraining }, "first run's leave did not drain it")

	e.keys.enrol("web-1", pub2, "hello")
	addr2, stop2 := runHostWith(t, hostURL, "web-1", k2, []string{"hello"}, stopped)
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.routable("hello", "web-1") && e.info("web-1").Addr == addr2 && e.info("web-1").State == route.HostVerified
	}, "second run not routable")
	n := e.dropped("stale_leave")
	stop2()
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1") || e.dropped("stale_leave") > n
	}, "second run's leave neither drained nor was refused")
	if m := e.dropped("stale_leave"); m != n {
		t.Fatalf("the second run's own leave, signed by its new key, was refused as stale (%v -> %v)", n, m)
	}

	// A third run, with the second key and the real clock.
	addr3, _ := runHost(t, hostURL, "web-1", k2, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.routable("hello", "web-1") && e.info("web-1").Addr == addr3 && e.info("web-1").State == route.HostVerified
	}, "third run not routable")
	e.refused(t, anon, signed(k2, "web-1", ts), "stale_leave")
	e.refused(t, anon, signed(k1, "web-1", ts), "bad_signature")
}
