package discovery_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A host that announces before its operator enrols it is forgotten as soon
// as the enrolment lookup refuses it, not kept until host_ttl (anyone on
// the bus can announce made-up ids), and still gets in once enrolled: each
// heartbeat of a host the gateway does not know is answered "announce",
// and it announces again.
func TestHostEnrolledAfterItsFirstAnnounce(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) { o.HostTTL = time.Minute })
	k, pub := newKey(t)
	runHost(t, hostURL, "web-1", k, []string{"hello"})

	// Refused, forgotten, asked to announce, refused again.
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("unenrolled") >= 2 }, "not refused twice")
	tu.WaitFor(t, 5*time.Second, func() bool { _, ok := e.d.Host("web-1"); return !ok }, "a refused host is still tracked")
	if n := e.hostsIn(route.HostProvisional); n > 1 {
		t.Fatalf("hosts{provisional} = %v for one host", n)
	}

	e.keys.enrol("web-1", pub, "hello")
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable once enrolled")
	if hi := e.info("web-1"); hi.State != route.HostVerified || hi.LastError != "" {
		t.Fatalf("info %+v", hi)
	}
}

// flood announces n made-up host ids from a bus client without
// credentials, and heartbeats them, over and over until the returned stop
// is called. Every floodSync ids it sends a heartbeat for an unknown id,
// whose "announce" reply says the gateway has handled what came before:
// the flood runs as fast as the gateway takes it, without piling up in its
// subscription (which would hold up every host's messages alike, a
// different matter). One reply per round of 3000 ids let them pile up:
// under -race on a loaded machine the gateway took some 400 ids a second,
// so 7 s a round, and a verified host's heartbeats queued behind one
// for the 2 s that make it stale.
func flood(t *testing.T, hostURL string, n int) (stop func()) {
	t.Helper()
	nc, err := nats.Connect(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	_, pub := newKey(t)
	var anns, hbs [][]byte
	for i := range n {
		id := fmt.Sprintf("bogus-%d", i)
		a, _ := json.Marshal(announce(id, "127.0.0.1:1", pub, "hello"))
		hb, _ := json.Marshal(heartbeat(id, 0))
		anns, hbs = append(anns, a), append(hbs, hb)
	}
	end, _ := json.Marshal(heartbeat("bogus-end-of-round", 0))
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			for i := range anns {
				nc.Publish(host.AnnounceSubject(cluster), anns[i])
				nc.Publish(host.HeartbeatSubject(cluster), hbs[i])
				if (i+1)%floodSync != 0 && i+1 < len(anns) {
					continue
				}
				if _, err := nc.Request(host.HeartbeatSubject(cluster), end, 10*time.Second); err != nil {
					t.Errorf("flood: the gateway did not take %d ids: %v", floodSync, err)
					return
				}
				select {
				case <-quit:
					return
				default:
				}
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done; nc.Close() }) }
	t.Cleanup(stop)
	return stop
}

// floodSync is how many made-up ids the flood sends between waits for the
// gateway to have handled them (two messages each).
const floodSync = 100

// An anonymous client announces 3000 made-up host ids and keeps
// announcing and heartbeating them. The hosts that never verified stay
// within their cap, a tenth of MaxHosts; a real, enrolled host that comes
// up during the flood is verified and routed within a bounded time, and,
// verified, is never evicted for the flood's ids. The log stays bounded
// however many ids the flood makes up.
func TestUnverifiedFloodCannotCrowdOutEnrolledHost(t *testing.T) {
	// Not parallel: its flood takes all the CPU it gets, and would
	// starve the waits of tests beside it; run serially, it runs alone.
	gatewayURL, hostURL := startGatewayBus(t)
	const maxHosts, maxUnverified = 100, 10
	var logs tu.SyncBuffer
	began := time.Now()
	e := start(t, gatewayURL, func(o *discovery.Options) {
		o.MaxHosts = maxHosts
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second // a busy machine must not make the host miss heartbeats
	})
	bounded := func(verified int) {
		if n := len(e.d.Hosts()); n > maxUnverified+verified {
			t.Fatalf("%d hosts tracked, want at most %d never verified and %d verified", n, maxUnverified, verified)
		}
	}
	stop := flood(t, hostURL, 3000)
	// The waits on the flood's progress end once the count is in; under
	// -race at load 30 the gateway refused 200 made-up ids a second.
	tu.WaitFor(t, time.Minute, func() bool { bounded(0); return e.failures("unenrolled") >= 3000 }, "flood not under way")

	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	hostStart := time.Now()
	runHost(t, hostURL, "web-1", k, []string{"hello"})
	tu.WaitFor(t, 10*time.Second, func() bool { bounded(1); return e.routable("hello", "web-1") }, "enrolled host not routable during the flood")
	t.Logf("routable %v after starting, %v evictions", time.Since(hostStart).Round(time.Millisecond), e.dropped("too_many_unverified"))

	// Verified, it stays, however many more made-up ids come.
	evicted := e.dropped("too_many_unverified")
	tu.WaitFor(t, time.Minute, func() bool {
		bounded(1)
		if !e.routable("hello", "web-1") {
			t.Fatal("the flood took the verified host out")
		}
		return e.dropped("too_many_unverified") >= evicted+3000
	}, "flood did not go on")
	stop()
	if d := e.dropped("too_many_hosts"); d != 0 {
		t.Fatalf("%v announces dropped as too_many_hosts", d)
	}

	// Two reasons (unenrolled, too_many_unverified), each its burst and
	// one line per 6 s; a summary each; web-1's own line.
	lines := map[string]int{}
	total := 0
	for _, m := range logLines(t, logs.String()) {
		lines[m["msg"].(string)]++
		total++
	}
	bound := 2*(logBurst+1+int(time.Since(began)/(6*time.Second))) + 2 + 1
	if total > bound {
		t.Fatalf("%d log lines for a flood of %v made-up ids, want at most %d: %v", total, e.failures("unenrolled")+e.dropped("too_many_unverified"), bound, lines)
	}
}
