package edge

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
)

// TestPassthroughKeepsTLSPosture: the https listener's floor (DESIGN §3:
// "Minimum TLS 1.2 … tls.pq_only: true refuses classical-only clients")
// holds for passthrough apps too: a hello below it is never piped to the
// host; it meets the gateway's own handshake, which refuses it with an
// alert. A hello that meets it is piped as before.
func TestPassthroughKeepsTLSPosture(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	cases := []struct {
		name   string
		pqOnly bool
		client *tls.Config
		piped  bool
	}{
		{"default client", false, &tls.Config{}, true},
		{"tls 1.2 client", false, &tls.Config{MaxVersion: tls.VersionTLS12}, true},
		{"classical client", false, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}, true},
		{"tls 1.1 client", false, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, false},
		{"pq_only: hybrid client", true, &tls.Config{}, true},
		{"pq_only: x25519 client", true, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}, false},
		{"pq_only: tls 1.2 client", true, &tls.Config{MaxVersion: tls.VersionTLS12}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host := startTLSHost(t, cert, echo)
			e := start(t, Options{
				PQOnly:      tc.pqOnly,
				TLS:         gatewayTLS(t, tlsmgr.Options{Names: []string{"api." + zone}, PQOnly: tc.pqOnly}),
				Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil),
			})
			cfg := tc.client.Clone()
			cfg.ServerName, cfg.RootCAs = "secure."+zone, pool
			c, err := dialTLS(t, e.https, cfg)
			if tc.piped {
				if err != nil {
					t.Fatalf("not piped: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("handshake succeeded (%s, curve %v)", tls.VersionName(c.ConnectionState().Version), c.ConnectionState().CurveID)
			}
			time.Sleep(50 * time.Millisecond)
			if n := host.accepted.Load(); n != 0 {
				t.Fatalf("%d connections piped to the host: %v", n, err)
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "connection still counted")
		})
	}
}
