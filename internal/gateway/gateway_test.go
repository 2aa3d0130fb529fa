package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/textproto"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

func TestNewValidates(t *testing.T) {
	live := new(route.Live)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no cluster", Options{Live: live}, "ClusterID is required"},
		{"bad cluster", Options{ClusterID: "C_1", Live: live}, "not a DNS label"},
		{"no table", Options{ClusterID: "c1"}, "Live routing table is required"},
		{"bad prefix", Options{ClusterID: "c1", Live: live, TrustedProxies: []netip.Prefix{{}}}, "TrustedProxies[0]"},
		{"bad proxy", Options{ClusterID: "c1", Live: live, Proxy: proxy.Options{DialTimeout: -1}}, "DialTimeout"},
	}
	for _, tt := range tests {
		_, err := New(tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := New(Options{ClusterID: "c1", Live: live}); err != nil {
		t.Fatalf("minimal options: %v", err)
	}
}

func TestHealthz(t *testing.T) {
	e := newEnv(t, nil)
	for _, host := range []string{"hello.apps.test", "nothing.example", "127.0.0.1"} {
		res := e.get(host, "/healthz")
		if body := readBody(t, res); res.StatusCode != 200 || body != "ok" {
			t.Fatalf("%s: %d %q", host, res.StatusCode, body)
		}
	}
}

func TestContextHeadersReachBackend(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Gatehouse-Cluster", "evil") // a host may not claim a cluster
		echo().ServeHTTP(w, r)
	}))
	res := e.do("GET", "Hello.Apps.Test.", "/x?y=1", http.Header{"Authorization": {"Bearer tok"}}, nil)
	if got := res.Header.Values("X-Gatehouse-Cluster"); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("response X-Gatehouse-Cluster = %q", got)
	}
	h := echoed(t, res)
	rid := res.Header.Get("X-Request-Id")
	want := map[string]string{
		"X-Gatehouse-App-Id":     "hello",
		"X-Gatehouse-Client-Ip":  "127.0.0.1",
		"X-Gatehouse-Cluster":    "c1",
		"X-Gatehouse-Request-Id": rid,
		"X-Request-Id":           rid,
		"X-Forwarded-For":        "127.0.0.1",
		"X-Forwarded-Proto":      "http",
		"X-Forwarded-Host":       "Hello.Apps.Test.",
		"Host":                   "Hello.Apps.Test.",
		"Authorization":          "Bearer tok", // forwarded verbatim
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("backend saw %s = %q, want %q", k, got, v)
		}
	}
	if rid == "" {
		t.Fatal("no X-Request-Id on the response")
	}
	for _, k := range []string{"X-Gatehouse-Subject", "X-Gatehouse-Issuer", "X-Gatehouse-Scopes"} {
		if _, ok := h[k]; ok {
			t.Errorf("%s sent without a verified token", k)
		}
	}
}

// TestHostCannotClaimFailover: X-Failover-Cluster names the peer cluster
// that served a failed-over response (DESIGN §5.2); a host's own copy is
// removed from a response served here, as its X-Gatehouse-Cluster is, on
// the fast path (GET) and through ReverseProxy (POST).
func TestHostCannotClaimFailover(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Failover-Cluster", "evil")
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	for _, m := range []string{"GET", "POST"} {
		res := e.do(m, "hello.apps.test", "/", nil, strings.NewReader(""))
		if body := readBody(t, res); res.StatusCode != 200 || body != "ok" {
			t.Fatalf("%s: %d %q", m, res.StatusCode, body)
		}
		if got, ok := res.Header["X-Failover-Cluster"]; ok {
			t.Errorf("%s: a response served locally carries X-Failover-Cluster %q", m, got)
		}
	}
}

// TestClientGatehouseHeadersNeverArrive sends every spelling of a
// context header over a raw connection (so no client library tidies the
// names) and checks the backend sees only the gateway's own values.
func TestClientGatehouseHeadersNeverArrive(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", echo())
	spellings := []string{
		"X-Gatehouse-App-Id", "x-gatehouse-app-id", "X-GATEHOUSE-APP-ID", "X_Gatehouse_App_Id",
		"x_gatehouse_client_ip", "X-Gatehouse-Client_Ip", "X-Gatehouse-Cluster", "X-Gatehouse-Request-Id",
		"X-Gatehouse-Subject", "X-Gatehouse-Scopes", "X-Gatehouse-Forwarded", "X-Gatehouse-Client",
		"X-Gatehouse-Anything", "x-GaTeHoUsE-sUbJeCt",
	}
	for _, name := range spellings {
		t.Run(name, func(t *testing.T) {
			raw := "GET / HTTP/1.1\r\nHost: hello.apps.test\r\n" + name + ": forged\r\n" +
				"X-Forwarded-For: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Forwarded-Host: evil\r\n" +
				"X-Real-Ip: 6.6.6.6\r\nx_real_ip: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nX-Client-IP: 6.6.6.6\r\n" +
				"X-Cluster-Client-IP: 6.6.6.6\r\nClient-IP: 6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\nFastly-Client-IP: 6.6.6.6\r\n" +
				"Connection: close\r\n\r\n"
			out, _ := e.rawExchange(raw)
			res := readResponse(t, bufio.NewReader(strings.NewReader(out)))
			h := echoed(t, res)
			for k, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, "forged") || strings.Contains(v, "6.6.6.6") || v == "evil" {
						t.Errorf("client value arrived: %s: %s", k, v)
					}
				}
				if httpwire.HasFieldPrefix(k, "x-forwarded-") && !strings.HasPrefix(k, "X-Forwarded-") || strings.EqualFold(k, "forwarded") {
					t.Errorf("client forwarding header arrived: %s", k)
				}
			}
			if h.Get("X-Gatehouse-App-Id") != "hello" || h.Get("X-Gatehouse-Client-Ip") != "127.0.0.1" {
				t.Errorf("context headers wrong: %v", h)
			}
		})
	}
}

func TestTrustedProxyClientIP(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	})
	e.backend("h1", "hello", echo())
	res := e.do("GET", "hello.apps.test", "/", http.Header{
		"X-Forwarded-For":    {"6.6.6.6, 203.0.113.9", "10.1.2.3"},
		"X-Forwarded-Proto":  {"https"},
		"X-Gatehouse-App-Id": {"forged"},
		"X-Real-Ip":          {"203.0.113.9"},
		// Beside the proxy's own field, a client's spelling with '_'
		// reads as the same variable to a CGI-style host.
		"X_Forwarded_For": {"9.9.9.9"},
		"X_Real_Ip":       {"9.9.9.9"},
	}, nil)
	h := echoed(t, res)
	for k, vs := range h {
		if strings.Contains(strings.Join(vs, ","), "9.9.9.9") {
			t.Errorf("a client's underscore spelling arrived beside the trusted proxy's: %s: %v", k, vs)
		}
	}
	if got := h.Get("X-Real-Ip"); got != "203.0.113.9" {
		t.Errorf("a trusted proxy's X-Real-Ip %q", got)
	}
	if got := h.Get("X-Gatehouse-Client-Ip"); got != "203.0.113.9" {
		t.Errorf("client ip %q, want the rightmost untrusted hop", got)
	}
	if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "6.6.6.6, 203.0.113.9, 10.1.2.3, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q", got)
	}
	if got := h.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("trusted X-Forwarded-Proto %q", got)
	}
	if got := h.Values("X-Gatehouse-App-Id"); len(got) != 1 || got[0] != "hello" {
		t.Errorf("trusted peers do not get to set context headers: %q", got)
	}
}

// TestTrustedProxyForwarded: a trusted proxy's RFC 7239 Forwarded reaches
// the host with the proxy appended as the last hop, on the fast path (GET)
// and through ReverseProxy (POST), as its X-Forwarded-For does; the
// gateway makes none where the proxy sent none. (A client's own Forwarded
// never arrives: TestClientGatehouseHeadersNeverArrive.)
func TestTrustedProxyForwarded(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	e.backend("h1", "hello", echo())
	for _, m := range []string{"GET", "POST"} {
		res := e.do(m, "hello.apps.test", "/", http.Header{
			"Forwarded": {"for=198.51.100.7;proto=https", `for="[2001:db8::7]"`},
		}, strings.NewReader(""))
		h := echoed(t, res)
		if got, want := h.Values("Forwarded"), `for=198.51.100.7;proto=https, for="[2001:db8::7]", for=127.0.0.1`; len(got) != 1 || got[0] != want {
			t.Errorf("%s: Forwarded %q, want %q", m, got, want)
		}
		if got := h.Get("X-Gatehouse-Client-Ip"); got != "127.0.0.1" {
			t.Errorf("%s: client ip %q: Forwarded does not name the client, X-Forwarded-For does", m, got)
		}
		res = e.do(m, "hello.apps.test", "/", nil, strings.NewReader(""))
		if got, ok := echoed(t, res)["Forwarded"]; ok {
			t.Errorf("%s: a Forwarded %q the proxy did not send", m, got)
		}
	}
}

func TestClientFromChain(t *testing.T) {
	g := &Gateway{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	peer := netip.MustParseAddr("10.0.0.1")
	tests := []struct {
		chain []string
		want  string
	}{
		{nil, "10.0.0.1"},
		{[]string{"1.2.3.4"}, "1.2.3.4"},
		{[]string{"1.2.3.4, 5.6.7.8"}, "5.6.7.8"},
		{[]string{"1.2.3.4, 10.9.9.9"}, "1.2.3.4"},
		{[]string{"1.2.3.4", "10.9.9.9, 10.8.8.8"}, "1.2.3.4"},
		{[]string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{[]string{"garbage, 10.2.2.2"}, "10.2.2.2"},
		{[]string{"1.2.3.4, garbage"}, "10.0.0.1"},
		{[]string{"[2001:db8::1]:443, ::1"}, "2001:db8::1"},
		{[]string{"[2001:db8::1], ::1"}, "2001:db8::1"},
		{[]string{"[2001:db8::1]]"}, "10.0.0.1"},
		{[]string{"[1.2.3.4]"}, "10.0.0.1"},
		{[]string{"[::ffff:1.2.3.4]"}, "1.2.3.4"},
		{[]string{"::ffff:1.2.3.4"}, "1.2.3.4"},
		{[]string{" 1.2.3.4 ,"}, "10.0.0.1"},
	}
	for _, tt := range tests {
		if got := g.clientFromChain(tt.chain, peer); got.String() != tt.want {
			t.Errorf("clientFromChain(%q) = %s, want %s", tt.chain, got, tt.want)
		}
	}
}

func TestUnknownHost404(t *testing.T) {
	e := newEnv(t, nil)
	for _, host := range []string{"nope.apps.test", "example.org", "127.0.0.1", "a.hello.apps.test"} {
		p := wantProblem(t, e.get(host, "/"), http.StatusNotFound)
		if p.Detail == "" {
			t.Errorf("%s: empty detail", host)
		}
	}
}

func TestAPIHost(t *testing.T) {
	var saw http.Header
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		saw = r.Header.Clone()
		_, _ = io.WriteString(w, "api:"+r.URL.Path)
	})
	e := newEnv(t, func(o *Options) { o.API = api })
	res := e.do("GET", "API.apps.test:443", "/api/v3/discovery/clusters", http.Header{"X-Gatehouse-Subject": {"forged"}}, nil)
	if body := readBody(t, res); res.StatusCode != 200 || body != "api:/api/v3/discovery/clusters" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	if saw.Get("X-Gatehouse-Subject") != "" || saw.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Fatalf("API did not get hygiene: %v", saw)
	}
	if res.Header.Get("X-Gatehouse-Cluster") != "c1" {
		t.Fatal("API response not stamped")
	}
	// Without an API handler the name is not served.
	e2 := newEnv(t, nil)
	wantProblem(t, e2.get("api.apps.test", "/"), http.StatusNotFound)
}

func TestSuspendedAndRetired503(t *testing.T) {
	e := newEnv(t, nil)
	var hits atomic.Int32
	const page = "https://page.example"
	cors := route.CORS{Origins: []string{page}}
	e.b.PutApp(&route.App{ID: "sus", Status: route.StatusSuspended, CORS: cors})
	e.b.PutApp(&route.App{ID: "old", Status: route.StatusRetired, CORS: cors})
	for _, app := range []string{"sus", "old"} {
		e.backend(app+"-h", app, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		wantProblem(t, e.get(app+".apps.test", "/"), http.StatusServiceUnavailable)
		// A page on an allowed origin can read why (step 5's fields on
		// the gateway's own errors); another origin cannot.
		for _, tt := range []struct{ origin, acao string }{{page, page}, {"https://other.example", ""}} {
			res := e.do("GET", app+".apps.test", "/", http.Header{"Origin": {tt.origin}}, nil)
			wantProblem(t, res, http.StatusServiceUnavailable)
			if got := res.Header.Get("Access-Control-Allow-Origin"); got != tt.acao {
				t.Errorf("%s from %s: Access-Control-Allow-Origin %q, want %q", app, tt.origin, got, tt.acao)
			}
			if !strings.Contains(res.Header.Get("Vary"), "Origin") {
				t.Errorf("%s from %s: Vary %q lacks Origin", app, tt.origin, res.Header.Get("Vary"))
			}
		}
	}
	if hits.Load() != 0 {
		t.Fatal("a suspended or retired app's host got a request")
	}
}

// TestSuspendedAndRetiredPreflight: a preflight to a suspended or retired
// app that step 5 would admit gets its 204, so that the call it admits
// can read the 503; any other preflight (another origin, an app with no
// CORS list, a header the app does not allow) gets the contract's 503
// (DESIGN §2 step 3), which a browser refuses just as it would a 403, and
// which tells anyone else why. None reaches a host.
func TestSuspendedAndRetiredPreflight(t *testing.T) {
	e := newEnv(t, nil)
	var hits atomic.Int32
	const page = "https://page.example"
	cors := route.CORS{Origins: []string{page}}
	e.b.PutApp(&route.App{ID: "sus", Status: route.StatusSuspended, CORS: cors})
	e.b.PutApp(&route.App{ID: "old", Status: route.StatusRetired, CORS: route.CORS{Origins: cors.Origins, AllowHeaders: []string{"x-ok"}}})
	e.b.PutApp(&route.App{ID: "bare", Status: route.StatusSuspended})
	for _, app := range []string{"sus", "old", "bare"} {
		e.backend(app+"-h", app, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	}
	for _, tt := range []struct {
		app, origin, headers string
		want                 int
	}{
		{"sus", page, "", http.StatusNoContent},
		{"old", page, "", http.StatusNoContent},
		{"old", page, "x-ok", http.StatusNoContent},
		{"old", page, "x-custom", http.StatusServiceUnavailable},
		{"sus", "https://other.example", "", http.StatusServiceUnavailable},
		{"old", "https://other.example", "", http.StatusServiceUnavailable},
		{"bare", page, "", http.StatusServiceUnavailable},
	} {
		h := http.Header{"Origin": {tt.origin}, "Access-Control-Request-Method": {"PUT"}}
		if tt.headers != "" {
			h.Set("Access-Control-Request-Headers", tt.headers)
		}
		res := e.do("OPTIONS", tt.app+".apps.test", "/data", h, nil)
		if tt.want != http.StatusNoContent {
			wantProblem(t, res, tt.want)
			if got := res.Header.Get("Access-Control-Allow-Methods"); got != "" {
				t.Errorf("%s from %s: refused preflight allows methods %q", tt.app, tt.origin, got)
			}
			continue
		}
		readBody(t, res)
		if res.StatusCode != tt.want {
			t.Errorf("%s from %s: status %d, want %d", tt.app, tt.origin, res.StatusCode, tt.want)
		}
		if got := res.Header.Get("Access-Control-Allow-Origin"); got != page {
			t.Errorf("%s from %s: Access-Control-Allow-Origin %q", tt.app, tt.origin, got)
		}
	}
	wantProblem(t, e.do("OPTIONS", "nope.apps.test", "/", http.Header{"Origin": {page}, "Access-Control-Request-Method": {"PUT"}}, nil), http.StatusNotFound)
	if hits.Load() != 0 {
		t.Fatalf("a suspended or retired app's host got %d requests", hits.Load())
	}
}

// TestPassthroughApp421: a request for a passthrough app that reaches the
// L7 path (a reused TLS connection terminated for another name, or
// plaintext) gets 421 with nothing sent to any host, its cookies included.
func TestPassthroughApp421(t *testing.T) {
	e := newEnv(t, nil)
	e.b.PutApp(&route.App{ID: "vault", Mode: route.ModePassthrough, Status: route.StatusActive})
	var hits atomic.Int32
	seen := func(http.ResponseWriter, *http.Request) { hits.Add(1) }
	// A tls host (what a passthrough app has) and, so that a proxy attempt
	// would have somewhere to go, an http one.
	e.addHost("vault-tls", "vault", "tls", "tls://127.0.0.1:1")
	e.backend("vault-http", "vault", http.HandlerFunc(seen))
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		res := e.do(m, "vault.apps.test", "/", http.Header{"Cookie": {"session=secret"}}, nil)
		wantProblem(t, res, http.StatusMisdirectedRequest)
	}
	if hits.Load() != 0 {
		t.Fatalf("a passthrough app's request reached a host %d times", hits.Load())
	}
	// An http app is served as before.
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") }))
	if res := e.get("hello.apps.test", "/"); res.StatusCode != 200 || readBody(t, res) != "hi" {
		t.Fatalf("hello: %d", res.StatusCode)
	}
}

func TestUnreachable502(t *testing.T) {
	e := newEnv(t, nil)
	e.addHost("dead", "hello", "http", deadURL(t))
	p := wantProblem(t, e.get("hello.apps.test", "/"), http.StatusBadGateway)
	if strings.Contains(p.Detail, "dial") || strings.Contains(p.Detail, "refused") {
		t.Fatalf("detail leaks the error: %q", p.Detail)
	}
	if !e.b.Host("dead").Health.Degraded(time.Now()) {
		t.Fatal("an unreachable host was not marked degraded")
	}
	if n := testutil.ToFloat64(e.gw.Metrics().UpstreamErrors.WithLabelValues("hello", "dial")); n < 1 {
		t.Fatalf("upstream dial errors = %v", n)
	}
	// Still 502 (not 503) while it cools down: the host exists.
	wantProblem(t, e.get("hello.apps.test", "/"), http.StatusBadGateway)
}

// TestSlowBackend504: a host that takes a request and never answers gets
// the client a 504 problem once Proxy.ResponseHeaderTimeout passes, over
// HTTP/1.1 and h2c alike, and the host's request is cancelled (its h2c
// stream reset) rather than held; a slow host is not marked degraded.
func TestSlowBackend504(t *testing.T) {
	for _, scheme := range []string{"http", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.Proxy.ResponseHeaderTimeout = 100 * time.Millisecond })
			release := make(chan struct{})
			defer close(release)
			gone := make(chan string, 1)
			s := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
				case <-r.Context().Done():
					gone <- r.Proto
				}
			}))
			t.Cleanup(s.Close)
			e.addHost("slow", "hello", scheme, strings.Replace(s.URL, "http:", scheme+":", 1))
			// Bounded: without the timeout the gateway would wait for ever.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/", nil)
			req.Host = "hello.apps.test"
			res, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatalf("no answer from the gateway: %v", err)
			}
			defer res.Body.Close()
			p := wantProblem(t, res, http.StatusGatewayTimeout)
			if p.Detail != "the app did not answer in time" {
				t.Fatalf("detail %q", p.Detail)
			}
			select {
			case proto := <-gone:
				if want := map[string]string{"http": "HTTP/1.1", "h2c": "HTTP/2.0"}[scheme]; proto != want {
					t.Fatalf("the host was reached over %s, want %s", proto, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the host's request was still held after the 504")
			}
			if e.b.Host("slow").Health.Degraded(time.Now()) {
				t.Fatal("a slow host was marked degraded as if unreachable")
			}
			if n := testutil.ToFloat64(e.gw.Metrics().UpstreamErrors.WithLabelValues("hello", "timeout")); n != 1 {
				t.Fatalf("upstream timeout errors = %v, want 1", n)
			}
		})
	}
}

// TestHungHostCoolsAfterTimeoutsInARow: a host that accepts requests and
// answers none cools down after three timeouts in a row, so its share of
// requests goes to its sibling instead of each waiting out the deadline
// for a 504; a host that answers between its slow requests never does.
func TestHungHostCoolsAfterTimeoutsInARow(t *testing.T) {
	for _, scheme := range []string{"http", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			now := time.Now() // frozen: a cool-down, once begun, lasts the test
			e := newEnv(t, func(o *Options) {
				o.Proxy.ResponseHeaderTimeout = 100 * time.Millisecond
				o.Now = func() time.Time { return now }
			})
			var hung, fine atomic.Int32
			s := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/fast" {
					return
				}
				hung.Add(1)
				<-r.Context().Done()
			}))
			t.Cleanup(s.Close)
			h := e.addHost("hung", "hello", scheme, strings.Replace(s.URL, "http:", scheme+":", 1))
			get := func(path string) int {
				t.Helper()
				res := e.get("hello.apps.test", path)
				readBody(t, res)
				return res.StatusCode
			}
			// Alone, answering between its slow requests: never cooled.
			for range 4 {
				if st := get("/slow"); st != http.StatusGatewayTimeout {
					t.Fatalf("slow request: %d, want 504", st)
				}
				if st := get("/fast"); st != http.StatusOK {
					t.Fatalf("fast request: %d, want 200", st)
				}
			}
			if h.Health.Degraded(now) {
				t.Fatal("a host answering between its slow requests cooled down")
			}
			// With a sibling: three unanswered in a row and it cools.
			e.backend("fine", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { fine.Add(1) }))
			hung.Store(0)
			for i := 0; hung.Load() < 3; i++ {
				if i == 20 {
					t.Fatalf("the hung host got %d of 20 requests", hung.Load())
				}
				get("/slow")
			}
			if !h.Health.Degraded(now) {
				t.Fatal("three timeouts in a row did not cool the host")
			}
			before := fine.Load()
			for range 10 {
				if st := get("/slow"); st != http.StatusOK {
					t.Fatalf("while the hung host cools: %d, want 200 from its sibling", st)
				}
			}
			if n := hung.Load(); n != 3 || fine.Load()-before != 10 {
				t.Fatalf("while cooling, the hung host got %d more requests, its sibling %d of 10", n-3, fine.Load()-before)
			}
		})
	}
}

// TestConcurrentSlowRequestsDoNotCoolAnAnsweringHost: three requests to a
// slow endpoint sent together all time out together, but the host answered
// a request sent after them meanwhile: it is not hung, and must not cool
// down. Otherwise any client could take a healthy host out of rotation by
// calling a slow endpoint three times at once, whatever the host answers.
func TestConcurrentSlowRequestsDoNotCoolAnAnsweringHost(t *testing.T) {
	for _, scheme := range []string{"http", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			var clock atomic.Int64 // moved by the test alone
			clock.Store(time.Now().UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			e := newEnv(t, func(o *Options) {
				o.Proxy.ResponseHeaderTimeout = 500 * time.Millisecond
				o.Now = now
			})
			var slow atomic.Int32
			s := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/fast" {
					return
				}
				slow.Add(1)
				<-r.Context().Done()
			}))
			t.Cleanup(s.Close)
			h := e.addHost("h", "hello", scheme, strings.Replace(s.URL, "http:", scheme+":", 1))
			const n = 3
			codes := make(chan int, n)
			for range n {
				go func() {
					req, _ := http.NewRequest("GET", e.srv.URL+"/slow", nil)
					req.Host = "hello.apps.test"
					res, err := e.srv.Client().Do(req)
					if err != nil {
						codes <- 0
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					codes <- res.StatusCode
				}()
			}
			for deadline := time.Now().Add(5 * time.Second); slow.Load() < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d slow requests reached the host", slow.Load(), n)
				}
			}
			clock.Add(int64(100 * time.Millisecond))
			// Sent after the slow ones, answered while they wait.
			res := e.get("hello.apps.test", "/fast")
			readBody(t, res)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("fast request: %d, want 200", res.StatusCode)
			}
			for range n {
				if c := <-codes; c != http.StatusGatewayTimeout {
					t.Fatalf("slow request: %d, want 504", c)
				}
			}
			if h.Health.Degraded(now()) {
				t.Fatal("a host that answered a later request while three slow ones waited cooled down")
			}
		})
	}
}

func TestNoHost503AndNoRoutableHost502(t *testing.T) {
	e := newEnv(t, nil)
	p := wantProblem(t, e.get("hello.apps.test", "/"), http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "no host") {
		t.Fatalf("detail %q", p.Detail)
	}
	// An unverified claim is no host: anyone on the bus may announce one.
	h := e.addHost("prov", "hello", "http", deadURL(t))
	prov := *h
	prov.State = route.HostProvisional
	e.b.SetHost(&prov)
	wantProblem(t, e.get("hello.apps.test", "/"), http.StatusServiceUnavailable)
	// A verified host that is not routable now is one: 502.
	sick := *h
	sick.State = route.HostUnhealthy
	e.b.SetHost(&sick)
	wantProblem(t, e.get("hello.apps.test", "/"), http.StatusBadGateway)
}

func TestRoundRobin(t *testing.T) {
	e := newEnv(t, nil)
	var a, b atomic.Int32
	e.backend("a", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { a.Add(1) }))
	e.backend("b", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { b.Add(1) }))
	for range 20 {
		if res := e.get("hello.apps.test", "/"); res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
	}
	if a.Load() != 10 || b.Load() != 10 {
		t.Fatalf("round robin split %d/%d", a.Load(), b.Load())
	}
}

// TestKilledHostTrafficMovesToSibling: with one of two hosts killed, no
// GET fails, thanks to the local retry on a refused connection, and the
// dead host is skipped while it cools down.
func TestKilledHostTrafficMovesToSibling(t *testing.T) {
	e := newEnv(t, nil)
	var alive atomic.Int32
	dead := e.backend("a", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	e.backend("b", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { alive.Add(1) }))
	dead.Close()
	failed := 0
	for range 40 {
		res := e.get("hello.apps.test", "/")
		readBody(t, res)
		if res.StatusCode != 200 {
			failed++
		}
	}
	if failed != 0 {
		t.Fatalf("%d of 40 GETs failed after a host was killed", failed)
	}
	if alive.Load() != 40 {
		t.Fatalf("sibling served %d of 40", alive.Load())
	}
	if !e.b.Host("a").Health.Degraded(time.Now()) {
		t.Fatal("killed host not degraded")
	}
	// A POST with a body is retried too: nothing reached the dead host.
	res := e.do("POST", "hello.apps.test", "/", nil, strings.NewReader("payload"))
	if res.StatusCode != 200 {
		t.Fatalf("POST after a refused connection: %d", res.StatusCode)
	}
}

func TestAllDegradedStillTried(t *testing.T) {
	e := newEnv(t, nil)
	s := e.backend("a", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h := e.b.Host("a")
	h.Health.Fail(time.Now())
	if !h.Health.Degraded(time.Now()) {
		t.Fatal("setup: not degraded")
	}
	if res := e.get("hello.apps.test", "/"); res.StatusCode != 200 {
		t.Fatalf("only host degraded: %d, want it tried anyway", res.StatusCode)
	}
	if h.Health.Degraded(time.Now()) {
		t.Fatal("a success did not clear the cool-down")
	}
	_ = s
}

func TestServerSentEventsFlushAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	gotFirst := make(chan struct{})
	e.backend("sse", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		select { // the stream stays open until the client has the first event
		case <-gotFirst:
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, "data: two\n\n")
	}))
	res := e.get("hello.apps.test", "/events")
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	close(gotFirst)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	e := newEnv(t, nil)
	var hostSawID atomic.Value
	hostSawID.Store("")
	e.backend("ws", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || r.Header.Get("X-Gatehouse-App-Id") != "hello" {
			http.Error(w, "not an upgrade", 400)
			return
		}
		hostSawID.Store(r.Header.Get("X-Request-Id"))
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		buf := make([]byte, 4)
		for { // echo 4-byte messages until the client closes
			if _, err := io.ReadFull(brw, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}))
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.apps.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("X-Gatehouse-Cluster") != "c1" {
		t.Fatalf("upgrade answered %d %v", res.StatusCode, res.Header)
	}
	// The 101 carries the request id like every other answer, once.
	if id := res.Header.Values("X-Request-Id"); len(id) != 1 || id[0] != hostSawID.Load() {
		t.Fatalf("101 X-Request-Id %q, the host saw %q", id, hostSawID.Load())
	}
	for _, msg := range []string{"ping", "pong", "1234"} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q, %v", buf, err)
		}
	}
	c.Close()
	testutilWaitLog(t, e, `"status":101`)
}

// testutilWaitLog waits for the access log to contain s.
func testutilWaitLog(t *testing.T, e *env, s string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("log never contained %s:\n%s", s, e.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestH2CUpstreamWithTrailers(t *testing.T) {
	e := newEnv(t, nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2, got "+r.Proto, 400)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "Grpc-Status")
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		_, _ = w.Write(append([]byte("h2:"), body...))
		http.NewResponseController(w).Flush() // a stream, as gRPC's are
		w.Header().Set("Grpc-Status", "0")
	})
	s := h2cServer(h)
	t.Cleanup(s.Close)
	e.addHost("grpc", "hello", "h2c", "h2c://"+s.Listener.Addr().String())
	res := e.do("POST", "hello.apps.test", "/pkg.Svc/Call", http.Header{"Te": {"trailers"}, "Content-Type": {"application/grpc"}}, strings.NewReader("msg"))
	if body := readBody(t, res); res.StatusCode != 200 || body != "h2:msg" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	if got := res.Trailer.Get("Grpc-Status"); got != "0" {
		t.Fatalf("trailer Grpc-Status %q, trailers %v", got, res.Trailer)
	}
}

func TestKeepAliveReuse(t *testing.T) {
	e := newEnv(t, nil)
	var conns atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") }))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	e.addHost("ka", "hello", "http", s.URL)
	const n = 100
	var wg sync.WaitGroup
	for w := range 4 { // 4 concurrent clients, 25 requests each
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n / 4 {
				req, _ := http.NewRequest("GET", e.srv.URL+fmt.Sprintf("/%d", w), nil)
				req.Host = "hello.apps.test"
				res, err := e.srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	if c := conns.Load(); c > 4 {
		t.Fatalf("%d requests opened %d upstream connections, want at most 4", n, c)
	}
}

func TestPanicRecovery(t *testing.T) {
	var abort atomic.Bool
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Leak", "yes")
		if abort.Load() {
			panic(http.ErrAbortHandler)
		}
		panic("secret internal state 10.1.2.3")
	})
	e := newEnv(t, func(o *Options) { o.API = api })
	res := e.get("api.apps.test", "/")
	p := wantProblem(t, res, http.StatusInternalServerError)
	if strings.Contains(p.Detail, "secret") || res.Header.Get("X-Leak") != "" {
		t.Fatalf("panic leaked: %+v %v", p, res.Header)
	}
	if !strings.Contains(e.logs.String(), "secret internal state") {
		t.Fatal("panic not logged")
	}
	// The gateway keeps serving.
	if res := e.get("x.example", "/healthz"); res.StatusCode != 200 {
		t.Fatal("gateway down after a panic")
	}
	abort.Store(true)
	req, _ := http.NewRequest("GET", e.srv.URL+"/", nil)
	req.Host = "api.apps.test"
	if res, err := e.srv.Client().Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("ErrAbortHandler answered %d instead of aborting", res.StatusCode)
	}
}

func TestRequestID(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", echo())
	tests := []struct {
		sent string
		keep bool
	}{
		{"abc-123", true},
		{"4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"", false},
		{"has space", false},
		{strings.Repeat("x", 129), false},
		{strings.Repeat("x", 128), true},
		{"tab\there", false},
	}
	for _, tt := range tests {
		hdr := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		if tt.sent != "" {
			hdr["X-Request-Id"] = []string{tt.sent}
		}
		res := e.do("GET", "hello.apps.test", "/", hdr, nil)
		h := echoed(t, res)
		got := res.Header.Get("X-Request-Id")
		if tt.keep && got != tt.sent || !tt.keep && (got == tt.sent || len(got) < 16) {
			t.Errorf("sent %q, response id %q", tt.sent, got)
		}
		if h.Get("X-Request-Id") != got || h.Get("X-Gatehouse-Request-Id") != got {
			t.Errorf("backend saw %q / %q, response %q", h.Get("X-Request-Id"), h.Get("X-Gatehouse-Request-Id"), got)
		}
		if h.Get("Traceparent") != hdr.Get("Traceparent") {
			t.Errorf("traceparent changed: %q", h.Get("Traceparent"))
		}
	}
}

// TestRequestContextFromTheServer: a request whose context the gateway
// made for the server (RequestContext, as the lane asks for it) is served
// like any other: an id is given, stamped on the response and sent to the
// host, the client address is the connection's, and a second request
// with the same context (the exchange in use) gets one of its own.
func TestRequestContextFromTheServer(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", echo())
	ctx := e.gw.RequestContext(context.Background())
	ids := map[string]bool{}
	for i := range 2 {
		r := httptest.NewRequest("GET", "http://hello.apps.test/", nil).WithContext(ctx)
		r.RemoteAddr = "192.0.2.10:1234"
		w := httptest.NewRecorder()
		e.gw.ServeHTTP(w, r)
		res := w.Result()
		h := echoed(t, res)
		id := res.Header.Get("X-Request-Id")
		if len(id) < 16 || h.Get("X-Gatehouse-Request-Id") != id || ids[id] {
			t.Errorf("request %d: response id %q, host saw %q (ids before: %v)", i, id, h.Get("X-Gatehouse-Request-Id"), ids)
		}
		ids[id] = true
		if got := h.Get("X-Gatehouse-Client-Ip"); got != "192.0.2.10" {
			t.Errorf("request %d: host saw client %q", i, got)
		}
		if res.Header.Get(headerCluster) == "" {
			t.Errorf("request %d: no %s on the response", i, headerCluster)
		}
	}
}

// TestRequestDoneReusesOnlyContained: RequestDone keeps a request's
// exchange for a later one only when nothing can still hold it: the proxy
// answered on its fast path, with no panic. A ReverseProxy answer (its
// transport may run on), a layer's own answer and a cut response are
// never reused, nor a context RequestContext did not make.
func TestRequestDoneReusesOnlyContained(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cut" {
			// A length the body never reaches: the proxy cuts the answer.
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "short")
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	tests := []struct {
		name, method, host, path string
		body                     string
		want                     bool
	}{
		{"fast path", "GET", "hello.apps.test", "/", "", true},
		{"HEAD on the fast path", "HEAD", "hello.apps.test", "/", "", true},
		{"a body: ReverseProxy", "POST", "hello.apps.test", "/", "x", false},
		{"unknown host: the route layer's 404", "GET", "nope.apps.test", "/", "", false},
		{"the host cuts its answer", "GET", "hello.apps.test", "/cut", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// As a server's request: the proxy aborts a cut answer only then.
			parent := context.WithValue(context.Background(), http.ServerContextKey, &http.Server{})
			ctx := e.gw.RequestContext(parent)
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			r := httptest.NewRequest(tt.method, "http://"+tt.host+tt.path, body).WithContext(ctx)
			r.RemoteAddr = "192.0.2.10:1234"
			w := httptest.NewRecorder()
			func() {
				defer func() {
					if v := recover(); v != nil && v != http.ErrAbortHandler {
						panic(v)
					}
				}()
				e.gw.ServeHTTP(w, r)
			}()
			said := e.gw.RequestDone(ctx)
			// Reused, the exchange went back to the pool cleared: nothing of
			// this request (its id, client, token subject) reaches the next.
			x := ctx.(*exchange)
			if got := x.Context == nil; got != tt.want || said != tt.want {
				t.Errorf("reused = %v, RequestDone said %v, want %v (status %d)", got, said, tt.want, w.Code)
			}
			if tt.want && !reflect.ValueOf(x).Elem().IsZero() {
				t.Errorf("reused but not cleared: %+v", x.Req)
			}
		})
	}
	// Not an exchange: left alone, and not said to be free.
	if e.gw.RequestDone(context.Background()) {
		t.Error("RequestDone said a context it did not make is free")
	}
}

func TestMetricsAndAccessLog(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "SECRET-PAYLOAD") }))
	readBody(t, e.get("hello.apps.test", "/p?q=SECRET-QUERY"))
	readBody(t, e.get("nope.apps.test", "/"))
	m := e.gw.Metrics()
	if n := testutil.ToFloat64(m.Requests.WithLabelValues("hello", "2xx", "GET")); n != 1 {
		t.Errorf("hello 2xx GET = %v", n)
	}
	if n := testutil.ToFloat64(m.Requests.WithLabelValues("_unknown", "4xx", "GET")); n != 1 {
		t.Errorf("unknown 4xx GET = %v", n)
	}
	if n, err := testutil.GatherAndCount(e.reg, "gatehouse_http_request_duration_seconds", "gatehouse_active_connections"); err != nil || n != 3 {
		t.Errorf("registered series = %d, %v", n, err)
	}
	logs := e.logs.String()
	if strings.Contains(logs, "SECRET") {
		t.Fatalf("access log carries payload or query:\n%s", logs)
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		if strings.Contains(l, `"app":"hello"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range []string{"method", "host", "path", "status", "bytes", "duration", "app", "request_id", "client_ip"} {
		if _, ok := line[k]; !ok {
			t.Errorf("access log line lacks %s: %v", k, line)
		}
	}
	if line["bytes"] != float64(len("SECRET-PAYLOAD")) || line["status"] != float64(200) || line["client_ip"] != "127.0.0.1" {
		t.Errorf("access log line %v", line)
	}
}

func TestPeerFallbackSeam(t *testing.T) {
	var causes []error
	e := newEnv(t, func(o *Options) {
		o.Proxy.Fallback = func(w http.ResponseWriter, r *http.Request, cause error) bool {
			causes = append(causes, cause)
			w.Header().Set("X-Failover-Cluster", "c2")
			_, _ = io.WriteString(w, "from peer")
			return true
		}
	})
	res := e.get("hello.apps.test", "/") // no host at all
	if body := readBody(t, res); body != "from peer" || res.Header.Get("X-Gatehouse-Cluster") != "c1" {
		t.Fatalf("%q %v", body, res.Header)
	}
	e.addHost("dead", "hello", "http", deadURL(t))
	readBody(t, e.get("hello.apps.test", "/"))
	if len(causes) != 2 || !errorsIs(causes[0], proxy.ErrNoHost) || !errorsIs(causes[1], proxy.ErrUnreachable) {
		t.Fatalf("causes %v", causes)
	}
}

// TestClientGoneIs499: a client that leaves before the host answers is
// logged and counted as 499, and the host's request is cancelled.
func TestClientGoneIs499(t *testing.T) {
	e := newEnv(t, nil)
	arrived, cancelled := make(chan struct{}), make(chan struct{})
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(cancelled)
	}))
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/", nil)
	req.Host = "hello.apps.test"
	errc := make(chan error, 1)
	go func() {
		res, err := e.srv.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("request completed")
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the host's request was not cancelled")
	}
	testutilWaitLog(t, e, `"status":499`)
	if n := testutil.ToFloat64(e.gw.Metrics().UpstreamErrors.WithLabelValues("hello", "canceled")); n != 1 {
		t.Fatalf("canceled upstream errors = %v", n)
	}
}

// TestDeadH2CHostFailsOver: a refused h2c connection is a dial failure
// like any other: the host cools down and the request goes to a sibling.
func TestDeadH2CHostFailsOver(t *testing.T) {
	e := newEnv(t, nil)
	e.addHost("a-dead", "hello", "h2c", strings.Replace(deadURL(t), "http:", "h2c:", 1))
	s := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	t.Cleanup(s.Close)
	e.addHost("b-live", "hello", "h2c", s.URL)
	for range 4 {
		res := e.get("hello.apps.test", "/")
		if body := readBody(t, res); res.StatusCode != 200 || body != "HTTP/2.0" {
			t.Fatalf("%d %q", res.StatusCode, body)
		}
	}
	if !e.b.Host("a-dead").Health.Degraded(time.Now()) {
		t.Fatal("dead h2c host not degraded")
	}
}

// TestClientCannotDegradeHosts: a request ReverseProxy refuses for the
// client's sake (an invalid Upgrade) does not take the host out of
// rotation.
func TestClientCannotDegradeHosts(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	out, _ := e.rawExchange("GET / HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: Upgrade\r\nUpgrade: bad\xffproto\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 502") {
		t.Fatalf("answered %q, want ReverseProxy's refusal", out)
	}
	if e.b.Host("h1").Health.Degraded(time.Now()) {
		t.Fatalf("a client's bad Upgrade degraded the host (answer %q)", out)
	}
}

// TestBrokenClientBodyDoesNotDegrade: a client whose chunked body breaks
// mid-way gets 400 (or nothing, once gone), and the host stays in
// rotation.
func TestBrokenClientBodyDoesNotDegrade(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	for _, tail := range []string{"zz\r\n", "3\r\nabcXY"} { // a bad chunk size; bad chunk end
		out, _ := e.rawExchange("POST / HTTP/1.1\r\nHost: hello.apps.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n" + tail)
		if !strings.HasPrefix(out, "HTTP/1.1 400 ") || !strings.Contains(out, "problem+json") {
			t.Errorf("broken body answered %q, want a 400 problem", out)
		}
		if e.b.Host("h1").Health.Degraded(time.Now()) {
			t.Fatalf("a client's broken body degraded the host (answer %q)", out)
		}
	}
}

// h2cServer serves h over cleartext HTTP/2 with prior knowledge (and
// HTTP/1.1), as gRPC backends do.
func h2cServer(h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	return s
}

// TestUpgradeAnswerHasNoContentLength: the 101 that starts a tunnel
// carries no Content-Length whatever the request's method (RFC 9110
// §8.6: never on a 1xx), as the host sent it. Upgrades by POST or PUT
// (Docker's attach, custom protocols) got "Content-Length: 0" added by
// the way net/http writes a response to those methods; the request's
// body, sent before the 101, still reached the host.
func TestUpgradeAnswerHasNoContentLength(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("up", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "test")
		w.WriteHeader(http.StatusSwitchingProtocols)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("body:" + string(body) + "\n")
		_ = brw.Flush()
	}))
	for _, tc := range []struct{ method, body string }{
		{"GET", ""},
		{"POST", ""},
		{"POST", "hello"},
		{"PUT", "hello"},
		{"PATCH", "x"},
		{"DELETE", ""},
	} {
		t.Run(tc.method+"/"+tc.body, func(t *testing.T) {
			c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = fmt.Fprintf(c, "%s /up HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: Upgrade\r\nUpgrade: test\r\nContent-Length: %d\r\n\r\n%s", tc.method, len(tc.body), tc.body)
			br := bufio.NewReader(c)
			tp := textproto.NewReader(br)
			status, err := tp.ReadLine()
			if err != nil {
				t.Fatal(err)
			}
			hdr, err := tp.ReadMIMEHeader()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(status, "HTTP/1.1 101 ") {
				t.Fatalf("status line %q", status)
			}
			if v, ok := hdr["Content-Length"]; ok {
				t.Fatalf("101 carries Content-Length %q", v)
			}
			if line, err := br.ReadString('\n'); err != nil || line != "body:"+tc.body+"\n" {
				t.Fatalf("tunnel's first line %q, %v", line, err)
			}
		})
	}
}
