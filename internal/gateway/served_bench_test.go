package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/edge"
)

// BenchmarkServedRequest is one GET from a client on a keep-alive
// loopback connection through the plaintext listener (internal/edge),
// the whole chain and the proxy to an in-process backend returning 1 KiB:
// the path a request takes in production, server included. The lane and
// net/http alone are measured side by side; allocs/op counts the backend
// (net/http) and the client too, which are the same for both.
func BenchmarkServedRequest(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	for _, tc := range []struct {
		name    string
		disable bool
	}{{"lane", false}, {"net-http", true}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, func(o *Options) {
				o.AccessLog = false
				o.Edge.RateLimit = 1 << 30 // the limiter runs, but never refuses
			})
			e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write(body)
			}))
			ed, err := edge.New(edge.Options{HTTPAddr: "127.0.0.1:0", ManagementAddr: "127.0.0.1:0", HTTPMode: edge.ModeServe,
				Handler: e.gw, DisableLane: tc.disable, WrapHTTP: GuardListener, WrapServer: GuardServer,
				RequestContext: e.gw.RequestContext, RequestDone: e.gw.RequestDone})
			if err != nil {
				b.Fatal(err)
			}
			if err := ed.Listen(); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- ed.Run(ctx) }()
			defer func() { cancel(); <-done }()
			c, err := net.Dial("tcp", ed.Addr("http").String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte("GET /path?q=1 HTTP/1.1\r\nHost: hello." + testZone + "\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
			buf := make([]byte, 8192)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					k, err := c.Read(buf[n:])
					if err != nil {
						if err == io.EOF {
							b.Fatal("the gateway closed the connection")
						}
						b.Fatal(err)
					}
					n += k
					if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 && n-i-4 >= len(body) {
						if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 ")) {
							b.Fatalf("answer: %q", buf[:n])
						}
						break
					}
				}
			}
		})
	}
}

// BenchmarkServedRequestTLS is BenchmarkServedRequest's GET over the https
// listener, on one kept-alive connection: HTTP/1.1 (the lane over TLS)
// and HTTP/2 (gatehouse's h2 server), with Go's clients. allocs/op and
// B/op count the clients and the backend too, which are the same for
// every build: compare builds, not the two protocols.
func BenchmarkServedRequestTLS(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	for _, proto := range []string{"http1", "h2"} {
		b.Run(proto, func(b *testing.B) {
			e := newEnv(b, func(o *Options) {
				o.AccessLog = false
				o.Edge.RateLimit = 1 << 30 // the limiter runs, but never refuses
			})
			e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write(body)
			}))
			_, addr := e.serve(false)
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: proto == "h2", MaxIdleConnsPerHost: 1}
			if proto == "http1" {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			url := "https://" + addr + "/path?q=1"
			get := func() {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = "hello." + testZone
				res, err := cl.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || n != int64(len(body)) || (proto == "h2") != (res.ProtoMajor == 2) {
					b.Fatalf("answer: %s %s, %d bytes", res.Proto, res.Status, n)
				}
			}
			get() // the handshake, outside the loop
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				get()
			}
		})
	}
}
