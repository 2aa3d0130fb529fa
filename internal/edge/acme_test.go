package edge

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// TestTerminateWithPebbleCertificate: the gateway's own listeners answer
// a real Pebble's HTTP-01 or TLS-ALPN-01 challenge, and then terminate
// client TLS with the issued certificate in front of the L7 handler.
func TestTerminateWithPebbleCertificate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		noHTTP, noTLS bool
	}{{"http-01", false, true}, {"tls-alpn-01", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			httpPort, httpsPort := tlsmgrtest.FreePort(t), tlsmgrtest.FreePort(t)
			p := tlsmgrtest.Start(t, httpPort, httpsPort)
			// Distinct names: certmagic keeps active challenges in one
			// process-wide map keyed by name, so parallel issuances of one
			// name would clobber each other's challenge.
			name := strings.ReplaceAll(tc.name, "-", "") + "." + zone
			m, err := tlsmgr.New(tlsmgr.Options{Names: []string{name}, Directory: p.Directory, CARoot: p.CARoot,
				StorageDir: t.TempDir(), HTTPPort: httpPort, TLSPort: httpsPort,
				DisableHTTPChallenge: tc.noHTTP, DisableTLSALPNChallenge: tc.noTLS})
			if err != nil {
				t.Fatal(err)
			}
			e := start(t, Options{HTTPAddr: fmt.Sprintf("127.0.0.1:%d", httpPort), HTTPSAddr: fmt.Sprintf("127.0.0.1:%d", httpsPort),
				TLS: m.TLSConfig(), ACME: m.HTTPHandler, HTTPMode: ModeACMEOnly})
			ctx, cancel := context.WithCancel(context.Background())
			runErr := make(chan error, 1)
			go func() { runErr <- m.Run(ctx) }()
			defer func() { cancel(); <-runErr }()

			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Roots}, ForceAttemptHTTP2: true,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "tcp", e.https)
				}}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			var body string
			testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
				resp, err := hc.Get("https://" + name + "/hello")
				if err != nil {
					return false
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				return resp.StatusCode == 200
			}, "no request served with a pebble certificate")
			if body != "l7 HTTP/2.0 "+name {
				t.Fatalf("body %q", body)
			}
			if p.Orders() != 1 {
				t.Fatalf("pebble orders: %d", p.Orders())
			}
		})
	}
}

// TestHandshakeOrderBoundedByReadHeaderTimeout: a handshake for a custom
// domain whose on-demand order hangs (a CA that never answers) ends when
// listeners.read_header_timeout runs out, as every handshake does
// (config.md), not when the order gives up: with a timeout under the
// handshake's wait for the order (8 s), the client was held until then.
func TestHandshakeOrderBoundedByReadHeaderTimeout(t *testing.T) {
	ca, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ca.Accept()
			if err != nil {
				return
			}
			held <- c // never answered
		}
	}()
	t.Cleanup(func() {
		ca.Close()
		for {
			select {
			case c := <-held:
				c.Close()
			default:
				return
			}
		}
	})
	m, err := tlsmgr.New(tlsmgr.Options{Directory: "https://" + ca.Addr().String() + "/dir",
		CustomDomains: tlsmgr.CustomDomainsAuto, Allow: func(context.Context, string) error { return nil },
		StorageDir: t.TempDir(), HTTPPort: tlsmgrtest.FreePort(t), TLSPort: tlsmgrtest.FreePort(t)})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 2 * time.Second
	e := start(t, Options{ReadHeaderTimeout: budget, TLS: m.TLSConfig(), ACME: m.HTTPHandler})
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- m.Run(ctx) }()
	defer func() { cancel(); <-runErr }()

	start := time.Now()
	c, err := tls.DialWithDialer(&net.Dialer{Deadline: time.Now().Add(20 * time.Second)}, "tcp", e.https,
		&tls.Config{ServerName: "hung.customer.test", InsecureSkipVerify: true})
	took := time.Since(start)
	if err == nil {
		c.Close()
	}
	t.Logf("handshake ended after %v: %v", took, err)
	if took > budget+time.Second {
		t.Fatalf("the handshake was held %v with the order hung; want it ended within read_header_timeout (%v)", took, budget)
	}
}
