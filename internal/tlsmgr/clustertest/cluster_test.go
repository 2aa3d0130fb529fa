package clustertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
	"github.com/nats-io/nats.go/jetstream"
)

var _ tlsmgr.KV = (*store.CertKV)(nil)

// gatewayStore opens the store as one gateway would: its own connection
// to the shared bus.
func gatewayStore(t *testing.T, url string) *store.Store {
	t.Helper()
	js, err := jetstream.New(testutil.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.Context(), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTwoGatewaysOneBus: two gateways on one bus manage the same name;
// Pebble sees exactly one order and both serve the same certificate. The
// challenge listeners alternate between the two gateways, so the one that
// did not order often answers the CA, from the shared storage.
func TestTwoGatewaysOneBus(t *testing.T) {
	ns := testutil.StartBus(t)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpPort, tlsPort := httpLn.Addr().(*net.TCPAddr).Port, tlsLn.Addr().(*net.TCPAddr).Port
	p := tlsmgrtest.Start(t, httpPort, tlsPort)

	const name = "app.example.test"
	var mgrs []*tlsmgr.Manager
	for i := 0; i < 2; i++ {
		m, err := tlsmgr.New(tlsmgr.Options{Names: []string{name}, Directory: p.Directory, CARoot: p.CARoot,
			Storage: gatewayStore(t, ns.ClientURL()).Certs(), HTTPPort: httpPort, TLSPort: tlsPort})
		if err != nil {
			t.Fatal(err)
		}
		mgrs = append(mgrs, m)
	}
	var next atomic.Uint32
	pick := func() *tlsmgr.Manager { return mgrs[next.Add(1)%2] }

	var wg sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pick().HTTPHandler(http.NotFoundHandler()).ServeHTTP(w, r)
	})}
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(httpLn) }()
	go func() {
		defer wg.Done()
		for {
			c, err := tlsLn.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = tls.Server(c, pick().TLSConfig()).Handshake()
			}()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for _, m := range mgrs {
		go func() { errs <- m.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range mgrs {
			if err := <-errs; err != nil {
				t.Errorf("run: %v", err)
			}
		}
		srv.Close()
		tlsLn.Close()
		wg.Wait()
	}()

	var leaves []*x509.Certificate
	for i, m := range mgrs {
		addr := serveTLS(t, m.TLSConfig())
		var leaf *x509.Certificate
		testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, RootCAs: p.Roots})
			if err != nil {
				return false
			}
			defer c.Close()
			leaf = c.ConnectionState().PeerCertificates[0]
			return true
		}, "gateway "+string(rune('a'+i))+" never served the pebble certificate")
		leaves = append(leaves, leaf)
	}
	if !leaves[0].Equal(leaves[1]) {
		t.Fatal("the two gateways serve different certificates")
	}
	if n := p.Orders(); n != 1 {
		t.Fatalf("pebble saw %d orders, want exactly 1", n)
	}
}

// serveTLS completes handshakes with cfg on a loopback listener.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_ = tls.Server(c, cfg).Handshake()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}
