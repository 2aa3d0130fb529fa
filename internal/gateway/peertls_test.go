package gateway

import (
	"crypto/tls"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestOwnerTLSHandshakeFailureServesHere: an owner whose gateway takes the
// TCP connection but whose TLS handshake fails (it hangs up at once, or
// shows a certificate this gateway does not trust: one expired, or for
// another name) got no byte of the request, as one that refused the
// connection did not. A write is served here then, as it is when the
// connect is refused, and the owner cools down so the next request does
// not try it again. Such a write used to get 502 although the owner never
// saw it, and every request for its apps paid a failed handshake.
func TestOwnerTLSHandshakeFailureServesHere(t *testing.T) {
	var accepted atomic.Int32
	hangUp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hangUp.Close() })
	go func() {
		for {
			c, err := hangUp.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	var untrustedConns atomic.Int32
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			untrustedConns.Add(1)
		}
	}
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	untrusted.StartTLS()                                   // its own certificate, which no gateway trusts
	t.Cleanup(untrusted.Close)

	tests := []struct {
		name  string
		url   string
		conns *atomic.Int32
	}{
		{"hangs up in the handshake", "https://" + hangUp.Addr().String(), &accepted},
		{"certificate not trusted", untrusted.URL, &untrustedConns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := startClusters(t, clusterSetup{ids: threeIDs, tls: true, edit: func(c *testCluster, o *Options) {
				if c.id != "eu" {
					return
				}
				members := o.Cluster.Members
				o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", tt.url) }
			}})
			cl := clClient(t, cs["eu"].roots)
			app := ownedBy(t, "us", threeIDs)
			before := tt.conns.Load()
			for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodPost} {
				res, body := send(t, cl, cs["eu"], m, app, "/", nil)
				if res.StatusCode != 200 || body != "served by eu" {
					t.Fatalf("%s via eu while us's TLS fails = %d %q, want 200 served by eu (us got nothing)", m, res.StatusCode, body)
				}
			}
			if n := tt.conns.Load() - before; n != 1 {
				t.Errorf("the failing owner was connected to %d times for three requests, want 1 (then it cools down)", n)
			}
			if n := len(cs["us"].host.requests()); n != 0 {
				t.Errorf("us's host saw %d requests", n)
			}
		})
	}
}

// TestOwnerUntrustedCASaysHowToTrustIt: a peer cluster whose certificate
// a private CA signed, which this gateway's roots do not hold, is logged
// with the reason and the way out (SSL_CERT_FILE, SSL_CERT_DIR: gatehouse
// has no CA setting of its own), as the bus's and the sidecar's upstream's
// are; the request is served here meanwhile.
func TestOwnerUntrustedCASaysHowToTrustIt(t *testing.T) {
	cert, _ := testutil.PrivateCA(t, "127.0.0.1")
	private := httptest.NewUnstartedServer(http.NotFoundHandler())
	private.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	private.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	private.StartTLS()
	t.Cleanup(private.Close)

	var logs testutil.SyncBuffer
	cs := startClusters(t, clusterSetup{ids: threeIDs, tls: true, edit: func(c *testCluster, o *Options) {
		if c.id != "eu" {
			return
		}
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		members := o.Cluster.Members
		o.Cluster.Members = func() cluster.Set { return withPeerURL(members(), "us", private.URL) }
	}})
	cl := clClient(t, cs["eu"].roots)
	app := ownedBy(t, "us", threeIDs)
	if res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil); res.StatusCode != 200 || body != "served by eu" {
		t.Fatalf("GET via eu while us's CA is not trusted = %d %q, want 200 served by eu", res.StatusCode, body)
	}
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"gateway: the owner cluster could not take a request for its app`) {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("the failed forward was not logged:\n%s", logs.String())
	}
	for _, want := range []string{"certificate signed by unknown authority", "the peer cluster's certificate is not signed by a CA this process trusts", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if !strings.Contains(line, want) {
			t.Errorf("the owner's line lacks %q:\n%s", want, line)
		}
	}
}
