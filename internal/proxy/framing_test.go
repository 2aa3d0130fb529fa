package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// framingHost is a raw host for the framing tests. On its first
// connection the first request gets "warm", the second bad, written as is
// (a "\x00close" suffix closes the connection after it; each "\x00split"
// in it is a pause, so that the bytes after it come in another read),
// and any later
// one "stale", counted in stale; the requests on every later connection
// get "fresh", counted in fresh. A proxy that reads bad as an answer it
// can reuse the connection after hands the next request "stale"; one
// that sends the request again elsewhere has a "fresh" counted early.
// sent counts bad written: none, and the proxy's transport did not have
// the first connection back in its pool in time for the second request.
type framingHost struct {
	addr  string
	bad   string
	conns atomic.Int32
	stale atomic.Int32
	fresh atomic.Int32
	sent  atomic.Int32
}

func newFramingHost(t *testing.T, bad string, conf *tls.Config) *framingHost {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &framingHost{addr: ln.Addr().String(), bad: bad}
	if conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	testutil.ServeConns(t, ln, func(c net.Conn) { h.serve(c, h.conns.Add(1) == 1) })
	return h
}

func (h *framingHost) serve(c net.Conn, first bool) {
	br := bufio.NewReader(c)
	for i := 0; ; i++ {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"
		switch {
		case first && i == 0:
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nwarm"
		case first && i == 1:
			var closeAfter bool
			h.sent.Add(1)
			resp, closeAfter = strings.CutSuffix(h.bad, "\x00close")
			for j, part := range strings.Split(resp, "\x00split") {
				if j > 0 {
					time.Sleep(20 * time.Millisecond) // the proxy has read the bytes before
				}
				if _, err := io.WriteString(c, part); err != nil {
					return
				}
			}
			if closeAfter {
				return
			}
			continue
		case first:
			h.stale.Add(1)
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
		default:
			h.fresh.Add(1)
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
	}
}

// TestHostResponseFraming: a host's response whose framing is ambiguous
// or broken is answered alike on every HTTP/1 path to a host (the fast
// path, ReverseProxy to an http host and to an https one), on a kept-alive
// connection, which is never used again: the next request goes on a new
// one. Nor is the request sent again on another: the host read it.
//
// Content-Length and Transfer-Encoding both (RFC 9112 §6.3: a possible
// response splitting, to be handled as an error) get a 502, as a status
// outside 100-599 does, in any head, for any method or status: before,
// both paths read such an answer as chunked and reused the connection
// (ReverseProxy even for an HTTP/1.0 one, whose coding it ignores). So do
// differing or invalid lengths, and a coding that is not chunked alone.
// An HTTP/1.0 answer's coding is ignored, as net/http's client ignores
// it (the fast path refused one that was not chunked): read until the
// close. A field name with white space in it, before its colon, gets a
// 502 too (RFC 9112 §5.1; nginx's answer): net/http's client kept it as
// another field, so a "Content-Length : 7" framed nothing and the body
// was read to the close, where the host's server may have framed it by
// the length and read what followed as the next answer.
func TestHostResponseFraming(t *testing.T) {
	t.Parallel()
	const fail = http.StatusBadGateway
	tests := []struct {
		name, method, resp string
		status             int
		body               string // for a 200
	}{
		{"length and chunked", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", fail, ""},
		{"chunked and length", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n", fail, ""},
		{"length and chunked, HTTP/1.0 kept alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello", fail, ""},
		{"length and chunked to a HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", fail, ""},
		{"length and chunked on a 204", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n", fail, ""},
		{"length and chunked on a 1xx", "GET", "HTTP/1.1 103 Early Hints\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", fail, ""},
		// However the reads split the head: none of its last line end is
		// handed to net/http's client, and the first read never fails.
		{"both, the last line end split", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\x00split\n5\r\nhello\r\n0\r\n\r\n", fail, ""},
		{"both, the last CRLF apart", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\x00split\r\n", fail, ""},
		{"both, LF line ends, the last apart", "GET", "HTTP/1.1 200 OK\nContent-Length: 5\nTransfer-Encoding: chunked\n\x00split\n5\r\nhello\r\n0\r\n\r\n", fail, ""},
		{"both, a name split", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nTransfer-Enc\x00split\x00splitoding: chunked\r\n\r\n", fail, ""},
		{"both after a 1xx read apart", "GET", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\x00splitHTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", fail, ""},
		{"length and another coding", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\nhello", fail, ""},
		{"two lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", fail, ""},
		{"a list of lengths", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!", fail, ""},
		{"a signed length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", fail, ""},
		{"a length with a space", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5 5\r\n\r\nhello", fail, ""},
		{"a hex length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\nhello", fail, ""},
		{"an invalid length to a HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", fail, ""},
		{"another coding", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello", fail, ""},
		{"chunked then another coding", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nhello", fail, ""},
		{"another coding then chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", fail, ""},
		{"chunked twice", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", fail, ""},
		{"another coding, HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: gzip\r\n\r\nhello, until close\x00close", http.StatusOK, "hello, until close"},
		// White space before a colon (RFC 9112 §5.1): a server that reads
		// the name trimmed frames the answer otherwise.
		{"a space before the colon of a length", "GET", "HTTP/1.1 200 OK\r\nContent-Length : 7\r\n\r\nhello, until close\x00close", fail, ""},
		{"a space before the colon of a length, kept alive", "GET", "HTTP/1.1 200 OK\r\nContent-Length : 7\r\n\r\nhello, HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged", fail, ""},
		{"a space before the colon of a coding", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\x00close", fail, ""},
		{"a space before the colon of another field", "GET", "HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 5\r\n\r\nhello", fail, ""},
		{"spaces before the colon to a HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length  : 5\r\n\r\n", fail, ""},
		{"a space before the colon on a 1xx", "GET", "HTTP/1.1 103 Early Hints\r\nLink : </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", fail, ""},
		{"a space inside a name", "GET", "HTTP/1.1 200 OK\r\nContent Length: 5\r\nContent-Length: 5\r\n\r\nhello", fail, ""},
		{"a tab before the colon", "GET", "HTTP/1.1 200 OK\r\nContent-Length\t: 5\r\n\r\nhello", fail, ""},
		{"a space before the colon, the head split", "GET", "HTTP/1.1 200 OK\r\nContent-Length \x00split: 5\r\n\r\x00split\nhello\x00close", fail, ""},
		// The status line (RFC 9112 §4), read alike on every path: what
		// its grammar allows, a minor version past 1 read as 1.1; not
		// what net/http's client takes beyond it.
		{"HTTP/1.2", "GET", "HTTP/1.2 200 OK\r\nX-A: 1\r\n\r\nhello, until close\x00close", http.StatusOK, "hello, until close"},
		{"no reason", "GET", "HTTP/1.1 200\r\n\r\nhello, until close\x00close", http.StatusOK, "hello, until close"},
		{"a reason with obs-text and a tab", "GET", "HTTP/1.1 200 D\xe9j\xe0\tvu\r\n\r\nhello, until close\x00close", http.StatusOK, "hello, until close"},
		{"HTTP/1.0, no reason", "GET", "HTTP/1.0 200\r\n\r\nhello, until close\x00close", http.StatusOK, "hello, until close"},
		{"two spaces before the code", "GET", "HTTP/1.1  200 OK\r\nContent-Length: 5\r\n\r\nhello", fail, ""},
		{"two spaces before the code, the line split", "GET", "HTTP/1.1  200 O\x00splitK\r\x00split\nContent-Length: 5\r\n\r\nhello", fail, ""},
		{"HTTP/2.0", "GET", "HTTP/2.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", fail, ""},
		{"HTTP/0.9", "GET", "HTTP/0.9 200 OK\r\n\r\nhello, until close\x00close", fail, ""},
		{"a sign before the code", "GET", "HTTP/1.1 +99 OK\r\nContent-Length: 5\r\n\r\nhello", fail, ""},
		{"two spaces before a 1xx's code", "GET", "HTTP/1.1  103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", fail, ""},
	}
	cert, _ := testutil.SelfSigned(t, "127.0.0.1")
	hostTLS := &tls.Config{Certificates: []tls.Certificate{cert}}
	paths := []framingRoute{
		{"fast path", false, nil},
		{"ReverseProxy", true, nil},
		{"ReverseProxy https", true, hostTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, path := range paths {
				// net/http's transport puts a connection back in its pool
				// on its own goroutine after the body's EOF: on a busy
				// machine the second request can find the pool empty and
				// go on a new connection, which never gets bad. That is
				// no resend (bad was never sent): the path is tried again.
				for attempt := 1; ; attempt++ {
					if framingPath(t, path, tt.method, tt.resp, tt.status, tt.body) {
						break
					}
					if attempt == 3 {
						t.Fatalf("%s: in %d attempts the second request never went on the first connection", path.name, attempt)
					}
					t.Logf("%s: the second request went on a new connection; again", path.name)
				}
			}
		})
	}
}

// framingPath runs one path of TestHostResponseFraming against a fresh
// host and proxy: a request answered "warm", then one answered bad (the
// case's resp), then one that must go on a new connection. It reports
// false, having checked nothing, if the host never sent bad: the proxy's
// transport took a new connection for the second request.
func framingPath(t *testing.T, path framingRoute, method, bad string, status int, want string) bool {
	t.Helper()
	h := newFramingHost(t, bad, path.tls)
	var logs testutil.SyncBuffer
	p, _ := New(Options{ClusterID: "c1", DisableFastPath: path.disable, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer p.Close()
	backend := h.addr
	if path.tls != nil {
		backend = "https://" + backend
	}
	srv := proxyServer(t, p, backend)
	do := func(method string) (*http.Response, string) {
		req, _ := http.NewRequest(method, srv.URL+"/", nil)
		req.Host = "hello.apps.test"
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path.name, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, body := do("GET"); res.StatusCode != http.StatusOK || body != "warm" {
		t.Fatalf("%s: the first request got %d %q", path.name, res.StatusCode, body)
	}
	res, body := do(method)
	if h.sent.Load() == 0 {
		return false
	}
	if n := h.fresh.Load(); n != 0 {
		t.Errorf("%s: the request went to the host again, on another connection", path.name)
	}
	if res.StatusCode != status || (status == http.StatusOK && body != want) {
		t.Errorf("%s: the client got %d %q, want %d %q", path.name, res.StatusCode, body, status, want)
	}
	if _, ok := res.Header["Content-Length "]; ok {
		t.Errorf("%s: a field name with a space reached the client: %v", path.name, res.Header)
	}
	if status == http.StatusBadGateway {
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: the 502 is %q, want a problem", path.name, ct)
		}
		if n := promtest.ToFloat64(p.opts.Metrics.UpstreamErrors.WithLabelValues("hello", "other")); n != 1 {
			t.Errorf("%s: upstream errors{reason=other} = %v, want 1", path.name, n)
		}
		if !strings.Contains(logs.String(), `msg="proxy: upstream failed"`) || !strings.Contains(logs.String(), "status=502") {
			t.Errorf("%s: no warning logged:\n%s", path.name, logs.String())
		}
	}
	res, body = do("GET")
	if res.StatusCode != http.StatusOK || body != "fresh" || h.stale.Load() != 0 || h.conns.Load() != 2 {
		t.Errorf("%s: the next request got %d %q (%d answered on the first connection, %d connections); want fresh, on a second connection",
			path.name, res.StatusCode, body, h.stale.Load(), h.conns.Load())
	}
	return true
}

// framingRoute is one HTTP/1 path from the proxy to a host.
type framingRoute struct {
	name    string
	disable bool // DisableFastPath
	tls     *tls.Config
}
