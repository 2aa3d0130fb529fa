package edge

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
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
	cert, pool := testutil.SelfSigned(b, "secure."+zone)
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

// discardWriter is a ResponseWriter that keeps nothing, for measuring
// what the offload path itself costs.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkOffloadHTTP2 is what an HTTP/2 request costs on its way
// through offload (the hand-over to a pooled goroutine and the stream's
// stall bound) to a handler that writes a small body: it should allocate
// nothing.
func BenchmarkOffloadHTTP2(b *testing.B) {
	var wg sync.WaitGroup
	body := []byte("ok")
	o := newOffload(&wg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
	}), time.Minute)
	defer func() { o.pool.Stop(); wg.Wait() }()
	r := httptest.NewRequest("GET", "https://hello.apps.test/", nil)
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		o.ServeHTTP(w, r)
	}
}

// BenchmarkPassthroughConnect is what one passthrough connection costs
// end to end: TCP connect, SNI peek, host dial, TLS handshake with the
// host through the pipe, a byte each way, close. It is where a cost per
// pipe opened or closed (routing, tracking, holding it in route.Conns)
// would show.
func BenchmarkPassthroughConnect(b *testing.B) {
	cert, pool := testutil.SelfSigned(b, "secure."+zone)
	h := startTLSHost(b, cert, echo)
	live := table(h.ln.Addr().String())
	conns := route.NewConns(live) // as a gateway holds its pipes
	e := start(b, Options{Passthrough: NewPassthrough(live, nil, conns).Route})
	cfg := &tls.Config{ServerName: "secure." + zone, RootCAs: pool, ClientSessionCache: tls.NewLRUClientSessionCache(1)}
	one := make([]byte, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := dialTLS(b, e.https, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
