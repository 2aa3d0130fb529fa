package bus_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
)

// movedMsg is what the bus logs as it leaves a server cut off from its
// cluster.
const movedMsg = "bus: server cut off from its cluster; moving to another server"

// cutOffBus starts a bus on urls whose LeaveCutOff, with short bounds,
// probes JetStream's account info (answered only where the cluster has a
// meta leader) until the test ends.
func cutOffBus(t *testing.T, urls string, after, every time.Duration) (*bus.Bus, *logBuf) {
	t.Helper()
	logs := new(logBuf)
	b, err := bus.New(bus.Options{URL: urls, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	b.SetCutOffTimes(after, every, 100*time.Millisecond, time.Second)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.LeaveCutOff(ctx, func(ctx context.Context) error {
			_, err := b.JetStream().AccountInfo(ctx)
			return err
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("LeaveCutOff = %v", err)
		}
		b.Close()
	})
	return b, logs
}

// A bus on a healthy cluster never moves: every probe passes.
func TestCutOffHealthyClusterStays(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	b, logs := cutOffBus(t, testutil.ClusterURLs(servers), 500*time.Millisecond, time.Second)
	on := b.Conn().ConnectedServerId()
	time.Sleep(1500 * time.Millisecond) // some 15 probes, three times the bound
	if n := len(logs.lines(movedMsg)); n != 0 || b.Conn().ConnectedServerId() != on {
		t.Fatalf("moved %d times on a healthy cluster:\n%s", n, logs.String())
	}
}

// A cluster with no quorum anywhere (two of three servers down: the one
// left fails every probe) moves the bus at most once per bound, not round
// and round its servers; and a move lands on a server again.
func TestCutOffNoQuorumMovesOncePerBound(t *testing.T) {
	t.Parallel()
	servers := testutil.StartCluster(t, 3)
	b, logs := cutOffBus(t, testutil.ClusterURLs(servers), 300*time.Millisecond, 2*time.Second)
	servers[0].Shutdown()
	servers[1].Shutdown()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return b.Connected() && b.Conn().ConnectedUrl() == servers[2].ClientURL()
	}, "bus not on the server left")
	// A meta leader left alone answers until it finds its quorum lost, 10 s;
	// the first move came 15-16 s after the shutdowns on a quiet machine.
	testutil.WaitFor(t, 40*time.Second, func() bool { return len(logs.lines(movedMsg)) > 0 }, "never moved off a server with no quorum:\n"+logs.String())
	began := time.Now()
	time.Sleep(5 * time.Second)
	took := time.Since(began)
	moves := logs.lines(movedMsg)
	t.Logf("%d moves in %s; the first: %s", len(moves), took.Round(100*time.Millisecond), moves[0])
	if max := int(took/(2*time.Second)) + 1; len(moves) > max { // the first, then one per 2 s
		t.Fatalf("%d moves in %s, want at most %d (one per 2 s):\n%s", len(moves), took, max, strings.Join(moves, "\n"))
	}
	for _, f := range []string{"level=WARN", "server=" + servers[2].ClientURL(), "server_name=n3", "for=", "err="} {
		if !strings.Contains(moves[0], f) {
			t.Errorf("the move's line lacks %s: %s", f, moves[0])
		}
	}
	testutil.WaitFor(t, 10*time.Second, b.Connected, "not connected after the moves")
}

// With one server known there is nowhere to move: a bus on a server that
// fails every probe (here: it has no JetStream) stays, as does the
// embedded bus, the one server there is.
func TestCutOffOneServerStays(t *testing.T) {
	t.Parallel()
	ns := userServer(t, "127.0.0.1:0", "pw-0123456789")
	b, logs := cutOffBus(t, "nats://gw:pw-0123456789@"+ns.Addr().String(), 200*time.Millisecond, 200*time.Millisecond)
	time.Sleep(time.Second)
	if n := len(logs.lines(movedMsg)); n != 0 {
		t.Fatalf("moved %d times with one server known:\n%s", n, logs.String())
	}
	if !b.Connected() {
		t.Fatal("not connected")
	}

	eb := startEmbeddedIn(t, t.TempDir(), "127.0.0.1:0")
	done := make(chan error, 1)
	go func() {
		done <- eb.LeaveCutOff(t.Context(), func(context.Context) error { return errors.New("no quorum") })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LeaveCutOff on the embedded bus = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LeaveCutOff on the embedded bus did not return")
	}
}

// A token in bus.url (user info with no password) is never logged: not as
// the bus connects, as it moves off a server that fails its probes (here
// from one name of the server to another: it has no JetStream), nor as it
// reconnects there.
func TestCutOffTokenNotLogged(t *testing.T) {
	t.Parallel()
	const token = "tok-0123456789abcdef"
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, Authorization: token})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	_, port, _ := net.SplitHostPort(ns.Addr().String())
	_, logs := cutOffBus(t, "nats://"+token+"@127.0.0.1:"+port+",nats://"+token+"@localhost:"+port, 200*time.Millisecond, 200*time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return len(logs.lines(movedMsg)) > 0 && len(logs.lines("nats reconnected")) > 0
	}, "never moved:\n"+logs.String())
	for _, msg := range []string{"connected to nats", movedMsg, "nats reconnected"} {
		for _, l := range logs.lines(msg) {
			if strings.Contains(l, token) {
				t.Errorf("the token was logged: %s", l)
			}
		}
	}
}
