package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// TestDesyncOverTheWire sends framing a gateway and a host could read
// differently, over raw TCP, and asserts what the client sees: whichever
// layer answers (net/http before the handler, or hygiene), the request
// never reaches the host as sent and the connection is closed.
func TestDesyncOverTheWire(t *testing.T) {
	e := newEnv(t, nil)
	var bodies atomic.Value
	bodies.Store("")
	var hits atomic.Int32
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		bodies.Store(r.Header.Get("Content-Length") + "|" + string(b))
	}))
	const head = "POST / HTTP/1.1\r\nHost: hello.apps.test\r\n"
	tests := []struct {
		name   string
		raw    string
		status string // the status line prefix the client gets
	}{
		{"differing content-length", head + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "HTTP/1.1 400 "},
		{"unknown transfer coding", head + "Transfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 501 "},
		{"two transfer codings", head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 501 "},
		{"control byte in a header value", head + "X-A: a\x01b\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 400 "},
		{"space in a header name", head + "X A: b\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 400 "},
		{"bad content-length", head + "Content-Length: 1x\r\n\r\n", "HTTP/1.1 400 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hits.Load()
			out, closed := e.rawExchange(tt.raw)
			if !strings.HasPrefix(out, tt.status) {
				t.Fatalf("got %q, want %q...", out, tt.status)
			}
			if !closed || !strings.Contains(out, "Connection: close") {
				t.Fatalf("connection not closed: %q", out)
			}
			if hits.Load() != before {
				t.Fatal("the request reached the host")
			}
		})
	}
	// Both Content-Length and chunked: net/http drops Content-Length and
	// reads the chunked body (RFC 9112 §6.3), then the request goes
	// upstream re-framed, so the host reads exactly the body the gateway
	// read: nothing is smuggled.
	t.Run("content-length and chunked", func(t *testing.T) {
		raw := head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n"
		before := hits.Load()
		out, _ := e.rawExchange(raw)
		if got := hits.Load() - before; got > 1 {
			t.Fatalf("%d requests reached the host: smuggled", got)
		}
		if strings.HasPrefix(out, "HTTP/1.1 200 ") && bodies.Load() != "|abc" && bodies.Load() != "3|abc" {
			t.Fatalf("host read %q", bodies.Load())
		}
		if !strings.HasPrefix(out, "HTTP/1.1 200 ") && !strings.HasPrefix(out, "HTTP/1.1 400 ") {
			t.Fatalf("got %q", out)
		}
	})
}

func TestDesyncChecks(t *testing.T) {
	mk := func(edit func(r *http.Request)) *http.Request {
		r, _ := http.NewRequest("POST", "http://hello.apps.test/", nil)
		edit(r)
		return r
	}
	tests := []struct {
		name string
		r    *http.Request
		want string
	}{
		{"clean", mk(func(r *http.Request) { r.Header.Set("X-A", "b") }), ""},
		{"chunked", mk(func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), ""},
		{"cl and te", mk(func(r *http.Request) {
			r.TransferEncoding = []string{"chunked"}
			r.Header.Set("Content-Length", "3")
		}), "both Content-Length and Transfer-Encoding"},
		{"unknown te", mk(func(r *http.Request) { r.TransferEncoding = []string{"gzip"} }), "unknown transfer coding"},
		{"raw te header", mk(func(r *http.Request) { r.Header.Set("Transfer-Encoding", "chunked") }), "unexpected Transfer-Encoding"},
		{"two cl", mk(func(r *http.Request) { r.Header["Content-Length"] = []string{"3", "4"} }), "differing Content-Length values"},
		{"bad name", mk(func(r *http.Request) { r.Header["X A"] = []string{"b"} }), "invalid header name"},
		{"bad value", mk(func(r *http.Request) { r.Header["X-A"] = []string{"a\r\nb"} }), "invalid header value"},
	}
	for _, tt := range tests {
		if got := desync(tt.r); got != tt.want {
			t.Errorf("%s: desync = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestHasPrefixFold(t *testing.T) {
	yes := []string{"X-Gatehouse-App-Id", "x-gatehouse-", "X_GATEHOUSE_X", "x-Gatehouse_y"}
	no := []string{"X-Gatehouse", "X-Gatehous-App", "Y-Gatehouse-App", "XGatehouse-App", ""}
	for _, k := range yes {
		if !httpwire.HasFieldPrefix(k, "x-gatehouse-") {
			t.Errorf("%q should match", k)
		}
	}
	for _, k := range no {
		if httpwire.HasFieldPrefix(k, "x-gatehouse-") {
			t.Errorf("%q should not match", k)
		}
	}
}

// TestClientGatehouseTrailersNeverArrive: X-Gatehouse-* fields sent as
// request trailers, declared or not, are stripped like headers, and so
// are fields naming the client's address and Authorization, which a host
// that merges trailers into its headers would take as the gateway's, and
// the fields no trailer may carry (RFC 9110 §6.5.1); other trailers still
// reach the host.
func TestClientGatehouseTrailersNeverArrive(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan http.Header, 1)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Trailer.Clone()
	}))
	tests := []struct{ name, declared, sent string }{
		{"declared", "X-Gatehouse-Subject, X-Checksum", "X-Gatehouse-Subject: root\r\nX-Checksum: 1\r\n"},
		{"underscore", "X_Gatehouse_App_Id, X-Checksum", "X_Gatehouse_App_Id: evil\r\nX-Checksum: 1\r\n"},
		{"undeclared", "X-Checksum", "X-Gatehouse-Scopes: admin\r\nX-Checksum: 1\r\n"},
		{"client address", "X-Forwarded-For, True-Client-IP, Forwarded, X-Checksum",
			"X-Forwarded-For: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Client-Ip: 6.6.6.6\r\nX-Checksum: 1\r\n"},
		{"authorization", "Authorization, X-Checksum", "Authorization: Bearer forged\r\nX-Checksum: 1\r\n"},
		// The policy layer reads these in the headers only (step 8).
		{"overrides", "X-HTTP-Method-Override, X_Original_URL, X-Checksum",
			"X-HTTP-Method-Override: DELETE\r\nX_Original_URL: /admin\r\nX-Rewrite-Url: /admin\r\nX-Method-Override: DELETE\r\nX-Checksum: 1\r\n"},
		// What RFC 9110 §6.5.1 keeps out of trailers (framing, routing,
		// connection, content format), as on responses: a host that
		// merges them would read another Host or framing.
		{"framing and routing", "Host, Content-Type, X-Checksum",
			"Host: other.apps.test\r\nContent-Length: 100\r\nTransfer-Encoding: gzip\r\nConnection: close\r\nContent-Type: text/evil\r\nX-Checksum: 1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := "POST / HTTP/1.1\r\nHost: hello.apps.test\r\nTransfer-Encoding: chunked\r\nTrailer: " + tt.declared +
				"\r\nConnection: close\r\n\r\n4\r\nbody\r\n0\r\n" + tt.sent + "\r\n"
			if out, _ := e.rawExchange(raw); !strings.HasPrefix(out, "HTTP/1.1 200 ") {
				t.Fatalf("got %q", out)
			}
			var h http.Header
			select {
			case h = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("the host was not reached")
			}
			for k := range h {
				if k != "X-Checksum" {
					t.Errorf("client trailer reached the host: %s: %v", k, h[k])
				}
			}
			if h.Get("X-Checksum") != "1" {
				t.Errorf("X-Checksum trailer lost: %v", h)
			}
		})
	}
}

// TestH2CUpgradeNotForwarded: a client's HTTP/2 cleartext upgrade (the
// request curl --http2 sends to an http URL) reaches the host as plain
// HTTP/1.1. Were it forwarded, a host that took it would speak HTTP/2 over
// a connection the gateway only copies, and every later request on it
// would skip routing, auth, limits and policy (h2c smuggling). A
// WebSocket upgrade is forwarded as before.
func TestH2CUpgradeNotForwarded(t *testing.T) {
	e := newEnv(t, nil)
	upgrades := make(chan string, 4)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up := r.Header.Get("Upgrade")
		upgrades <- up
		if up == "" {
			_, _ = io.WriteString(w, "plain")
			return
		}
		// A host that takes any upgrade it is offered.
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + up + "\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
	}))
	for _, tc := range []struct {
		upgrade  string
		want     int
		hostSees string
	}{
		{"h2c", http.StatusOK, ""},
		{"H2C", http.StatusOK, ""},
		{"websocket, h2c", http.StatusOK, ""},
		{"websocket", http.StatusSwitchingProtocols, "websocket"},
	} {
		c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: "+tc.upgrade+"\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("Upgrade %q: %v", tc.upgrade, err)
		}
		c.Close()
		if res.StatusCode != tc.want {
			t.Errorf("Upgrade %q: %d, want %d", tc.upgrade, res.StatusCode, tc.want)
		}
		if got := <-upgrades; got != tc.hostSees {
			t.Errorf("Upgrade %q: the host saw Upgrade %q, want %q", tc.upgrade, got, tc.hostSees)
		}
	}
}

// TestHTTP2SettingsNeverForwarded: HTTP2-Settings belongs to the
// connection it is sent on (RFC 7540 §3.2.1), and with the h2c upgrade
// refused it means nothing to a host; sent without Connection naming it,
// it was passed on.
func TestHTTP2SettingsNeverForwarded(t *testing.T) {
	e := newEnv(t, nil)
	seen := make(chan string, 2)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- strings.Join(r.Header.Values("Http2-Settings"), ",")
	}))
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: close\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
	} {
		out, _ := e.rawExchange(raw)
		if !strings.HasPrefix(out, "HTTP/1.1 200 ") {
			t.Fatalf("got %q", out)
		}
		if got := <-seen; got != "" {
			t.Errorf("the host saw HTTP2-Settings %q", got)
		}
	}
}

// TestConnectRefused: a CONNECT for an app's name gets 405 with Allow, and
// the host sees nothing of it; the connection goes on serving requests.
func TestConnectRefused(t *testing.T) {
	e := newEnv(t, nil)
	var hits atomic.Int32
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, r.Method)
	}))
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "CONNECT hello.apps.test:443 HTTP/1.1\r\nHost: hello.apps.test:443\r\n\r\nGET / HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") == "" || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("CONNECT: %d %v", res.StatusCode, res.Header)
	}
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "GET" || hits.Load() != 1 {
		t.Fatalf("the GET after: %d %q, host hits %d, want 200 \"GET\" and 1", res.StatusCode, body, hits.Load())
	}
}

func TestClientAddressField(t *testing.T) {
	yes := []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "x_forwarded_proto", "X-Real-Ip", "X_REAL_IP",
		"True-Client-Ip", "X-Client-Ip", "X-Cluster-Client-Ip", "Client-Ip", "client_ip", "Cf-Connecting-Ip", "Fastly-Client-Ip"}
	no := []string{"Forwarder", "X-Forwarded", "X-Real-Ipv", "Client-Ips", "X-Client", "Cf-Ray", "Fastly-Debug", "Content-Type", ""}
	for _, k := range yes {
		if !clientAddressField(k) {
			t.Errorf("%q names the client's address", k)
		}
	}
	for _, k := range no {
		if clientAddressField(k) {
			t.Errorf("%q does not name the client's address", k)
		}
	}
}
