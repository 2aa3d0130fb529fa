package gateway

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestCloseLeavesNoPeerConnection: a forward to a peer gateway over
// HTTP/2 that is still in flight when the gateway closes (its drain cut
// the client, the handler has not returned yet) leaves no connection to
// the peer open, however it ends, and nothing dials the peer after
// Close. The HTTP/2 pool closed only the connections idle at Close: the
// one the forward ended on afterwards stayed open, its goroutines too,
// for the 90 s idle timeout after the gateway had stopped.
func TestCloseLeavesNoPeerConnection(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan string, 1), make(chan struct{})
	var opened, closed atomic.Int32
	peer := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Proto
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	peer.EnableHTTP2 = true
	peer.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	cert, roots := testutil.SelfSigned(t, "127.0.0.1")
	peer.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	peer.StartTLS()
	t.Cleanup(peer.Close)

	g := &Gateway{clusters: clusterState{transport: newPeerTransport(&tls.Config{RootCAs: roots})}}
	t.Cleanup(g.closeCluster)
	forward := func() error {
		req, err := http.NewRequest(http.MethodGet, peer.URL+"/", nil)
		if err != nil {
			return err
		}
		res, err := g.clusters.transport.RoundTrip(req)
		if err == nil {
			err = res.Body.Close()
		}
		return err
	}

	done := make(chan error, 1)
	go func() { done <- forward() }()
	select {
	case proto := <-arrived:
		if proto != "HTTP/2.0" {
			t.Fatalf("the forward reached the peer over %s, want HTTP/2.0", proto)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the forward never reached the peer")
	}
	g.closeCluster() // what Gateway.Close does for the peers
	close(release)   // the peer answers, if the connection still stands
	select {
	case err := <-done:
		t.Logf("the forward in flight at Close: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the forward in flight at Close never ended")
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return closed.Load() == opened.Load() },
		"a connection to the peer stayed open after Close")
	if err := forward(); err == nil {
		t.Error("a forward after Close succeeded, want it refused")
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("the peer saw %d connections, want 1 (none dialled after Close)", n)
	}
}
