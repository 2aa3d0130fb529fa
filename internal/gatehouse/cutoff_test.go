package gatehouse

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// startCuttableCluster starts a 3-node JetStream cluster whose third node
// reaches the other two only through links: cut, which cuts them, leaves
// it up with its clients and alone, as a network partition does. The
// first two are routed to each other directly.
//
// Every route of the third node goes through a link: it dials the others
// through links of its own, they dial it through the link it advertises,
// and it starts once the first two are routed, so that no route gossip
// tells it their own addresses (it would dial those directly).
func startCuttableCluster(t *testing.T) (servers []*server.Server, cut func()) {
	t.Helper()
	ports := []int{testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	toC := testutil.NewSilentLink(t, addr(ports[2]))
	fromC := []*testutil.SilentLink{testutil.NewSilentLink(t, addr(ports[0])), testutil.NewSilentLink(t, addr(ports[1]))}
	route := func(l *testutil.SilentLink) string { return strings.Replace(l.URL(), "nats://", "nats-route://", 1) }
	routes := [][]string{
		{"nats-route://" + addr(ports[1]), route(toC)},
		{"nats-route://" + addr(ports[0]), route(toC)},
		{route(fromC[0]), route(fromC[1])},
	}
	servers = make([]*server.Server, 3)
	startOne := func(i int) {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoSigs:     true,
			NoLog:      true,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Cluster: server.ClusterOpts{
				Name: "cuttable", Host: "127.0.0.1", Port: ports[i],
				PoolSize: -1, // one route a pair: fewer connections to follow
			},
			Routes: server.RoutesFromStr(strings.Join(routes[i], ",")),
		}
		if i == 2 {
			opts.Cluster.Advertise = strings.TrimPrefix(toC.URL(), "nats://")
		}
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %s not ready", ns.Name())
		}
		servers[i] = ns
	}
	startOne(0)
	startOne(1)
	testutil.WaitFor(t, 10*time.Second, func() bool { return servers[0].NumRoutes() == 1 }, "n1 and n2 not routed")
	startOne(2)
	testutil.WaitFor(t, 20*time.Second, func() bool {
		return servers[0].NumRoutes() == 2 && servers[1].NumRoutes() == 2 && servers[2].NumRoutes() == 2
	}, "n3 not routed to both others")
	js, err := jetstream.New(testutil.Connect(t, testutil.ClusterURLs(servers)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() bool {
		_, err := js.AccountInfo(t.Context())
		return err == nil
	}, "jetstream cluster has no meta leader")
	// A meta leader places a bucket of 3 replicas only on peers it has
	// stats from: just elected, it may have fewer, and the gateway's
	// start then ends on "no suitable peers for placement".
	testutil.WaitFor(t, 20*time.Second, func() bool {
		for _, ns := range servers {
			if len(ns.JetStreamClusterPeers()) == 3 {
				return true
			}
		}
		return false
	}, "the meta leader has not heard from all three peers")
	cut = func() {
		t.Helper()
		toC.Cut()
		fromC[0].Cut()
		fromC[1].Cut()
		// A route that did not go through a link would survive the cut:
		// then the test, not the gateway, is wrong.
		testutil.WaitFor(t, 5*time.Second, func() bool {
			return servers[2].NumRoutes() == 0 && servers[0].NumRoutes() == 1 && servers[1].NumRoutes() == 1
		}, "n3 still routed after the cut")
	}
	return servers, cut
}

// onServer moves the gateway's bus connection until it is on ns: each
// cut sends it to the next server of its pool.
func onServer(t *testing.T, r *running, servers []*server.Server, ns *server.Server) {
	t.Helper()
	const name = "gatehouse-one"
	for range 2 * len(servers) {
		at, c := gatewayConn(servers, name)
		if at == ns && r.g.bus.Load().Connected() {
			return
		}
		if c == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := at.DisconnectClientByID(c.Cid); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, func() bool {
			at2, c2 := gatewayConn(servers, name)
			return c2 != nil && (at2 != at || c2.Cid != c.Cid) && r.g.bus.Load().Connected()
		}, "gateway did not reconnect")
	}
	t.Fatalf("gateway not on %s", ns.Name())
}

// leadFrom makes servers[i] the apps bucket's stream leader: the slowest
// case for a gateway on it, which answers as leader after it is cut off
// until it finds its quorum lost, 10 to 20 s.
func leadFrom(t *testing.T, servers []*server.Server, i int) {
	t.Helper()
	nc := testutil.Connect(t, servers[(i+1)%len(servers)].ClientURL())
	req := fmt.Sprintf(`{"placement":{"preferred":%q}}`, servers[i].Name())
	testutil.WaitFor(t, 20*time.Second, func() bool {
		if appsLeader(t, servers) == i {
			return true
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.KV_gatehouse_apps", []byte(req), 2*time.Second)
		time.Sleep(500 * time.Millisecond)
		return appsLeader(t, servers) == i
	}, "the apps bucket's leader never moved to "+servers[i].Name())
}

// A gateway whose bus node is cut off from the other two (a partition:
// the node and the gateway's link to it up, the node's routes down)
// moves to a node of the majority: control writes answer 200 again, and
// a host that heartbeats through a majority node is served (again: it
// may have missed heartbeats enough before the move). The node cut off
// leads the apps bucket, the slowest case (leadFrom). On the
// node cut off, writes answered 503 until the partition healed, and the
// host, whose heartbeats no longer reached the gateway, went out of
// rotation.
func TestCutOffBusNodeMovesGateway(t *testing.T) {
	t.Parallel() // mostly waiting on its own cluster; keeps the package short
	servers, cut := startCuttableCluster(t)
	cfg := testConfig(t)
	cfg.Bus.URL = urlsOf(servers, 2, 0, 1)
	// Heartbeats every second rather than 5: the host is surely out of
	// rotation long before the move (3 missed, 3 s, against the 10 s and
	// more the cut-off watch takes), so its being served after the move
	// shows heartbeats reaching the gateway again, and the wait for the
	// next one after the move is 2 s, not 6.
	cfg.HeartbeatInterval = time.Second
	r, logs := startLogging(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/part", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runHostOn(t, r, servers[0].ClientURL(), cfg.HeartbeatInterval, "one", "h1", "part", "http", ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(r.g.Live().Load().Pool("part")) == 1 }, "host not routable")
	onServer(t, r, servers, servers[2])
	leadFrom(t, servers, 2)
	if n := strings.Count(logs.String(), movedMsg); n != 0 {
		t.Fatalf("%d moves on a healthy cluster:\n%s", n, logs.String())
	}

	cut()
	began := time.Now()
	var movedAt time.Time // when the test first saw the gateway on another node
	wrote, served := false, false
	for i := 0; !wrote || !served; i++ {
		if time.Since(began) > 40*time.Second {
			t.Fatalf("after %s on a node cut off: write 200 %v, host served %v; gateway on %s\n%s",
				time.Since(began).Round(time.Second), wrote, served, r.g.bus.Load().Conn().ConnectedUrl(), logs.String())
		}
		if b := r.g.bus.Load(); movedAt.IsZero() && b.Connected() && b.Conn().ConnectedUrl() != servers[2].ClientURL() {
			movedAt = time.Now()
			t.Logf("gateway on %s %s after the cut", b.Conn().ConnectedUrl(), movedAt.Sub(began).Round(100*time.Millisecond))
		}
		if !wrote {
			code, _ := r.control(t, "PUT", fmt.Sprintf("/api/v3/apps/after%d", i), `{}`)
			if wrote = code == 200; wrote {
				t.Logf("a write answered 200 %s after the cut", time.Since(began).Round(100*time.Millisecond))
			}
		}
		// Heartbeats reach the gateway again after the move: from the next
		// one on, the host is served. Before it, it may be out of rotation
		// for the heartbeats the node cut off did not pass on.
		if !served && !movedAt.IsZero() && time.Since(movedAt) > cfg.HeartbeatInterval+time.Second {
			resp, body := r.get(t, "part.test.local", "/", nil)
			served = resp.StatusCode == 200 && body == "ok"
		}
		time.Sleep(250 * time.Millisecond)
	}
	if u := r.g.bus.Load().Conn().ConnectedUrl(); u == servers[2].ClientURL() {
		t.Errorf("gateway still on the node cut off, %s", u)
	}
	lines := logLines(logs.String(), movedMsg)
	if len(lines) != 1 {
		t.Fatalf("%d lines %q, want 1:\n%s", len(lines), movedMsg, logs.String())
	}
	t.Logf("%s", lines[0])
	for _, f := range []string{`"level":"WARN"`, `"server":"` + servers[2].ClientURL(), `"for":`, `"err":`} {
		if !strings.Contains(lines[0], f) {
			t.Errorf("the move's line lacks %s: %s", f, lines[0])
		}
	}
	// The host stays served: nothing flaps back to the node cut off.
	resp, body := r.get(t, "part.test.local", "/", nil)
	if resp.StatusCode != 200 || body != "ok" {
		t.Errorf("after the move: %d %q", resp.StatusCode, body)
	}
}

// movedMsg is what the gateway logs as it leaves a bus node cut off from
// its cluster.
const movedMsg = "bus: server cut off from its cluster; moving to another server"

// logLines returns the lines of log that contain sub.
func logLines(log, sub string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}
