package edge

import (
	"crypto/tls"
	"io"
	"testing"
)

// BenchmarkHandshake is full TLS handshakes (no resumption) terminated by
// the gateway, with the default posture (X25519MLKEM768, bootstrap ECDSA
// P-256 certificate). The client runs in the same process and its cost is
// included.
func BenchmarkHandshake(b *testing.B) {
	e := start(b, Options{})
	cfg := &tls.Config{ServerName: "api." + zone, InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := dialTLS(b, e.https, cfg)
			if err != nil {
				b.Error(err)
				return
			}
			c.Close()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
}

const benchChunk = 1 << 20

// sinkHost is a tls host that reads and discards until EOF, then answers
// the byte count's low byte so the client knows everything arrived.
func sinkHost(b *testing.B) (*tlsHost, *tls.Config) {
	cert, pool := hostCert(b, "secure."+zone)
	h := startTLSHost(b, cert, func(c *tls.Conn) {
		n, _ := io.Copy(io.Discard, c)
		_, _ = c.Write([]byte{byte(n)})
	})
	return h, &tls.Config{ServerName: "secure." + zone, RootCAs: pool}
}

func pushTLS(b *testing.B, addr string, cfg *tls.Config) {
	c, err := dialTLS(b, addr, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, benchChunk)
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	_ = c.CloseWrite()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}

// BenchmarkPassthroughDirect is the baseline for BenchmarkPassthrough: the
// same TLS client straight to the host.
func BenchmarkPassthroughDirect(b *testing.B) {
	h, cfg := sinkHost(b)
	pushTLS(b, h.ln.Addr().String(), cfg)
}

// BenchmarkPassthrough is the same client through the gateway's https
// listener: SNI peek, then a spliced pipe to the host.
func BenchmarkPassthrough(b *testing.B) {
	h, cfg := sinkHost(b)
	e := start(b, Options{Passthrough: RoutePassthrough(table(h.ln.Addr().String()), nil)})
	pushTLS(b, e.https, cfg)
}
