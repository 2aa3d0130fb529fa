package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// scripted is a raw HTTP/1.1 backend on loopback: for each request head it
// reads it records the head and writes the next scripted response bytes;
// a script ending in "\x00close" closes the connection after writing, and
// "\x00pause" inside one writes what comes before it, waits 30 ms, then
// goes on (a response that arrives in parts).
type scripted struct {
	ln    net.Listener
	mu    sync.Mutex
	heads [][]byte
	resp  string
	wg    sync.WaitGroup
	ended atomic.Int32 // connections that ended (closed by the peer, or scripted to)
	whole atomic.Int32 // responses written to the last part
}

func newScripted(t *testing.T) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *scripted) set(resp string) {
	s.mu.Lock()
	s.resp = resp
	s.heads = nil
	s.mu.Unlock()
}

func (s *scripted) serve(c net.Conn) {
	defer s.ended.Add(1)
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var head []byte
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			head = append(head, line...)
			if len(line) <= 2 {
				break
			}
		}
		s.mu.Lock()
		s.heads = append(s.heads, head)
		resp := s.resp
		s.mu.Unlock()
		body, closeAfter := strings.CutSuffix(resp, "\x00close")
		body, reset := strings.CutSuffix(body, "\x00reset")
		if reset {
			_ = c.(*net.TCPConn).SetLinger(0) // Close sends a reset
		}
		parts := strings.Split(body, "\x00pause")
		for i, part := range parts {
			if i > 0 {
				time.Sleep(30 * time.Millisecond)
			}
			if _, err := io.WriteString(c, part); err != nil {
				return
			}
		}
		s.whole.Add(1)
		if closeAfter || reset {
			return
		}
	}
}

func (s *scripted) lastHead(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heads) == 0 {
		t.Fatal("the backend saw no request")
	}
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(s.heads[len(s.heads)-1])))
	if err != nil {
		t.Fatalf("backend request head: %v\n%s", err, s.heads[len(s.heads)-1])
	}
	return r
}

// proxyServer serves p behind a real http.Server, with the route.Request
// the gateway layers would have put in the context. The backend is an
// address (an http host) or a URL (https://addr for an https one).
func proxyServer(t *testing.T, p *Proxy, backend string) *httptest.Server {
	t.Helper()
	return proxyServerWith(t, p, backend, nil)
}

// proxyServerWith is proxyServer with the ResponseWriter p writes to
// wrapped by wrap (nil: not wrapped).
func proxyServerWith(t *testing.T, p *Proxy, backend string, wrap func(http.ResponseWriter) http.ResponseWriter) *httptest.Server {
	t.Helper()
	return proxyServerOn(t, p, backend, wrap, nil)
}

// proxyServerOn is proxyServerWith whose requests' contexts derive from
// base() instead of net/http's per-request one (nil: net/http's), as the
// lane's derive from their connection's.
func proxyServerOn(t *testing.T, p *Proxy, backend string, wrap func(http.ResponseWriter) http.ResponseWriter, base func() context.Context) *httptest.Server {
	t.Helper()
	live := new(route.Live)
	b := route.NewBuilder(live)
	b.Replace(route.State{
		Zones: []*route.Zone{{Name: "apps.test"}},
		Apps:  []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive}},
	})
	if !strings.Contains(backend, "://") {
		backend = "http://" + backend
	}
	u, _ := url.Parse(backend)
	b.SetHost(&route.Host{ID: "h1", Apps: []string{"hello"}, Addr: u.Host, Scheme: u.Scheme, URL: u, State: route.HostVerified})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tb := live.Load()
		rq := &route.Request{ID: "rid-1", Table: tb, Match: tb.Lookup(r.Host), ClientIP: netip.MustParseAddr("192.0.2.7"),
			Subject: "sub", Scopes: []string{"a", "b"}}
		w.Header().Set("X-Ratelimit-Limit", "9") // a layer's header, kept unless a 1xx clears it
		if wrap != nil {
			w = wrap(w)
		}
		ctx := r.Context()
		if base != nil {
			ctx = base()
		}
		p.ServeHTTP(w, r.WithContext(route.WithRequest(ctx, rq)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

type seen struct {
	status   int
	early    []int
	earlyHdr []textproto.MIMEHeader
	header   http.Header
	body     string
	trailer  http.Header
	sent     *http.Request // what the backend received
}

// TestFastPathMatchesReverseProxy sends the same requests through a
// proxy with the fast path and one without, to scripted backend answers,
// and compares what the client got and what the backend received.
// Streamed answers carry a Content-Type: without one, whether net/http
// sniffs one for ReverseProxy depends on a race with its first flush.
func TestFastPathMatchesReverseProxy(t *testing.T) {
	be := newScripted(t)
	fastP, _ := New(Options{ClusterID: "c1"})
	slowP, _ := New(Options{ClusterID: "c1", DisableFastPath: true})
	defer fastP.Close()
	defer slowP.Close()
	fastS, slowS := proxyServer(t, fastP, be.ln.Addr().String()), proxyServer(t, slowP, be.ln.Addr().String())
	many := ""
	for i := range 30 {
		many += "X-Many-" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ": v\r\n"
	}
	tests := []struct {
		name, method, path string
		hdr                http.Header
		resp               string
	}{
		{"length", "GET", "/p/a%2Fb?q=1&r=%20", http.Header{"Cookie": {"a=1"}, "X-Forwarded-For": {"192.0.2.7"}, "Connection": {"keep-alive"}},
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-Gatehouse-Cluster: evil\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nx-lower-case: v\r\n\r\nhello"},
		{"chunked+announced trailer", "GET", "/", nil,
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n"},
		{"chunked+unannounced trailer", "GET", "/", nil,
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Late: 1\r\n\r\n"},
		// Refused on both (TestHostResponseFraming).
		{"chunked and a length", "GET", "/", nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{"until close", "GET", "/", nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close\x00close"},
		{"http/1.0", "GET", "/", nil, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok\x00close"},
		{"early hints", "GET", "/", nil, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"},
		// A host claims neither a cluster nor a failover, in a 1xx either.
		{"early hints claiming a cluster", "GET", "/", nil, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nX-Gatehouse-Cluster: evil\r\nX-Failover-Cluster: peer\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"},
		{"204", "GET", "/", nil, "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"},
		{"304", "GET", "/", nil, "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n"},
		{"head", "HEAD", "/", nil, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/html\r\n\r\n"},
		{"many headers", "GET", "/", http.Header{"X-Client": {"1", "2"}}, "HTTP/1.1 404 Not Found\r\n" + many + "Content-Length: 0\r\n\r\n"},
		{"event stream", "GET", "/events", nil, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 12\r\n\r\ndata: 1\n\nxxx"},
		{"malformed", "GET", "/", nil, "HTTP/1.1 2x0 OK\r\n\r\n\x00close"},
		{"bad header", "GET", "/", nil, "HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n\x00close"},
		{"two lengths", "GET", "/", nil, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx\x00close"},
		{"the same length twice", "GET", "/", nil, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"},
		{"folded field", "GET", "/", nil, "HTTP/1.1 200 OK\r\nX-Long: a\r\n b\r\n\t c \r\nX-Next: 1\r\nContent-Length: 2\r\n\r\nok"},
		{"folded field past 24", "GET", "/", nil, "HTTP/1.1 200 OK\r\n" + many + "X-Long: a\r\n b\r\nContent-Length: 2\r\n\r\nok"},
		{"fold first", "GET", "/", nil, "HTTP/1.1 200 OK\r\n X-A: 1\r\nContent-Length: 2\r\n\r\nok\x00close"},
		{"blank fold between", "GET", "/", nil, "HTTP/1.1 200 OK\r\nX-A: a\r\n \r\n b\r\nContent-Length: 2\r\n\r\nok"},
		{"fold of a dropped field", "GET", "/", nil, "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\n max=9\r\nBad Name: 1\r\n 2\r\nX-A: a\r\nContent-Length: 2\r\n\r\nok"},
	}
	do := func(t *testing.T, srv *httptest.Server, method, path string, hdr http.Header) seen {
		t.Helper()
		var s seen
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				s.early, s.earlyHdr = append(s.early, code), append(s.earlyHdr, h)
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		req.Host = "hello.apps.test"
		for k, v := range hdr {
			req.Header[k] = v
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		s.status, s.header, s.body, s.trailer = res.StatusCode, res.Header, string(body), res.Trailer
		delete(s.header, "Date")
		return s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [2]seen
			for i, srv := range []*httptest.Server{fastS, slowS} {
				be.set(tt.resp)
				got[i] = do(t, srv, tt.method, tt.path, tt.hdr)
				if got[i].status < 500 {
					got[i].sent = be.lastHead(t)
				}
			}
			f, s := got[0], got[1]
			if s.status >= 500 { // the error body is the proxy's problem; the status must agree
				if f.status != s.status {
					t.Fatalf("fast path answered %d, ReverseProxy %d", f.status, s.status)
				}
				return
			}
			if f.status != s.status || f.body != s.body || !reflect.DeepEqual(f.early, s.early) {
				t.Fatalf("fast: %d %v %q\nslow: %d %v %q", f.status, f.early, f.body, s.status, s.early, s.body)
			}
			if !reflect.DeepEqual(f.header, s.header) {
				t.Errorf("response headers differ:\nfast %v\nslow %v", f.header, s.header)
			}
			if !reflect.DeepEqual(f.earlyHdr, s.earlyHdr) {
				t.Errorf("1xx headers differ:\nfast %v\nslow %v", f.earlyHdr, s.earlyHdr)
			}
			for _, h := range s.earlyHdr {
				if h.Get(HeaderCluster) == "evil" || h.Get(HeaderFailover) != "" {
					t.Errorf("a host's 1xx claimed a cluster: %v", h)
				}
			}
			if !reflect.DeepEqual(f.trailer, s.trailer) {
				t.Errorf("trailers differ:\nfast %v\nslow %v", f.trailer, s.trailer)
			}
			fs, ss := f.sent, s.sent
			if fs.Method != ss.Method || fs.RequestURI != ss.RequestURI || fs.Host != ss.Host || fs.Proto != ss.Proto {
				t.Errorf("request line differs: fast %s %s %s %s, slow %s %s %s %s",
					fs.Method, fs.RequestURI, fs.Proto, fs.Host, ss.Method, ss.RequestURI, ss.Proto, ss.Host)
			}
			if !reflect.DeepEqual(fs.Header, ss.Header) {
				t.Errorf("request headers differ:\nfast %v\nslow %v", fs.Header, ss.Header)
			}
			if fs.Header.Get(HeaderAppID) != "hello" || fs.Header.Get(HeaderRequestID) != "rid-1" || fs.Header.Get(HeaderClientIP) != "192.0.2.7" ||
				fs.Header.Get(HeaderScopes) != "a b" || fs.Header.Get(HeaderCluster) != "c1" {
				t.Errorf("context headers: %v", fs.Header)
			}
		})
	}
}

// TestFastPathRetriesAClosedKeptAliveConnection: a host that closed an
// idle kept-alive connection costs the client nothing: the request goes
// again on a new connection, and the host is not marked down.
func TestFastPathRetriesAClosedKeptAliveConnection(t *testing.T) {
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
	// The host drops the kept-alive connection: its next read there ends.
	be.set("\x00close")
	if s := get(); s != 502 {
		t.Fatalf("a host that answers nothing on a fresh connection: %d, want 502", s)
	}
	// Pool a connection, then make the host close it while idle.
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
	if s := get(); s != 200 {
		t.Fatalf("third request: %d", s)
	}
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00close") // answers, then closes the pooled conn
	if s := get(); s != 200 {
		t.Fatalf("fourth request: %d", s)
	}
	// The pooled connection is now closed by the host: the next request
	// must still succeed, over a new connection.
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	if s := get(); s != 200 {
		t.Fatalf("request after the host closed the pooled connection: %d", s)
	}
	// The same with a reset: writing the next head there fails at once.
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00reset")
	if s := get(); s != 200 {
		t.Fatalf("request answered before the reset: %d", s)
	}
	time.Sleep(20 * time.Millisecond) // the reset reaches the pooled connection
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	if s := get(); s != 200 {
		t.Fatalf("request after the host reset the pooled connection: %d", s)
	}
}

// TestFastPathChoice: which requests take the fast path.
func TestFastPathChoice(t *testing.T) {
	plain := &route.Host{Scheme: "http", URL: &url.URL{Scheme: "http", Host: "h:1"}}
	tests := []struct {
		name string
		req  func() *http.Request
		host *route.Host
		want bool
	}{
		{"get", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/x?y=1", nil) }, plain, true},
		{"head", func() *http.Request { return httptest.NewRequest("HEAD", "http://a.test/", nil) }, plain, true},
		{"post", func() *http.Request { return httptest.NewRequest("POST", "http://a.test/", strings.NewReader("x")) }, plain, false},
		{"get with body", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/", strings.NewReader("x")) }, plain, false},
		{"upgrade", func() *http.Request {
			r := httptest.NewRequest("GET", "http://a.test/", nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}, plain, false},
		{"connection names a header", func() *http.Request {
			r := httptest.NewRequest("GET", "http://a.test/", nil)
			r.Header.Set("Connection", "keep-alive, X-Secret")
			return r
		}, plain, false},
		{"te", func() *http.Request {
			r := httptest.NewRequest("GET", "http://a.test/", nil)
			r.Header.Set("Te", "trailers")
			return r
		}, plain, false},
		{"semicolon query", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/?a=1;b=2", nil) }, plain, false},
		{"bad escape", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/?a=%zz", nil) }, plain, false},
		{"https host", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/", nil) },
			&route.Host{Scheme: "https", URL: &url.URL{Scheme: "https", Host: "h:1"}}, false},
		{"h2c host", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/", nil) },
			&route.Host{Scheme: "h2c", URL: &url.URL{Scheme: "h2c", Host: "h:1"}}, false},
		{"host url with path", func() *http.Request { return httptest.NewRequest("GET", "http://a.test/", nil) },
			&route.Host{Scheme: "http", URL: &url.URL{Scheme: "http", Host: "h:1", Path: "/base"}}, false},
	}
	for _, tt := range tests {
		if got := fastOK(tt.req(), tt.host); got != tt.want {
			t.Errorf("%s: fastOK = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func fastGet(t *testing.T, srv *httptest.Server) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Host = "hello.apps.test"
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestFastPathChoiceHTTP2: requests as net/http's HTTP/2 server makes
// them (every one has a Body) take the fast path when they carry none.
func TestFastPathChoiceHTTP2(t *testing.T) {
	plain := &route.Host{Scheme: "http", URL: &url.URL{Scheme: "http", Host: "h:1"}}
	got := make(chan bool, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("request over HTTP/%d.%d, want HTTP/2", r.ProtoMajor, r.ProtoMinor)
		}
		got <- fastOK(r, plain)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		method string
		body   io.Reader
		want   bool
	}{
		{"get", "GET", nil, true},
		{"head", "HEAD", nil, true},
		{"get with a body", "GET", strings.NewReader("x"), false},
		{"get with a body of unknown length", "GET", io.MultiReader(strings.NewReader("x")), false},
		{"post", "POST", strings.NewReader("x"), false},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+"/", tc.body)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		res.Body.Close()
		if ok := <-got; ok != tc.want {
			t.Errorf("%s over HTTP/2: fastOK = %v, want %v", tc.name, ok, tc.want)
		}
	}
}

// TestFastPathIdleConnectionsAreClosed: a kept-alive connection idle for
// IdleConnTimeout is closed without any further request (the host may be
// gone from the table for good).
func TestFastPathIdleConnectionsAreClosed(t *testing.T) {
	be := newScripted(t)
	p, _ := New(Options{ClusterID: "c1", IdleConnTimeout: 50 * time.Millisecond})
	defer p.Close()
	srv := proxyServer(t, p, be.ln.Addr().String())
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	if s, _ := fastGet(t, srv); s != 200 {
		t.Fatalf("status %d", s)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return be.ended.Load() == 1 }, "the idle upstream connection was never closed")
}

// TestFastPathDropsAConnectionWithUnaskedBytes: bytes after a response
// (a host sending more than its Content-Length) are never read as the
// next request's response: that connection is not reused.
func TestFastPathDropsAConnectionWithUnaskedBytes(t *testing.T) {
	be := newScripted(t)
	p, _ := New(Options{ClusterID: "c1"})
	defer p.Close()
	srv := proxyServer(t, p, be.ln.Addr().String())
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Forged\r\nContent-Length: 0\r\n\r\n")
	for i := range 3 {
		if s, body := fastGet(t, srv); s != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, s, body)
		}
	}
}

// headerSeen records the values of one field a handler's writer holds
// when the head is written.
type headerSeen struct {
	http.ResponseWriter
	key string
	got *[]string
}

func (w headerSeen) WriteHeader(code int) {
	*w.got = append([]string(nil), w.Header().Values(w.key)...)
	w.ResponseWriter.WriteHeader(code)
}

// TestFastPathFoldOfEmptyValue: a fold of an empty value gives the value
// net/http's client gives ("b", not " b"), as handed to the writer: the
// HTTP/1 writers trim it, but HTTP/2's does not, and RFC 9113 §8.2.1 makes
// a value with leading white space malformed.
func TestFastPathFoldOfEmptyValue(t *testing.T) {
	be := newScripted(t)
	var vals [2][]string
	for i, disable := range []bool{false, true} {
		p, _ := New(Options{ClusterID: "c1", DisableFastPath: disable})
		defer p.Close()
		srv := proxyServerWith(t, p, be.ln.Addr().String(), func(w http.ResponseWriter) http.ResponseWriter {
			return headerSeen{w, "X-A", &vals[i]}
		})
		be.set("HTTP/1.1 200 OK\r\nX-A:\r\n b\r\nContent-Length: 2\r\n\r\nok")
		if s, _ := fastGet(t, srv); s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	if !reflect.DeepEqual(vals[0], vals[1]) || len(vals[0]) != 1 || vals[0][0] != "b" {
		t.Fatalf("X-A handed to the writer: fast path %q, ReverseProxy %q, want [\"b\"]", vals[0], vals[1])
	}
}

// TestFastPathFoldedFraming: a fold of a field the fast path reads for the
// framing is refused (502: RFC 9112 §5.2 lets a proxy answer a response
// with obs-fold so), where net/http's client would unfold it; a fold of
// any other field is unfolded as it does (TestFastPathMatchesReverseProxy).
func TestFastPathFoldedFraming(t *testing.T) {
	be := newScripted(t)
	p, _ := New(Options{ClusterID: "c1"})
	defer p.Close()
	srv := proxyServer(t, p, be.ln.Addr().String())
	for _, resp := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length:\r\n 2\r\n\r\nok\x00close",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n\x00close",
		"HTTP/1.1 200 OK\r\nConnection: X-A,\r\n X-B\r\nContent-Length: 2\r\n\r\nok\x00close",
	} {
		be.set(resp)
		if s, body := fastGet(t, srv); s != http.StatusBadGateway {
			t.Errorf("%q: %d %q, want 502", resp, s, body)
		}
	}
}

// TestFastPathOneContentLength: a host's repeated, equal Content-Length
// reaches the client once (net/http's client keeps one too; a strict
// client refuses a response with two).
func TestFastPathOneContentLength(t *testing.T) {
	be := newScripted(t)
	p, _ := New(Options{ClusterID: "c1"})
	defer p.Close()
	srv := proxyServer(t, p, be.ln.Addr().String())
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n")
	br := bufio.NewReader(c)
	var head []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line = strings.TrimRight(line, "\r\n"); line == "" {
			break
		}
		head = append(head, line)
	}
	n := 0
	for _, l := range head {
		if strings.HasPrefix(strings.ToLower(l), "content-length:") {
			n++
		}
	}
	if n != 1 || head[0] != "HTTP/1.1 200 OK" {
		t.Fatalf("%d Content-Length fields in %q, want 1", n, head)
	}
}

// TestFastPathDropsAConnectionWithLateBytes: bytes a host sends after its
// response, in a later write, arrive once the connection is back in the
// pool, where put's look cannot see them: a body after a HEAD or a 204, a
// stray CRLF, a whole forged response. The next request must not read
// them as its answer (another client's, perhaps); it goes out on a new
// connection and gets the host's own answer to it.
func TestFastPathDropsAConnectionWithLateBytes(t *testing.T) {
	tests := []struct {
		name   string
		method string // of the first request
		resp   string // the host's answer to every request; \x00pause splits its writes
	}{
		{"forged response", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00pauseHTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nnot your answer"},
		{"body after HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n\x00pauseok"},
		{"body after 204", "GET", "HTTP/1.1 204 No Content\r\n\r\n\x00pauseHTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\nnot your answer"},
		{"stray CRLF", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00pause\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newScripted(t)
			p, _ := New(Options{ClusterID: "c1"})
			defer p.Close()
			srv := proxyServer(t, p, be.ln.Addr().String())
			be.set(tt.resp)
			req, _ := http.NewRequest(tt.method, srv.URL+"/", nil)
			req.Host = "hello.apps.test"
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			// The late bytes are in the pooled connection's socket once
			// the host has written them (loopback).
			testutil.WaitFor(t, 5*time.Second, func() bool { return be.whole.Load() == 1 }, "the host did not write its late bytes")
			be.set("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nyours!")
			if s, body := fastGet(t, srv); s != 200 || body != "yours!" {
				t.Fatalf("the request after: %d %q, want the host's 200 \"yours!\"", s, body)
			}
		})
	}
}

// FuzzFastResponse feeds a host's response bytes (hosts are not trusted)
// to the fast path's head parser and body decoder: no input may panic, and
// a head it accepts has a status in range and a consistent framing.
func FuzzFastResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n",
		"HTTP/1.0 204 No Content\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\nrest",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\n b\r\n\t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 64)
		var res fastResp
		if err := readFastHead(br, &res); err != nil {
			return
		}
		if res.status < 100 || res.status > 599 || (res.chunked && res.length != -1) {
			t.Fatalf("accepted status %d, chunked %v, length %d", res.status, res.chunked, res.length)
		}
		w := httptest.NewRecorder()
		res.copyTo(w.Header(), []string{"c1"})
		if got := w.Header()[HeaderCluster]; len(got) != 1 || got[0] != "c1" {
			t.Fatalf("cluster header %v", got)
		}
		for _, k := range []string{"Connection", "Transfer-Encoding", "Keep-Alive", "Trailer", "Upgrade"} {
			if _, ok := w.Header()[k]; ok {
				t.Fatalf("hop-by-hop %s passed on", k)
			}
		}
		switch {
		case res.chunked:
			_ = copyChunked(w, br, false, res.trailers, nil)
		case res.length >= 0:
			if err := copyN(w, br, res.length, false); err == nil && int64(w.Body.Len()) != res.length {
				t.Fatalf("copied %d of %d", w.Body.Len(), res.length)
			}
		default:
			_ = copyN(w, br, -1, false)
		}
	})
}

// FuzzFastBodyAsNetHTTP holds the fast path's body decoding to net/http's
// client (the ReverseProxy path): on a head both accept, a body the fast
// path reads whole is the body net/http reads, which net/http reads whole
// too. Only a trailer section may be read otherwise (net/http wants a
// CRLF CRLF within its buffer there and refuses a fold first; the fast
// path is laxer, and no trailer frames anything: a connection with bytes
// after the response is never reused either way); and the fast path may
// refuse what net/http takes.
func FuzzFastBodyAsNetHTTP(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3;a=b \r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: "GET"})
		if err != nil || res.StatusCode < 200 {
			return
		}
		want, werr := io.ReadAll(res.Body)
		inTrailer := werr != nil && (strings.Contains(werr.Error(), "trailer") || strings.Contains(werr.Error(), "MIME header"))
		br := bufio.NewReaderSize(bytes.NewReader(b), readSize) // the pool's readers' size: chunk lines fit as in net/http's
		var fr fastResp
		if err := readFastHead(br, &fr); err != nil || fr.status < 200 || fr.status == http.StatusSwitchingProtocols || fr.status > 999 {
			return
		}
		w := httptest.NewRecorder()
		var gerr error
		switch {
		case fr.status == http.StatusNoContent || fr.status == http.StatusNotModified:
		case fr.chunked:
			gerr = copyChunked(w, br, false, fr.trailers, nil)
		case fr.length >= 0:
			gerr = copyN(w, br, fr.length, false)
		default:
			gerr = copyN(w, br, -1, true)
		}
		if gerr == nil && (werr != nil && !inTrailer || !bytes.Equal(w.Body.Bytes(), want)) {
			t.Fatalf("fast path read %q (%v), net/http %q (%v), from\n%q", w.Body.Bytes(), gerr, want, werr, b)
		}
	})
}

// TestFastPathResponseHeaderTimeout: the head timeout counts from each
// request's start on a reused connection, although its timer is not reset
// per request: a timer left pending by the previous request fires in the
// middle of the next one and must wait out the rest, neither cutting that
// request short nor letting a slower one run past the bound.
func TestFastPathResponseHeaderTimeout(t *testing.T) {
	// Wide margins: every figure here is a wall-clock wait on a machine
	// that may be busy (CI runs the packages side by side, under -race).
	const bound = 2 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					d, _ := time.ParseDuration(strings.TrimPrefix(req.URL.Path, "/delay/"))
					time.Sleep(d)
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	p, _ := New(Options{ClusterID: "c1", ResponseHeaderTimeout: bound})
	defer p.Close()
	srv := proxyServer(t, p, ln.Addr().String())
	get := func(path string) (int, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Host = "hello.apps.test"
		start := time.Now()
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, time.Since(start)
	}
	if s, _ := get("/delay/0s"); s != 200 {
		t.Fatalf("first request: %d", s)
	}
	time.Sleep(bound / 2) // the first request's timer fires halfway through the next
	if s, d := get("/delay/1500ms"); s != 200 {
		t.Fatalf("a head in %v (bound %v) on the reused connection: %d after %v, want 200", 1500*time.Millisecond, bound, s, d)
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("the host accepted %d connections, want 1 (the second request reuses the first's)", n)
	}
	s, d := get("/delay/4s")
	if s != http.StatusGatewayTimeout || d < bound-50*time.Millisecond || d > bound+time.Second {
		t.Fatalf("a head in 4s (bound %v): %d after %v, want 504 after about %v", bound, s, d, bound)
	}
	if s, _ := get("/delay/0s"); s != 200 {
		t.Fatalf("after a timeout: %d", s)
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("the host accepted %d connections, want 2 (the timed-out one is not reused)", n)
	}
}

// countingWriter counts the body writes a handler makes.
type countingWriter struct {
	http.ResponseWriter
	writes *atomic.Int32
}

func (c countingWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		c.writes.Add(1)
	}
	return c.ResponseWriter.Write(p)
}

func (c countingWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// TestFastPathGathersABody: a body of known length that fits the copy
// buffer but comes from the host in parts reaches the client's writer in
// one write (so that the lane sends it with its head in one); a longer
// one, and a stream, are passed on as they come. Every body arrives whole.
func TestFastPathGathersABody(t *testing.T) {
	for _, tc := range []struct {
		name       string
		size       int
		stream     bool
		wantWrites func(int32) bool
	}{
		{"16 KiB in two parts: one write", 16 << 10, false, func(n int32) bool { return n == 1 }},
		{"32 KiB in two parts: one write", bufSize, false, func(n int32) bool { return n == 1 }},
		{"48 KiB in two parts: written as it comes", 48 << 10, false, func(n int32) bool { return n >= 2 }},
		{"16 KiB event stream: written as it comes", 16 << 10, true, func(n int32) bool { return n >= 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newScripted(t)
			p, _ := New(Options{ClusterID: "c1"})
			defer p.Close()
			var writes atomic.Int32
			srv := proxyServerWith(t, p, be.ln.Addr().String(), func(w http.ResponseWriter) http.ResponseWriter {
				return countingWriter{w, &writes}
			})
			body := strings.Repeat("0123456789abcdef", tc.size/16)
			ct := "text/plain"
			if tc.stream {
				ct = "text/event-stream"
			}
			be.set(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s\x00pause%s", ct, len(body), body[:3000], body[3000:]))
			s, got := fastGet(t, srv)
			if s != 200 || got != body {
				t.Fatalf("status %d, %d bytes; want 200 and the %d sent", s, len(got), len(body))
			}
			if n := writes.Load(); !tc.wantWrites(n) {
				t.Errorf("%d writes to the client's writer", n)
			}
		})
	}
}

// TestFastPathIdleConnectionHoldsNoBuffer: a kept-alive host connection
// gives its read buffer back while it waits in the pool (a pool of many
// idle connections holds no buffers), and takes one again when reused.
func TestFastPathIdleConnectionHoldsNoBuffer(t *testing.T) {
	be := newScripted(t)
	p, _ := New(Options{ClusterID: "c1"})
	defer p.Close()
	srv := proxyServer(t, p, be.ln.Addr().String())
	be.set("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	for i := range 3 {
		if s, body := fastGet(t, srv); s != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, s, body)
		}
		ic := p.fast.idle(be.ln.Addr().String(), time.Now())
		ic.mu.Lock()
		n := len(ic.conns)
		var br *bufio.Reader
		if n == 1 {
			br = ic.conns[0].br
		}
		ic.mu.Unlock()
		if n != 1 {
			t.Fatalf("request %d: %d idle connections, want the one kept alive", i, n)
		}
		if br != nil {
			t.Fatalf("request %d: the idle connection holds a %d-byte read buffer", i, br.Size())
		}
	}
	if n := be.ended.Load(); n != 0 {
		t.Fatalf("%d host connections ended: the kept one was not reused", n)
	}
}

// TestFastPathReusesMostRecent: after a burst that opened three host
// connections, requests one at a time all go over the one used last (a
// first-in-first-out pool would rotate through all three), and the two
// left idle are closed once they have been idle for IdleConnTimeout while
// the busy one stays open.
func TestFastPathReusesMostRecent(t *testing.T) {
	const burst = 3
	var arrived sync.WaitGroup
	arrived.Add(burst)
	release := make(chan struct{})
	var inBurst atomic.Bool
	inBurst.Store(true)
	var closed atomic.Int32
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inBurst.Load() {
			arrived.Done()
			<-release // all three in flight at once: three connections
		}
		io.WriteString(w, r.RemoteAddr)
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	be.Start()
	defer be.Close()
	const idleFor = 400 * time.Millisecond
	p, _ := New(Options{ClusterID: "c1", IdleConnTimeout: idleFor})
	defer p.Close()
	srv := proxyServer(t, p, be.Listener.Addr().String())
	srv.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = burst

	got := make(chan string, burst)
	for range burst {
		go func() {
			_, body := fastGet(t, srv)
			got <- body
		}()
	}
	arrived.Wait()
	inBurst.Store(false)
	close(release)
	seen := map[string]bool{}
	for range burst {
		seen[<-got] = true
	}
	if len(seen) != burst {
		t.Fatalf("the burst used %d host connections, want %d: %v", len(seen), burst, seen)
	}

	// One request at a time for 2.5 idle timeouts, and on until the
	// host has seen the idle ones close (the pool's sweep closes them up
	// to two idle timeouts in; a busy machine may take longer), at most
	// 5 s: each finds the connection the previous one used.
	var first string
	start := time.Now()
	for time.Since(start) < idleFor*5/2 || (closed.Load() < burst-1 && time.Since(start) < 5*time.Second) {
		time.Sleep(10 * time.Millisecond)
		s, body := fastGet(t, srv)
		if s != 200 || !seen[body] {
			t.Fatalf("status %d from %q; want 200 from one of the burst's connections %v", s, body, seen)
		}
		if first == "" {
			first = body
		} else if body != first {
			t.Fatalf("a request went over %s after others over %s: not the most recently used", body, first)
		}
	}
	if n := closed.Load(); n != burst-1 {
		t.Errorf("%d host connections closed; want the %d left idle", n, burst-1)
	}
}

// TestFastPathClientWatchUndone: exchanges that end before, around and
// after the proxy starts listening for their context's end (clientWait)
// leave nothing listening on it: the context a connection's requests
// share (the lane's) ends later without aborting the host connection they
// used, which the next request, on another context, reuses.
func TestFastPathClientWatchUndone(t *testing.T) {
	var conns atomic.Int32
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		time.Sleep(d)
		io.WriteString(w, "ok")
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	be.Start()
	defer be.Close()
	p, _ := New(Options{ClusterID: "c1"})
	defer p.Close()
	var base atomic.Pointer[context.Context]
	connCtx, cancel := context.WithCancel(context.Background())
	base.Store(&connCtx)
	srv := proxyServerOn(t, p, be.Listener.Addr().String(), nil, func() context.Context { return *base.Load() })
	get := func(d time.Duration) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/?d="+d.String(), nil)
		req.Host = "hello.apps.test"
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("host delay %v: %d %q", d, res.StatusCode, b)
		}
	}
	for _, d := range []time.Duration{0, clientWait - 20*time.Millisecond, clientWait, clientWait + 5*time.Millisecond, clientWait + 50*time.Millisecond, 0} {
		get(d)
	}
	cancel()
	next := context.Background()
	base.Store(&next)
	time.Sleep(50 * time.Millisecond) // an abort left behind would have run by now
	get(0)
	if n := conns.Load(); n != 1 {
		t.Fatalf("the host saw %d connections, want 1: the shared context's end aborted a pooled one", n)
	}
}

// TestHeadValuesOutliveTheScratch: a connection reads each response head
// into the same scratch; the values handed to one response's header map
// must stay as they were when the next head is read over them.
func TestHeadValuesOutliveTheScratch(t *testing.T) {
	heads := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-A: first\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: other\r\nX-B: " + strings.Repeat("b", 600) + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: third\r\n\r\n",
	}
	var res fastResp
	var got []http.Header
	for _, head := range heads {
		if err := readFastHead(bufio.NewReader(strings.NewReader(head)), &res); err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		res.copyTo(h, nil)
		got = append(got, h)
		res = fastResp{text: res.text[:0]}
	}
	for i, want := range []string{"first", "other", "third"} {
		if v := got[i].Get("X-A"); v != want || got[i].Get("Content-Length") != fmt.Sprint(i+1) {
			t.Errorf("response %d: X-A %q, Content-Length %q; want %q, %d", i, v, got[i].Get("Content-Length"), want, i+1)
		}
	}
	if v := got[1].Get("X-B"); v != strings.Repeat("b", 600) {
		t.Errorf("response 1's long value changed: %.20q…", v)
	}
}

// TestFastPathChunkLines: a host's chunked body is decoded by the rules
// net/http's client (the ReverseProxy path) decodes it by: a chunk-size
// line ends in CRLF with no other CR, only blanks after the size (before
// or after an extension, as net/http trims them) are let through, and the
// chunk data is followed by exactly CRLF. A body framed otherwise is cut
// (the client sees the response aborted) on both paths alike, rather than
// passed on by one and cut by the other: a host on a kept-alive connection
// could otherwise frame its answers one way for the gateway and another
// for every other reader (RFC 9112 §7.1, errata 7633).
func TestFastPathChunkLines(t *testing.T) {
	be := newScripted(t)
	fastP, _ := New(Options{ClusterID: "c1"})
	slowP, _ := New(Options{ClusterID: "c1", DisableFastPath: true})
	defer fastP.Close()
	defer slowP.Close()
	fastS, slowS := proxyServer(t, fastP, be.ln.Addr().String()), proxyServer(t, slowP, be.ln.Addr().String())
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct {
		name, body string
		want       string // the body the client reads; "" for an aborted response
	}{
		{"plain", "3\r\nabc\r\n0\r\n\r\n", "abc"},
		{"blanks after the size", "3 \t\r\nabc\r\n0\r\n\r\n", "abc"},
		{"extension with blanks after it", "3;a=b \r\nabc\r\n0\r\n\r\n", "abc"},
		{"sixteen digits", "0000000000000003\r\nabc\r\n0\r\n\r\n", "abc"},
		{"bare LF after the size", "3\nabc\r\n0\r\n\r\n\x00close", ""},
		{"CR inside the size line", "3\r;x\r\nabc\r\n0\r\n\r\n\x00close", ""},
		{"CR CR LF", "3\r\r\nabc\r\n0\r\n\r\n\x00close", ""},
		{"blank before the size", " 3\r\nabc\r\n0\r\n\r\n\x00close", ""},
		{"blank before an extension", "3 ;a=b\r\nabc\r\n0\r\n\r\n\x00close", ""},
		{"bare LF after the data", "3\r\nabc\n0\r\n\r\n\x00close", ""},
		{"bare LF after the last chunk", "3\r\nabc\r\n0\n\r\n\x00close", ""},
	}
	get := func(srv *httptest.Server) string {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Host = "hello.apps.test"
		res, err := srv.Client().Do(req)
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != 200 {
			return ""
		}
		return string(b)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be.set(head + tt.body)
			slow := get(slowS)
			be.set(head + tt.body)
			fast := get(fastS)
			if fast != tt.want || slow != tt.want {
				t.Fatalf("client read %q through the fast path, %q through ReverseProxy; want %q", fast, slow, tt.want)
			}
		})
	}
}

// TestFastPathHTTP10TransferEncoding: an HTTP/1.0 response with
// Transfer-Encoding has faulty framing (RFC 9112 §6.1): the fast path
// reads it as net/http's client does (the coding ignored, whatever it
// is: up to the close), so the client gets the same body on both paths,
// and never reuses the connection, whatever its Connection field says.
// One with a Content-Length as well, which both read by the length, is
// refused on both now (TestHostResponseFraming).
func TestFastPathHTTP10TransferEncoding(t *testing.T) {
	tests := []struct{ name, resp, want string }{
		{"until close", "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\x00close", "3\r\nabc\r\n0\r\n\r\n"},
		{"another coding", "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nTransfer-Encoding: gzip, chunked\r\nTransfer-Encoding: br\r\n\r\nabc\x00close", "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [2]string
			for i, disable := range []bool{false, true} {
				be := newScripted(t)
				p, _ := New(Options{ClusterID: "c1", DisableFastPath: disable})
				defer p.Close()
				srv := proxyServer(t, p, be.ln.Addr().String())
				be.set(tt.resp)
				_, got[i] = fastGet(t, srv)
				if !disable {
					testutil.WaitFor(t, 5*time.Second, func() bool { return be.ended.Load() == 1 }, "the fast path kept the connection")
				}
			}
			if got[0] != tt.want || got[1] != tt.want {
				t.Fatalf("client read %q through the fast path, %q through ReverseProxy; want %q", got[0], got[1], tt.want)
			}
		})
	}
}
