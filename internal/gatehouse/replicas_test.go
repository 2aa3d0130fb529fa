package gatehouse

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// One bus URL (a DNS name or a load balancer) in front of a 3-node NATS
// cluster still gets R3 buckets: the replica count follows what the
// connected server says it is, not how many URLs the config lists, so
// losing the node behind that URL loses no routing state.
func TestOneURLToClusterGetsR3(t *testing.T) {
	t.Parallel() // mostly waiting on its own cluster; keeps the package short
	servers := testutil.StartCluster(t, 3)
	cfg := testConfig(t)
	cfg.Bus.URL = []string{servers[0].ClientURL()}
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/kept", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}

	js, err := jetstream.New(testutil.Connect(t, testutil.ClusterURLs(servers)))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"gatehouse_apps", "gatehouse_domains", "gatehouse_zones", "gatehouse_records", "gatehouse_hostkeys", "gatehouse_certs", "gatehouse_locks"} {
		kv, err := js.KeyValue(t.Context(), b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		st, err := kv.Status(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if n := st.Config().Replicas; n != 3 {
			t.Errorf("%s: %d replicas through one URL to a 3-node cluster, want 3", b, n)
		}
	}

	// The node holding the apps (its only copy at R1, the leader's at R3)
	// goes; the routing state stays.
	s, err := js.Stream(t.Context(), "KV_gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	r.stop(t)
	var rest []*server.Server
	for _, ns := range servers {
		if ns.Name() == leader {
			ns.Shutdown()
			ns.WaitForShutdown()
			continue
		}
		rest = append(rest, ns)
	}
	if len(rest) != 2 {
		t.Fatalf("apps leader %q is none of the 3 nodes", leader)
	}
	js, err = jetstream.New(testutil.Connect(t, testutil.ClusterURLs(rest)))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() bool {
		kv, err := js.KeyValue(t.Context(), "gatehouse_apps")
		if err != nil {
			return false
		}
		_, err = kv.Get(t.Context(), "kept")
		return err == nil
	}, "app lost with the node that held it")
}

// A single server that carries a cluster name (a one-node "cluster" with
// no routes) is still a single server to JetStream: the gateway starts
// with R1 buckets rather than failing on R3.
func TestNamedSingleServerKeepsR1(t *testing.T) {
	ns, err := server.NewServer(&server.Options{
		ServerName: "solo",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		Cluster:    server.ClusterOpts{Name: "named"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	cfg := testConfig(t)
	cfg.Bus.URL = []string{ns.ClientURL()}
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/solo", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	js, err := jetstream.New(testutil.Connect(t, ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "gatehouse_apps")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Config().Replicas; n != 1 {
		t.Errorf("apps on a single named server: %d replicas, want 1", n)
	}
}
