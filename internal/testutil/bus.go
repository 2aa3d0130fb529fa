package testutil

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartBus starts an embedded NATS server with JetStream on a random
// loopback port, its store in t.TempDir(). It is shut down when t ends.
func StartBus(t testing.TB) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "test",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
		JetStream:  true,
		StoreDir:   t.TempDir(),
	}
	return startServer(t, opts)
}

// StartBusTLS is StartBus with clients required to speak TLS, the server
// presenting cert: a bus to reach as tls:// (or wss://) whose certificate
// the client must trust.
func StartBusTLS(t testing.TB, cert tls.Certificate) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "test-tls",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		NoLog:      true,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		TLS:        true,
		TLSConfig:  &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSTimeout: 2,
	}
	return startServer(t, opts)
}

func startServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatalf("nats server %s not ready", opts.ServerName)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// StartCluster starts n clustered NATS servers with JetStream, in one
// process, routed to each other, and waits until JetStream has a leader.
// Servers are returned in start order; any of them may be Shutdown by the
// test to simulate a node loss.
func StartCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = FreePort(t)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoSigs:     true,
			NoLog:      true,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Cluster: server.ClusterOpts{
				Name: "testcluster",
				Host: "127.0.0.1",
				Port: ports[i],
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("nats server %d: %v", i, err)
		}
		ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		servers[i] = ns
	}
	for _, ns := range servers {
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %s not ready", ns.Name())
		}
	}
	// JetStream in clustered mode needs a meta leader before any KV can be
	// created.
	nc := Connect(t, ClusterURLs(servers))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 20*time.Second, func() bool {
		_, err := js.AccountInfo(t.Context())
		return err == nil
	}, "jetstream cluster has no meta leader")
	return servers
}

// ClusterURLs joins the client URLs of servers for nats.Connect.
func ClusterURLs(servers []*server.Server) string {
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Connect dials url (one or several, comma separated) and closes the
// connection when t ends.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("nats connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
