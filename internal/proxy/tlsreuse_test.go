package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestTLSHostAnswersReuseOneConnection: a net/http https host (TLS 1.3,
// whose session tickets come after the handshake, and TLS 1.2) answers
// a GET, a POST whose body cannot be sent again, a chunked answer with a
// trailer and a large body, all over one connection of the ReverseProxy
// path: nothing the host's TLS layer sends is taken for bytes no request
// asked for.
func TestTLSHostAnswersReuseOneConnection(t *testing.T) {
	t.Parallel()
	for _, max := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		var conns atomic.Int32
		host := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			switch r.URL.Path {
			case "/chunked":
				w.Header().Set("Trailer", "X-Sum")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "abc")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "de")
				w.Header().Set("X-Sum", "5")
			case "/large":
				_, _ = io.WriteString(w, strings.Repeat("x", 1<<20))
			default:
				_, _ = io.WriteString(w, r.Method+":"+string(b))
			}
		}))
		host.TLS = &tls.Config{MaxVersion: max, NextProtos: []string{"http/1.1"}}
		host.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
		host.StartTLS()
		t.Cleanup(host.Close)
		p, _ := New(Options{ClusterID: "c1", DisableFastPath: true})
		t.Cleanup(func() { _ = p.Close() })
		srv := proxyServer(t, p, host.URL)
		for i, c := range []struct{ method, path, body, want string }{
			{"GET", "/", "", "GET:"},
			{"POST", "/", "once", "POST:once"},
			{"GET", "/chunked", "", "abcde"},
			{"GET", "/large", "", strings.Repeat("x", 1<<20)},
			{"POST", "/", "twice", "POST:twice"},
			{"PUT", "/", "continue", "PUT:continue"},
		} {
			// A body net/http cannot rewind: a wrongly killed connection
			// is a 502, not a quiet retry.
			var body io.Reader
			if c.body != "" {
				body = io.MultiReader(strings.NewReader(c.body))
			}
			req, _ := http.NewRequest(c.method, srv.URL+c.path, body)
			req.Host = "hello.apps.test"
			if c.method == "PUT" {
				req.Header.Set("Expect", "100-continue") // a 100 Continue head before the answer
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != c.want {
				t.Fatalf("tls %x: request %d: %d %.80q, want 200 %.80q", max, i, res.StatusCode, b, c.want)
			}
			if c.path == "/chunked" && res.Trailer.Get("X-Sum") != "5" {
				t.Fatalf("tls %x: trailer %q", max, res.Trailer)
			}
			time.Sleep(5 * time.Millisecond) // a chance for the transport to pool the connection, as keptAliveRun
		}
		if n := conns.Load(); n != 1 {
			t.Fatalf("tls %x: 6 requests over %d connections to the host, want 1", max, n)
		}
	}
}
