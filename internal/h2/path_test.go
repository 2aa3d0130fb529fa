package h2

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestOddPathsAsNetHTTP: whatever :path a client sends, the server takes
// it apart (or refuses it) as net/http's own HTTP/2 server does: the same
// URL and RequestURI reach the handler, or the same refusal the client.
// A plain path skips url.ParseRequestURI (parseRequestURI); the shapes
// on either side of what counts as plain are here.
func TestOddPathsAsNetHTTP(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := r.URL
		w.Header().Set("X-U", strconv.Quote(fmt.Sprintf("%q %q %q %v %q %q %q %s", u.Path, u.RawPath, u.RawQuery, u.ForceQuery, u.Fragment, u.Opaque, r.RequestURI, u)))
	})
	_, ours := serve(t, Options{Handler: h})
	theirs := netHTTP2(t, h)
	for _, p := range []string{
		"/", "//x", "///x", "/a?b#c", "/a#c", "/a?", "?", "/?", "/a??", "/a?b?c",
		"/%zz", "/%2F", "/a%20b", "/%", "a", "a:b", "http://h/x", "//h/x?y",
		"/é", "/a?é", "/\x80", "/a\tb", "/a?\t", "/a\x01", "/a?\x7f",
		"/a;b=c", "/a/../b", "/./a", "/a:b@c", "/~user", "/a!b", "/a'b", "/(a)", "/a*b",
		"/a[b]", "/a|b", "/a\\b", "/a^b", "/a`b", "/a{b}", "/a\"b", "/a<b>", "/a?<>",
	} {
		if got, want := askPath(t, ours, p), askPath(t, theirs, p); got != want {
			t.Errorf(":path %q: here %s; net/http %s", p, got, want)
		}
	}
}

// outcome sends one request on a new connection to addr and returns how
// stream 1 ended: its status, or "RST_STREAM " and the code.
func outcome(t *testing.T, addr, method, path string) string {
	t.Helper()
	rc := dialRaw(t, addr)
	defer rc.c.Close()
	rc.headers(1, true, reqFields(method, path)...)
	for {
		f, err := rc.next()
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			return "RST_STREAM " + f.ErrCode.String()
		}
	}
}

// TestRequestLineSafe: a method that is no token, or a :path with a
// space, is refused (RST_STREAM PROTOCOL_ERROR, as nginx does) where
// net/http's server takes it: the host gets both in its HTTP/1.1 request
// line, and "GET /public?a /admin HTTP/1.1" is /admin to a host that
// splits at the last space, while the gateway's policy read /public.
func TestRequestLineSafe(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })})
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/public?a /admin", "RST_STREAM PROTOCOL_ERROR"},
		{"GET", "/a b", "RST_STREAM PROTOCOL_ERROR"},
		{"G ET", "/", "RST_STREAM PROTOCOL_ERROR"},
		{"GE(T", "/", "RST_STREAM PROTOCOL_ERROR"},
		{"GET", "/a?b%20c", "200"},
		{"PURGE", "/", "200"},
	} {
		if got := outcome(t, addr, tt.method, tt.path); got != tt.want {
			t.Errorf("%q %q: %s, want %s", tt.method, tt.path, got, tt.want)
		}
	}
	if n := served.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}

// TestAsteriskOnlyForOptions: the asterisk form is OPTIONS's alone (RFC
// 9113 §8.3.1, RFC 9110 §7.1): with another method the stream is refused,
// where net/http's server hands the host "GET * HTTP/1.1".
func TestAsteriskOnlyForOptions(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Handler: http.NotFoundHandler()})
	for _, tt := range []struct{ method, want string }{
		{"GET", "RST_STREAM PROTOCOL_ERROR"},
		{"POST", "RST_STREAM PROTOCOL_ERROR"},
		{"OPTIONS", "200"}, // answered by the server, as net/http's does
	} {
		if got := outcome(t, addr, tt.method, "*"); got != tt.want {
			t.Errorf("%s *: %s, want %s", tt.method, got, tt.want)
		}
	}
}

// TestTLSFromTheConnection: a request over TLS is one whatever :scheme
// the client sends (the gateway derives X-Forwarded-Proto from it), and
// one over cleartext is not, as with net/http's server.
func TestTLSFromTheConnection(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-U", strconv.FormatBool(r.TLS != nil)) })
	cert, pool := testutil.SelfSigned(t, "a.example")
	_, tlsAddr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		_ = tc.Handshake()
		return tc
	})
	_, plainAddr := serve(t, Options{Handler: h})
	for _, tt := range []struct {
		tls    bool
		scheme string
		want   string
	}{{true, "http", "true"}, {true, "https", "true"}, {false, "https", "false"}, {false, "http", "false"}} {
		var rc *rawClient
		if tt.tls {
			c, err := tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			rc = rawOver(t, c)
		} else {
			rc = dialRaw(t, plainAddr)
		}
		rc.headers(1, true, ":method", "GET", ":scheme", tt.scheme, ":path", "/", ":authority", "a.example")
		got := ""
		for got == "" {
			f, err := rc.next()
			if err != nil {
				t.Fatalf("tls %v :scheme %s: %v", tt.tls, tt.scheme, err)
			}
			if hf, ok := f.(*http2.MetaHeadersFrame); ok && hf.StreamID == 1 {
				got = headerValue(hf, "x-u")
			}
		}
		rc.c.Close()
		if got != tt.want {
			t.Errorf("tls %v, :scheme %s: handler saw TLS %s, want %s", tt.tls, tt.scheme, got, tt.want)
		}
	}
}

// netHTTP2 is net/http's HTTP/2 server (prior knowledge) for h on loopback.
func netHTTP2(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// askPath sends GET with :path p on a connection of its own and says
// what came back: the status and X-U, or the stream's or connection's
// refusal.
func askPath(t *testing.T, addr, p string) string {
	rc := dialRaw(t, addr)
	defer rc.c.Close()
	rc.headers(1, true, reqFields("GET", p)...)
	for {
		f, err := rc.next()
		if err != nil {
			return "error " + err.Error()
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return f.PseudoValue("status") + " " + headerValue(f, "x-u")
			}
		case *http2.RSTStreamFrame:
			return "RST_STREAM " + f.ErrCode.String()
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}
