package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// TestFastPathNoRetryAfterResponseBytes: a GET on a kept-alive connection
// is sent again on a new one only when nothing at all came back (the host
// had closed the connection before it read the request), as net/http's
// Transport does. A host that began its answer and then broke the
// connection did take the request: it is not sent to it a second time.
func TestFastPathNoRetryAfterResponseBytes(t *testing.T) {
	for _, tc := range []struct{ name, partial string }{
		{"part of the status line", "HTTP/1.1 2\x00reset"},
		{"the status line", "HTTP/1.1 200 OK\r\n\x00reset"},
		{"part of the head", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Le\x00reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newScripted(t)
			p, _ := New(Options{ClusterID: "c1"})
			defer p.Close()
			srv := proxyServer(t, p, be.ln.Addr().String())
			get := func() int {
				req, _ := http.NewRequest("GET", srv.URL+"/", nil)
				req.Host = "hello.apps.test"
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				return res.StatusCode
			}
			be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if s := get(); s != 200 {
				t.Fatalf("first request: %d", s)
			}
			be.set(tc.partial) // on the pooled connection: part of an answer, then a reset
			if s := get(); s != http.StatusBadGateway {
				t.Fatalf("status %d, want 502", s)
			}
			time.Sleep(20 * time.Millisecond)
			be.mu.Lock()
			n := len(be.heads)
			be.mu.Unlock()
			if n != 1 {
				t.Fatalf("the host received the GET %d times, want 1", n)
			}
		})
	}
}
