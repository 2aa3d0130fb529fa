package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestWarningAlertBeforeHelloServed: a warning alert (not close_notify)
// ahead of the hello, which crypto/tls's server drops, does not stop the
// https listener: the passthrough host gets it and the hello unchanged
// and completes the handshake; a terminated name's handshake completes
// too.
func TestWarningAlertBeforeHelloServed(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	e := start(t, Options{Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil)})
	dial := func(t *testing.T, cfg *tls.Config) *tls.Conn {
		t.Helper()
		raw, err := net.DialTimeout("tcp", e.https, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
		// warning, unrecognized_name
		if _, err := raw.Write([]byte{21, 3, 1, 0, 2, 1, 112}); err != nil {
			t.Fatal(err)
		}
		c := tls.Client(raw, cfg)
		if err := c.Handshake(); err != nil {
			t.Fatalf("handshake after a warning alert: %v", err)
		}
		return c
	}
	t.Run("passthrough", func(t *testing.T) {
		c := dial(t, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
		if got := c.ConnectionState().PeerCertificates[0]; !got.Equal(cert.Leaf) {
			t.Fatalf("client saw %q, want the host's own certificate", got.Subject)
		}
		if _, err := io.WriteString(c, "ping"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo %q, %v", buf, err)
		}
	})
	t.Run("terminate", func(t *testing.T) {
		c := dial(t, &tls.Config{ServerName: "api." + zone, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: api."+zone+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "l7 HTTP/1.1 api."+zone {
			t.Fatalf("answer %d %q", resp.StatusCode, body)
		}
	})
}
