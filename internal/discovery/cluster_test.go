package discovery_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// With a 3-node bus and one node stopped, announces and heartbeats keep
// flowing: a host on the lost node reconnects, announces again and is
// re-verified; a new host is verified; heartbeats keep hosts routable.
func TestThreeNodeClusterLosesOneNode(t *testing.T) {
	t.Parallel()
	servers := tu.StartCluster(t, 3)
	urls := func(order ...int) string {
		s := ""
		for i, n := range order {
			if i > 0 {
				s += ","
			}
			s += servers[n].ClientURL()
		}
		return s
	}
	// The gateway prefers node 2, the first host node 1: stopping node 1
	// moves the host and leaves the gateway where it is.
	gwURL := urls(1, 2, 0)
	e := startOn(t, gwURL)
	k1, pub1 := newKey(t)
	e.keys.enrol("web-1", pub1, "hello")
	runHost(t, urls(0, 1, 2), "web-1", k1, []string{"hello"}, nats.DontRandomize())
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host not routable on a healthy cluster")
	first := e.info("web-1").VerifiedAt

	servers[0].Shutdown()
	tu.WaitFor(t, 10*time.Second, func() bool { return e.info("web-1").VerifiedAt.After(first) }, "no re-announce and re-verification after the host's node stopped")

	k2, pub2 := newKey(t)
	e.keys.enrol("web-2", pub2, "hello")
	runHost(t, urls(2, 1), "web-2", k2, []string{"hello"}, nats.DontRandomize())
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-2") }, "new host not routable with one node down")

	// Heartbeats keep flowing: both stay routable over several intervals.
	lastHB := e.info("web-1").LastHeartbeat
	tu.WaitFor(t, 5*time.Second, func() bool {
		if !e.routable("hello", "web-1") || !e.routable("hello", "web-2") {
			t.Fatal("a host dropped with one node down")
		}
		return e.info("web-1").LastHeartbeat.After(lastHB.Add(5 * hbEvery))
	}, "heartbeats stopped with one node down")
}
