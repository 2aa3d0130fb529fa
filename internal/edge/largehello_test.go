package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestLargeHelloServed: a hello over 16 KiB, in several records (here a
// crypto/tls client offering 200 long ALPN protocols: about 40 KiB; a
// browser's with large post-quantum key shares, many extensions or PSKs
// alike), is piped to a passthrough host and terminated by the gateway,
// as crypto/tls itself reads hellos up to 64 KiB.
func TestLargeHelloServed(t *testing.T) {
	var protos []string
	for i := range 200 {
		protos = append(protos, strings.Repeat(string(rune('a'+i%26)), 200))
	}
	protos = append(protos, "http/1.1")
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	e := start(t, Options{Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil)})

	t.Run("passthrough", func(t *testing.T) {
		c, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool, NextProtos: protos})
		if err != nil {
			t.Fatalf("handshake through the pipe: %v", err)
		}
		defer c.Close()
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
		c, err := dialTLS(t, e.https, &tls.Config{ServerName: "api." + zone, InsecureSkipVerify: true, NextProtos: protos})
		if err != nil {
			t.Fatalf("handshake with the gateway: %v", err)
		}
		defer c.Close()
		if got := c.ConnectionState().PeerCertificates[0]; got.Equal(cert.Leaf) {
			t.Fatal("api's hello reached the passthrough host")
		}
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
