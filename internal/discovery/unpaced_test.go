package discovery_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) {
		o.MaxHosts = 100
		o.MissedHeartbeats, o.HostTTL = 50, 20*time.Second // the bound below is what the test checks
	})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	hc := tu.Connect(t, hostURL) // web-1's connection: no credentials, as a host has
	a, _ := json.Marshal(announce("web-1", cs.addr, pub, "hello"))
	if err := hc.Publish(host.AnnounceSubject(cluster), a); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "web-1 not routable")

	anon := tu.Connect(t, hostURL)
	_, bogus := newKey(t)
	var anns, hbs [][]byte
	for i := range ids {
		id := fmt.Sprintf("bogus-%d", i)
		a, _ := json.Marshal(announce(id, "127.0.0.1:1", bogus, "hello"))
		hb, _ := json.Marshal(heartbeat(id, 0))
		anns, hbs = append(anns, a), append(hbs, hb)
	}
	sent := make(chan int, 1)
	began := time.Now()
	go func() {
		n := 0
		for ; n < floodMsgs && time.Since(began) < floodFor; n += 2 {
			anon.Publish(host.AnnounceSubject(cluster), anns[n/2%ids])
			anon.Publish(host.HeartbeatSubject(cluster), hbs[n/2%ids])
		}
		anon.Flush()
		sent <- n
	}()

	hb, _ := json.Marshal(heartbeat("web-1", 0))
	var worst time.Duration
	n, ended := 0, time.Time{}
	for ended.IsZero() || time.Since(ended) < time.Second {
		at := time.Now()
		if err := hc.Publish(host.HeartbeatSubject(cluster), hb); err != nil {
			t.Fatal(err)
		}
		for e.info("web-1").LastHeartbeat.Before(at) && time.Since(at) < 3*floodFor {
			time.Sleep(5 * time.Millisecond)
		}
		took := e.info("web-1").LastHeartbeat.Sub(at)
		if took < 0 {
			took = time.Since(at)
		}
		worst = max(worst, took)
		select {
		case n = <-sent:
			ended = time.Now()
		default:
		}
		time.Sleep(hbEvery)
	}
	t.Logf("flood of %d messages in %v; web-1's heartbeats taken at worst %v after they were sent; %v dropped as queue_full",
		n, ended.Sub(began).Round(time.Millisecond), worst.Round(time.Millisecond), e.dropped("queue_full"))
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
	gatewayURL, hostURL := startGatewayBus(t)
	e := start(t, gatewayURL, func(o *discovery.Options) {
		o.MaxHosts = 100
		o.MissedHeartbeats, o.HostTTL = 50, 20*time.Second // the bound below is what the test checks
	})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	hc := tu.Connect(t, hostURL)
	a, _ := json.Marshal(announce("web-1", cs.addr, pub, "hello"))
	if err := hc.Publish(host.AnnounceSubject(cluster), a); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "web-1 not routable")

	anon := tu.Connect(t, hostURL)
	pad := strings.Repeat("x", host.MaxMessageSize-200)
	var decoys [][]byte
	for i := range bodies {
		decoys = append(decoys, fmt.Appendf(nil, `{"host_id":"web-1","pad":"%s","host_id":"bogus-%d","ts":%d}`, pad, i, time.Now().Unix()))
	}
	sent := make(chan int, 1)
	began := time.Now()
	go func() {
		n := 0
		for ; time.Since(began) < floodFor; n++ {
			anon.Publish(host.HeartbeatSubject(cluster), decoys[n%bodies])
		}
		anon.Flush()
		sent <- n
	}()

	hb, _ := json.Marshal(heartbeat("web-1", 0))
	var worst time.Duration
	n, ended := 0, time.Time{}
	for ended.IsZero() || time.Since(ended) < time.Second {
		at := time.Now()
		if err := hc.Publish(host.HeartbeatSubject(cluster), hb); err != nil {
			t.Fatal(err)
		}
		for e.info("web-1").LastHeartbeat.Before(at) && time.Since(at) < 3*floodFor {
			time.Sleep(5 * time.Millisecond)
		}
		took := e.info("web-1").LastHeartbeat.Sub(at)
		if took < 0 {
			took = time.Since(at)
		}
		worst = max(worst, took)
		select {
		case n = <-sent:
			ended = time.Now()
		default:
		}
		time.Sleep(hbEvery)
	}
	t.Logf("flood of %d decoys in %v; web-1's heartbeats taken at worst %v after they were sent; %v dropped as queue_full",
		n, ended.Sub(began).Round(time.Millisecond), worst.Round(time.Millisecond), e.dropped("queue_full"))
	if worst > bound {
		t.Errorf("a heartbeat of web-1 was taken %v after it was sent, during a flood of long heartbeats naming it first; want at most %v", worst, bound)
	}
}
