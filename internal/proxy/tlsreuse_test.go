package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestTLSHostAnswersWithoutBodyReuseOneConnection: the answers net/http's
// reader ends otherwise than by a body read to its end (a HEAD's, a 204,
// a 304, whose connection is back in the pool before the answer is
// handed on; a 103 before the answer; a 100 Continue the request's body
// waits for) leave a TLS host's connection to the next request, whose
// write waits for that reader's look (awaitReader) and is answered: no
// request waits on a reader that is not coming.
func TestTLSHostAnswersWithoutBodyReuseOneConnection(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	host := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/103":
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "after 103")
		default:
			w.Header().Set("Content-Length", strconv.Itoa(len(r.Method)+1+len(b)))
			_, _ = io.WriteString(w, r.Method+":"+string(b))
		}
	}))
	host.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
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
	client := srv.Client()
	client.Timeout = 5 * time.Second // a request left waiting fails here, not at the suite's timeout
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"HEAD", "/", "", http.StatusOK, ""},
		{"GET", "/204", "", http.StatusNoContent, ""},
		{"GET", "/304", "", http.StatusNotModified, ""},
		{"GET", "/103", "", http.StatusOK, "after 103"},
		{"PUT", "/", "continue", http.StatusOK, "PUT:continue"},
	}
	for round := range 3 {
		for _, c := range cases {
			var body io.Reader
			if c.body != "" {
				body = io.MultiReader(strings.NewReader(c.body)) // not sent twice by net/http
			}
			req, _ := http.NewRequest(c.method, srv.URL+c.path, body)
			req.Host = "hello.apps.test"
			if c.method == "PUT" {
				req.Header.Set("Expect", "100-continue")
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatalf("round %d, %s %s: %v", round, c.method, c.path, err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != c.status || string(b) != c.want {
				t.Fatalf("round %d, %s %s: %d %q, want %d %q", round, c.method, c.path, res.StatusCode, b, c.status, c.want)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d requests over %d connections to the host, want 1", 3*len(cases), n)
	}
}
