package discovery_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// An anonymous client sends announces and heartbeats of made-up ids as
// fast as the bus takes them, never waiting for the gateway (unlike
// flood, which waits every floodSync ids), for floodFor or floodMsgs
// messages. A verified host's heartbeats must still be taken in time:
// each one the test sends is seen by the gateway (its LastHeartbeat)
// within 10 intervals, during the flood and after it.
//
// When one subscription handled every message in order, web-1's
// heartbeats waited behind the flood's: 2.5 to 6.6 s here under -race.
func TestUnpacedFloodCannotDelayEnrolledHeartbeats(t *testing.T) {
	// Not parallel: its flood takes all the CPU it gets (see
	// TestUnverifiedFloodCannotCrowdOutEnrolledHost).
	const (
		floodFor  = 3 * time.Second
		floodMsgs = 400000
		ids       = 10000
		bound     = 10 * hbEvery
	)
	e, hc, hostURL := startWithWeb1(t)
	anon := tu.Connect(t, hostURL)
	_, bogus := newKey(t)
	var anns, hbs [][]byte
	for i := range ids {
		id := fmt.Sprintf("bogus-%d", i)
		a, _ := json.Marshal(announce(id, "127.0.0.1:1", bogus, "hello"))
		hb, _ := json.Marshal(heartbeat(id, 0))
		anns, hbs = append(anns, a), append(hbs, hb)
	}
	worst, n, took := web1HeartbeatsDuring(t, e, hc, floodFor, func(until time.Time) int {
		n := 0
		for ; n < floodMsgs && time.Now().Before(until); n += 2 {
			anon.Publish(host.AnnounceSubject(cluster), anns[n/2%ids])
			anon.Publish(host.HeartbeatSubject(cluster), hbs[n/2%ids])
		}
		anon.Flush()
		return n
	})
	t.Logf("flood of %d messages in %v; web-1's heartbeats taken at worst %v after they were sent; %v dropped as queue_full",
		n, took.Round(time.Millisecond), worst.Round(time.Millisecond), e.dropped("queue_full"))
	if worst > bound {
		t.Errorf("a heartbeat of web-1 was taken %v after it was sent, during a flood of made-up ids; want at most %v", worst, bound)
	}
	if !e.routable("hello", "web-1") {
		t.Errorf("web-1 not routable after the flood: %+v", e.info("web-1"))
	}
}

// A verified host's heartbeat is read as encoding/json reads it, whatever
// the gateway's quick look for its host_id (which keeps a flood of
// made-up ids apart) found first: a body whose last "host_id" (any case)
// names another host changes nothing for the first one named, and one
// written with spaces, its keys in another order, is the host's.
func TestHeartbeatReadAsJSONReadsIt(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "web-1 not routable")
	before := e.info("web-1")

	ts := time.Now().Unix()
	e.publish(host.KindHeartbeat, []byte(fmt.Sprintf(`{"host_id":"web-1","ts":%d,"inflight":7,"HOST_ID":"web-2"}`, ts)))
	e.handled(e.nc)
	if hi := e.info("web-1"); hi.Inflight != before.Inflight || !hi.LastHeartbeat.Equal(before.LastHeartbeat) {
		t.Fatalf("a heartbeat of web-2 (its last host_id) was taken as web-1's: inflight %d, last heartbeat %v (was %d, %v)",
			hi.Inflight, hi.LastHeartbeat, before.Inflight, before.LastHeartbeat)
	}

	e.publish(host.KindHeartbeat, []byte(fmt.Sprintf(`{ "ts" : %d, "inflight" : 5, "host_id" : "web-1" }`, ts)))
	e.handled(e.nc)
	if hi := e.info("web-1"); hi.Inflight != 5 || !hi.LastHeartbeat.After(before.LastHeartbeat) {
		t.Fatalf("web-1's heartbeat written with spaces not taken: inflight %d, last heartbeat %v (was %v)", hi.Inflight, hi.LastHeartbeat, before.LastHeartbeat)
	}
}

// The same flood, of heartbeats of made-up ids as long as a message may
// be, each naming a verified host's id first ({"host_id":"web-1",
// <padding>,"host_id":"bogus-N"}: encoding/json reads the last), as anyone
// who knows one verified id may send. The gateway's quick look for an id
// finds web-1's and must not parse each in the subscription's callback,
// where web-1's own heartbeats wait behind them.
func TestLongDecoyHeartbeatsCannotDelayEnrolledHeartbeats(t *testing.T) {
	// Not parallel: its flood takes all the CPU it gets.
	const (
		floodFor = 3 * time.Second
		bodies   = 64
		bound    = 10 * hbEvery
	)
	e, hc, hostURL := startWithWeb1(t)
	anon := tu.Connect(t, hostURL)
	pad := strings.Repeat("x", host.MaxMessageSize-200)
	var decoys [][]byte
	for i := range bodies {
		decoys = append(decoys, fmt.Appendf(nil, `{"host_id":"web-1","pad":"%s","host_id":"bogus-%d","ts":%d}`, pad, i, time.Now().Unix()))
	}
	worst, n, took := web1HeartbeatsDuring(t, e, hc, floodFor, func(until time.Time) int {
		n := 0
		for ; time.Now().Before(until); n++ {
			anon.Publish(host.HeartbeatSubject(cluster), decoys[n%bodies])
		}
		anon.Flush()
		return n
	})
	t.Logf("flood of %d decoys in %v; web-1's heartbeats taken at worst %v after they were sent; %v dropped as queue_full",
		n, took.Round(time.Millisecond), worst.Round(time.Millisecond), e.dropped("queue_full"))
	if worst > bound {
		t.Errorf("a heartbeat of web-1 was taken %v after it was sent, during a flood of long heartbeats naming it first; want at most %v", worst, bound)
	}
}

// startWithWeb1 starts a gateway on a bus of its own, for up to 100
// hosts, and web-1, enrolled, announced over a connection of its own (no
// credentials, as a host has) and routable. It returns the gateway,
// web-1's connection and the URL a host connects with. The gateway drops
// a host only after 50 missed heartbeats: the flood tests check a bound
// on how late a heartbeat is taken far below that.
func startWithWeb1(t *testing.T) (e *env, hc *nats.Conn, hostURL string) {
	t.Helper()
	gatewayURL, hostURL := startGatewayBus(t)
	e = start(t, gatewayURL, func(o *discovery.Options) {
		o.MaxHosts = 100
		o.MissedHeartbeats, o.HostTTL = 50, 20*time.Second
	})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	hc = tu.Connect(t, hostURL)
	a, _ := json.Marshal(announce("web-1", cs.addr, pub, "hello"))
	if err := hc.Publish(host.AnnounceSubject(cluster), a); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "web-1 not routable")
	return e, hc, hostURL
}

// web1HeartbeatsDuring runs flood on a goroutine of its own until
// floodFor has passed (it returns how many messages it published, once
// flushed) and, while it runs and for a second after, sends a heartbeat
// of web-1 on hc every hbEvery and waits until the gateway has taken it
// (its LastHeartbeat). It returns the longest any heartbeat waited, the
// flood's count and how long the flood took.
func web1HeartbeatsDuring(t *testing.T, e *env, hc *nats.Conn, floodFor time.Duration, flood func(until time.Time) int) (worst time.Duration, n int, took time.Duration) {
	t.Helper()
	sent := make(chan int, 1)
	began := time.Now()
	go func() { sent <- flood(began.Add(floodFor)) }()

	hb, _ := json.Marshal(heartbeat("web-1", 0))
	ended := time.Time{}
	for ended.IsZero() || time.Since(ended) < time.Second {
		at := time.Now()
		if err := hc.Publish(host.HeartbeatSubject(cluster), hb); err != nil {
			t.Fatal(err)
		}
		for e.info("web-1").LastHeartbeat.Before(at) && time.Since(at) < 3*floodFor {
			time.Sleep(5 * time.Millisecond)
		}
		wait := e.info("web-1").LastHeartbeat.Sub(at)
		if wait < 0 {
			wait = time.Since(at)
		}
		worst = max(worst, wait)
		select {
		case n = <-sent:
			ended = time.Now()
		default:
		}
		time.Sleep(hbEvery)
	}
	return worst, n, ended.Sub(began)
}
