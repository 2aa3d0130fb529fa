package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestHostConnectionCloseNamesDropped: the fields a host's Connection
// names are hop-by-hop (RFC 9110 §7.6.1) and reach no client, also when
// the same Connection says close. net/http's client drops a Connection
// that says close before ReverseProxy reads what else it names, so on
// that path (a POST; an https host) "Connection: close, X-Foo" let X-Foo
// through, on the final answer and on a 1xx. The fast path (a GET) read
// it right all along. An end-to-end field passes, and so does a field a
// Connection without close does not name.
func TestHostConnectionCloseNamesDropped(t *testing.T) {
	t.Parallel()
	const answer = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: close, X-Hint\r\nX-Hint: hop\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: hop\r\nX-App: kept\r\nContent-Length: 2\r\n\r\nok"
	serve := func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, answer)
	}
	addr := rawHost(t, serve)
	cert, _ := testutil.SelfSigned(t, "127.0.0.1")
	tlsAddr := rawHost(t, func(c net.Conn, _ *bufio.Reader) {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		defer tc.Close()
		serve(tc, bufio.NewReader(tc))
	})

	tests := []struct {
		name, scheme, url, method string
	}{
		{"fast path", "http", "http://" + addr, "GET"},
		{"reverse proxy", "http", "http://" + addr, "POST"},
		{"https host", "https", "https://" + tlsAddr, "GET"},
	}
	for _, tt := range tests {
		e := newEnv(t, nil)
		e.addHost("h1", "hello", tt.scheme, tt.url)
		var body io.Reader
		if tt.method == "POST" {
			body = strings.NewReader("upload")
		}
		req, err := http.NewRequest(tt.method, e.srv.URL+"/", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "hello." + testZone
		var hints []textproto.MIMEHeader
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				hints = append(hints, h)
				return nil
			},
		}))
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		b := readBody(t, res)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || b != "ok" || res.Header.Get("X-App") != "kept" {
			t.Errorf("%s: %d %q, X-App %q", tt.name, res.StatusCode, b, res.Header.Get("X-App"))
		}
		if v, ok := res.Header["X-Foo"]; ok {
			t.Errorf("%s: the answer carries X-Foo %q, which the host's Connection named", tt.name, v)
		}
		if len(hints) != 1 {
			t.Errorf("%s: %d 1xx reached the client, want 1", tt.name, len(hints))
			continue
		}
		if v, ok := hints[0]["X-Hint"]; ok {
			t.Errorf("%s: the 103 carries X-Hint %q, which its Connection named", tt.name, v)
		}
		if hints[0].Get("Link") == "" {
			t.Errorf("%s: the 103 lost its Link: %v", tt.name, hints[0])
		}
	}
}

// TestHostConnectionCloseNamesDroppedAnyStatusLine: net/http's client
// takes a status line with a minor version past 1, or no reason, and
// drops a Connection that says close from either; what that Connection
// named is dropped as well on the ReverseProxy path (a POST). One it also
// takes, with more than one space before the code or an HTTP version
// other than 1.x ("HTTP/2.0" over HTTP/1.1 framing), is a 502, as on the
// fast path: RFC 9112 §4 allows neither.
func TestHostConnectionCloseNamesDroppedAnyStatusLine(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"HTTP/1.1  200 OK", "HTTP/1.1   200", "HTTP/2.0 200 OK", "HTTP/1.2 200 OK", "HTTP/1.1 200"} {
		refused := strings.Contains(status, "  ") || strings.HasPrefix(status, "HTTP/2")
		addr := rawHost(t, func(c net.Conn, br *bufio.Reader) {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = io.WriteString(c, status+"\r\nConnection: close, X-Foo\r\nX-Foo: hop\r\nX-App: kept\r\nContent-Length: 2\r\n\r\nok")
		})
		e := newEnv(t, nil)
		e.addHost("h1", "hello", "http", "http://"+addr)
		req, err := http.NewRequest("POST", e.srv.URL+"/", strings.NewReader("upload"))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "hello." + testZone
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%q: %v", status, err)
		}
		b := readBody(t, res)
		res.Body.Close()
		if refused {
			if res.StatusCode != http.StatusBadGateway || strings.Contains(b, "ok") {
				t.Errorf("%q: %d %q, want a 502", status, res.StatusCode, b)
			}
			continue
		}
		if refused {
			if res.StatusCode != http.StatusBadGateway || strings.Contains(b, "ok") {
				t.Errorf("%q: %d %q, want a 502", status, res.StatusCode, b)
			}
			continue
		}
		if res.StatusCode != http.StatusOK || b != "ok" || res.Header.Get("X-App") != "kept" {
			t.Errorf("%q: %d %q, X-App %q", status, res.StatusCode, b, res.Header.Get("X-App"))
		}
		if v, ok := res.Header["X-Foo"]; ok {
			t.Errorf("%q: the answer carries X-Foo %q, which the host's Connection named", status, v)
		}
	}
}
