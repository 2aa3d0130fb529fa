package h2

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"

	"golang.org/x/net/http2"
)

// TestOddPathsAsNetHTTP: whatever :path a client sends, the server takes
// it apart (or refuses it) as net/http's own HTTP/2 server does: the same
// URL and RequestURI reach the handler, or the same refusal the client.
// A plain path skips url.ParseRequestURI (parseRequestURI); the shapes
// on either side of what counts as plain are here.
func TestOddPathsAsNetHTTP(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := r.URL
		w.Header().Set("X-U", strconv.Quote(fmt.Sprintf("%q %q %q %v %q %q %q %s", u.Path, u.RawPath, u.RawQuery, u.ForceQuery, u.Fragment, u.Opaque, r.RequestURI, u)))
	})
	_, ours := serve(t, Options{Handler: h})
	theirs := netHTTP2(t, h)
	for _, p := range []string{
		"/", "//x", "///x", "/a?b#c", "/a#c", "/a?", "?", "/?", "/a??", "/a?b?c",
		"/%zz", "/%2F", "/a%20b", "/%", "*", "a", "a:b", "http://h/x", "//h/x?y",
		"/é", "/a?é", "/\x80", "/a b", "/a?b c", "/a\tb", "/a?\t", "/a\x01", "/a?\x7f",
		"/a;b=c", "/a/../b", "/./a", "/a:b@c", "/~user", "/a!b", "/a'b", "/(a)", "/a*b",
		"/a[b]", "/a|b", "/a\\b", "/a^b", "/a`b", "/a{b}", "/a\"b", "/a<b>", "/a?<>",
	} {
		if got, want := askPath(t, ours, p), askPath(t, theirs, p); got != want {
			t.Errorf(":path %q: here %s; net/http %s", p, got, want)
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
