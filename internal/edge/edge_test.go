package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hostproto "github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
)

const zone = "example.test"

// running is an Edge under test, its Run goroutine and addresses.
type running struct {
	*Edge
	cancel context.CancelFunc
	done   chan error
	https  string
	http   string
	mgmt   string
}

// stop drains and returns Run's result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// start runs an Edge on loopback with opts (addresses default to
// 127.0.0.1:0 for every listener) and stops it when t ends.
func start(t testing.TB, opts Options) *running {
	t.Helper()
	for _, a := range []*string{&opts.HTTPAddr, &opts.HTTPSAddr, &opts.ManagementAddr} {
		if *a == "" {
			*a = "127.0.0.1:0"
		}
	}
	if opts.TLS == nil {
		opts.TLS = gatewayTLS(t, tlsmgr.Options{Names: []string{"api." + zone}})
	}
	if opts.Handler == nil {
		opts.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "l7 "+r.Proto+" "+r.Host) })
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ListenManagement(); err != nil {
		t.Fatal(err)
	}
	if err := e.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Edge: e, cancel: cancel, done: make(chan error, 1),
		https: e.Addr("https").String(), http: e.Addr("http").String(), mgmt: e.Addr("management").String()}
	go func() { r.done <- e.Run(ctx) }()
	testutil.WaitFor(t, 5*time.Second, e.serving.Load, "edge not serving")
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func gatewayTLS(t testing.TB, o tlsmgr.Options) *tls.Config {
	m, err := tlsmgr.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m.TLSConfig()
}

// tlsHost is a passthrough host: it terminates TLS with its own
// certificate and runs serve on each connection.
type tlsHost struct {
	ln       net.Listener
	accepted atomic.Int32
}

func startTLSHost(t testing.TB, cert tls.Certificate, serve func(*tls.Conn)) *tlsHost {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &tlsHost{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			go func() {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
				defer tc.Close()
				if tc.Handshake() == nil {
					serve(tc)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return h
}

func echo(c *tls.Conn) { _, _ = io.Copy(c, c) }

// table builds a routing table: zone example.test, app "web" in http
// mode, app "secure" in passthrough mode served by host addr.
func table(hostAddr string) *route.Live {
	live := &route.Live{}
	b := route.NewBuilder(live)
	b.PutZone(&route.Zone{Name: zone}, 1)
	b.PutApp(&route.App{ID: "web", Mode: route.ModeHTTP, Status: route.StatusActive})
	b.PutApp(&route.App{ID: "secure", Mode: route.ModePassthrough, Status: route.StatusActive})
	b.PutApp(&route.App{ID: "frozen", Mode: route.ModePassthrough, Status: route.StatusSuspended})
	b.SetHost(&route.Host{ID: "h1", Apps: []string{"secure", "frozen"}, Addr: hostAddr, Scheme: "tls", State: route.HostVerified})
	return live
}

func dialTLS(t testing.TB, addr string, cfg *tls.Config) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return tls.DialWithDialer(d, "tcp", addr, cfg)
}

func TestPassthroughEndToEnd(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	e := start(t, Options{Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil)})

	c, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
	if err != nil {
		t.Fatalf("handshake through the pipe: %v", err)
	}
	if got := c.ConnectionState().PeerCertificates[0]; !got.Equal(cert.Leaf) {
		t.Fatalf("client saw %q, want the host's own certificate", got.Subject)
	}
	msg := strings.Repeat("passthrough ", 10000)
	go func() { _, _ = io.WriteString(c, msg); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != msg {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
	c.Close()
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "pipe still counted after close")

	// Names that must never open a pipe: no SNI, unknown name, an app in
	// http mode, a suspended passthrough app. They meet the gateway's TLS.
	before := host.accepted.Load()
	for _, name := range []string{"", "nope." + zone, "web." + zone, "frozen." + zone, "127.0.0.1", "secure." + zone + ":443", "secure." + zone + ":junk"} {
		c, err := dialTLS(t, e.https, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if got := c.ConnectionState().PeerCertificates[0]; got.Equal(cert.Leaf) {
			t.Fatalf("%q reached the passthrough host", name)
		}
		c.Close()
	}
	if n := host.accepted.Load(); n != before {
		t.Fatalf("host accepted %d connections for non-passthrough names", n-before)
	}

	// A gateway's own host challenge is never piped on, even for a
	// passthrough name (hostproto.ChallengeALPN): it meets the gateway's
	// TLS, and its L7 refusal.
	c, err = dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, InsecureSkipVerify: true, NextProtos: []string{"http/1.1", hostproto.ChallengeALPN}})
	if err != nil {
		t.Fatalf("challenge hello: %v", err)
	}
	if got := c.ConnectionState().PeerCertificates[0]; got.Equal(cert.Leaf) {
		t.Fatal("a gateway's challenge reached the passthrough host")
	}
	c.Close()
	if n := host.accepted.Load(); n != before {
		t.Fatalf("host accepted %d connections for a gateway's challenge", n-before)
	}
}

// TestPassthroughIdleTimeout: a passthrough pipe that carries nothing for
// PipeIdleTimeout is closed and no longer counted; one whose client keeps
// talking, each gap shorter than the timeout, is kept past it.
func TestPassthroughIdleTimeout(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	if runtime.GOOS != "linux" {
		t.Skip("the pipe's idle timeout asks the socket (TCP_INFO), Linux only")
	}
	// Long enough that a test process stalled a few hundred milliseconds
	// between two pings does not make the busy pipe look idle.
	const idle = time.Second
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	e := start(t, Options{Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil), PipeIdleTimeout: idle})
	cfg := &tls.Config{ServerName: "secure." + zone, RootCAs: pool}

	busy, err := dialTLS(t, e.https, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	quiet, err := dialTLS(t, e.https, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	closed := make(chan error, 1)
	go func() {
		_, err := quiet.Read(make([]byte, 1))
		closed <- err
	}()
	buf := make([]byte, 4)
	ping := func(i int) {
		t.Helper()
		if _, err := busy.Write([]byte("ping")); err != nil {
			t.Fatalf("busy pipe, write %d: %v", i, err)
		}
		_ = busy.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(busy, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("busy pipe, echo %d: %q, %v", i, buf, err)
		}
	}
	for i := range 6 { // 6 × idle/4: the busy pipe outlives the timeout
		ping(i)
		time.Sleep(idle / 4)
	}
	select {
	case err := <-closed:
		if err == nil {
			t.Fatal("the quiet pipe read data")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a pipe silent for %v was not closed (idle timeout %v)", 6*idle/4+5*time.Second, idle)
	}
	// The busy pipe is still open and counted; the quiet one is not.
	ping(6)
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 1 }, "the idle pipe is still counted")
}

func TestPassthroughNoHostCloses(t *testing.T) {
	// The app is passthrough but its only host is gone: the client is
	// closed, and the gateway never terminates TLS for it.
	addr := testutil.RefusedAddr(t)
	e := start(t, Options{Passthrough: RoutePassthrough(table(addr), nil)})
	_, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, InsecureSkipVerify: true})
	if err == nil {
		t.Fatal("handshake succeeded with no host")
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "connection still counted")
}

// TestPassthroughHostKilled: the host dies mid-pipe; the client's side
// closes promptly.
func TestPassthroughHostKilled(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	killed := make(chan struct{})
	host := startTLSHost(t, cert, func(c *tls.Conn) {
		buf := make([]byte, 5)
		_, _ = io.ReadFull(c, buf)
		_, _ = c.Write([]byte("ok"))
		raw := c.NetConn().(*net.TCPConn)
		_ = raw.SetLinger(0)
		raw.Close() // killed: a reset, no close_notify
		close(killed)
	})
	e := start(t, Options{Passthrough: RoutePassthrough(table(host.ln.Addr().String()), nil)})
	c, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	<-killed
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = c.Read(buf)
	if err == nil {
		t.Fatal("read succeeded after host death")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("client not closed after the host died")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("client closed only after %v", d)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "pipe still counted")
}

func TestTerminateHTTP1AndH2(t *testing.T) {
	e := start(t, Options{})
	for _, proto := range []string{"h2", "http/1.1"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}}, ForceAttemptHTTP2: proto == "h2"}
		hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := hc.Get("https://" + e.https + "/x")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		want := map[string]string{"h2": "l7 HTTP/2.0", "http/1.1": "l7 HTTP/1.1"}[proto]
		if !strings.HasPrefix(string(body), want) {
			t.Fatalf("%s: body %q", proto, body)
		}
		leaf := resp.TLS.PeerCertificates[0]
		if leaf.Subject.Organization[0] != "gatehouse bootstrap" {
			t.Fatalf("not the bootstrap certificate: %v", leaf.Subject)
		}
	}
}

// TestGarbageOnHTTPSIsClosed: non-TLS bytes, a truncated record (closed by
// the hello deadline) and a malformed hello are all closed, never piped
// (what each is told before the close: TestHTTPSListenerRefusesClearly).
func TestGarbageOnHTTPSIsClosed(t *testing.T) {
	e := start(t, Options{ReadHeaderTimeout: 300 * time.Millisecond})
	for _, in := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\x16\x03\x01\x40\x00" + strings.Repeat("A", 100), "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"} {
		c, err := net.Dial("tcp", e.https)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, in)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(c) // an answer, if any, then the end
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%q: not closed: %v", in[:5], err)
		}
		c.Close()
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "garbage connections still counted")
}

// rawRequest writes req on a new connection to addr and returns the status
// line's code.
func rawRequest(t *testing.T, addr, req string) int {
	t.Helper()
	resp, _ := rawResponse(t, addr, req)
	return resp.StatusCode
}

// rawResponse writes req on a new connection to addr and returns the
// response and its body.
func rawResponse(t *testing.T, addr, req string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { _, _ = io.WriteString(c, req) }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body
}

func TestRequestLimits(t *testing.T) {
	e := start(t, Options{HTTPMode: ModeServe})
	long := "/" + strings.Repeat("a", 9<<10)
	cases := []struct {
		name string
		req  string
		want int
	}{
		{"ok", "GET /x HTTP/1.1\r\nHost: web.example.test\r\n\r\n", 200},
		{"line just under 8k", "GET /" + strings.Repeat("a", 8<<10-20) + " HTTP/1.1\r\nHost: w\r\n\r\n", 200},
		{"line over 8k", "GET " + long + " HTTP/1.1\r\nHost: w\r\n\r\n", 414},
		{"headers over 64k", "GET / HTTP/1.1\r\nHost: w\r\n" + strings.Repeat("X-Big: "+strings.Repeat("b", 1000)+"\r\n", 80) + "\r\n", 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rawRequest(t, e.http, tc.req); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	// The same limits hold on the https listener.
	c, err := dialTLS(t, e.https, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = io.WriteString(c, "GET "+long+" HTTP/1.1\r\nHost: w\r\n\r\n") }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 414 {
		t.Fatalf("https long line: %v %v", resp, err)
	}
}

func TestHTTPModes(t *testing.T) {
	acme := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == acmePrefix+"tok" {
				io.WriteString(w, "key-auth")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, mode := range []string{ModeRedirect, ModeACMEOnly, ModeServe} {
		t.Run(mode, func(t *testing.T) {
			e := start(t, Options{HTTPMode: mode, ACME: acme})
			get := func(path string) (*http.Response, string) {
				req, _ := http.NewRequest("GET", "http://"+e.http+path, nil)
				req.Host = "web." + zone
				resp, err := noRedirect.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp, string(b)
			}
			// ACME challenges come first in every mode.
			if resp, body := get(acmePrefix + "tok"); resp.StatusCode != 200 || body != "key-auth" {
				t.Fatalf("challenge: %d %q", resp.StatusCode, body)
			}
			if resp, _ := get(acmePrefix + "unknown"); resp.StatusCode != 404 {
				t.Fatalf("unknown challenge: %d", resp.StatusCode)
			}
			resp, body := get("/a/b?c=d&e=f")
			_, port, _ := net.SplitHostPort(e.https)
			switch mode {
			case ModeRedirect:
				if want := "https://web." + zone + ":" + port + "/a/b?c=d&e=f"; resp.StatusCode != 308 || resp.Header.Get("Location") != want {
					t.Fatalf("redirect: %d %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), want)
				}
			case ModeACMEOnly:
				if resp.StatusCode != 404 {
					t.Fatalf("acme-only: %d", resp.StatusCode)
				}
			case ModeServe:
				if resp.StatusCode != 200 || body != "l7 HTTP/1.1 web."+zone {
					t.Fatalf("serve: %d %q", resp.StatusCode, body)
				}
			}
			// GET /healthz is the L7 handler's in every mode (its first
			// layer answers it, on any host): a load balancer that checks
			// port 80 gets the same answer as on https, not a 308 or 404.
			if resp, body := get("/healthz"); resp.StatusCode != 200 || body != "l7 HTTP/1.1 web."+zone {
				t.Fatalf("GET /healthz: %d %q, want the L7 handler's answer", resp.StatusCode, body)
			}
			// Any other method on it is the mode's, as any other path.
			req, _ := http.NewRequest("POST", "http://"+e.http+"/healthz", nil)
			req.Host = "web." + zone
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := map[string]int{ModeRedirect: 308, ModeACMEOnly: 404, ModeServe: 200}[mode]; resp.StatusCode != want {
				t.Fatalf("POST /healthz: %d, want %d", resp.StatusCode, want)
			}
		})
	}
}

func TestRedirectDefaultPort(t *testing.T) {
	e, err := New(Options{HTTPAddr: "127.0.0.1:0", HTTPSAddr: ":443", TLS: &tls.Config{}, Handler: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{h: http.Header{}}
	req, _ := http.NewRequest("GET", "http://Web.Example.Test:80/p?q=1", nil)
	req.RequestURI = "/p?q=1"
	e.redirect(rec, req)
	if rec.code != 308 || rec.h.Get("Location") != "https://web.example.test/p?q=1" {
		t.Fatalf("%d %q", rec.code, rec.h.Get("Location"))
	}
}

type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(c int)           { r.code = c }

type readyBody struct {
	Status            string `json:"status"`
	ActiveConnections int64  `json:"active_connections"`
}

func readyz(t *testing.T, mgmt string) (int, readyBody) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + mgmt + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b readyBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestReadyzAndManagement(t *testing.T) {
	var ready atomic.Bool
	mgmt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "mgmt "+r.URL.Path) })
	e := start(t, Options{Ready: ready.Load, Management: mgmt})
	if code, b := readyz(t, e.mgmt); code != 503 || b.Status != "starting" {
		t.Fatalf("before ready: %d %+v", code, b)
	}
	ready.Store(true)
	if code, b := readyz(t, e.mgmt); code != 200 || b.Status != "ready" {
		t.Fatalf("ready: %d %+v", code, b)
	}
	resp, err := http.Get("http://" + e.mgmt + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "mgmt /metrics" {
		t.Fatalf("management route: %q", body)
	}
}

// TestManagementHostOnLoopback: a management listener bound to loopback
// answers a Host that is localhost or a loopback address, and 421 to any
// other name, on every route but /healthz, so a web page cannot read it
// by DNS rebinding (its name, re-pointed at 127.0.0.1, is in Host). Bound
// elsewhere, it answers any Host: a scraper reaches it by name.
func TestManagementHostOnLoopback(t *testing.T) {
	mgmt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "mgmt "+r.URL.Path) })
	loop := start(t, Options{Management: mgmt})
	wide := start(t, Options{Management: mgmt, ManagementAddr: "0.0.0.0:0"})
	_, port, _ := net.SplitHostPort(wide.mgmt)
	get := func(addr, host, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Host = host
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 421 && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("421 for %q is not a problem: %v", host, resp.Header)
		}
		return resp.StatusCode, string(b)
	}
	hosts := []struct {
		host string
		ok   bool
	}{
		{loop.mgmt, true},
		{"127.0.0.1", true},
		{"127.0.0.2:9180", true},
		{"localhost:9180", true},
		{"LocalHost", true},
		{"localhost.:9180", true},
		{"[::1]:9180", true},
		{"[::1]", true},
		{"[::ffff:127.0.0.1]:9180", true},
		{"rebind.attacker.example:9180", false},
		{"rebind.attacker.example", false},
		{"localhost.attacker.example", false},
		{"127.0.0.1.nip.io", false},
		{"10.0.0.1:9180", false},
		{"0.0.0.0:9180", false},
		{"[::2]:9180", false},
	}
	for _, h := range hosts {
		for _, path := range []string{"/metrics", "/readyz", "/api/v3/discovery/clusters"} {
			if code, _ := get(loop.mgmt, h.host, path); (code != 421) != h.ok {
				t.Errorf("loopback listener, Host %q, %s: %d", h.host, path, code)
			}
			if code, _ := get("127.0.0.1:"+port, h.host, path); code == 421 {
				t.Errorf("listener on 0.0.0.0, Host %q, %s: 421", h.host, path)
			}
		}
		if code, body := get(loop.mgmt, h.host, "/healthz"); code != 200 || body != "mgmt /healthz" {
			t.Errorf("loopback listener, Host %q, /healthz: %d %q", h.host, code, body)
		}
	}
	// HTTP/1.0 without a Host: no browser sends that
	c, err := net.DialTimeout("tcp", loop.mgmt, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /metrics HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HTTP/1.0 without Host: %d", resp.StatusCode)
	}
}

func TestOptionsValidate(t *testing.T) {
	h := http.NotFoundHandler()
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"mode", Options{HTTPAddr: ":0", HTTPMode: "proxy"}, "http mode"},
		{"nothing", Options{}, "no listener"},
		{"https without tls", Options{HTTPSAddr: ":0", Handler: h}, "TLS config"},
		{"https without handler", Options{HTTPSAddr: ":0", TLS: &tls.Config{}}, "handler"},
		{"serve without handler", Options{HTTPAddr: ":0", HTTPMode: ModeServe}, "handler"},
		{"negative", Options{HTTPAddr: ":0", DrainTimeout: -1}, "drain timeout"},
		{"cluster", Options{HTTPAddr: ":0", Cluster: "one\r\nX: y"}, "cluster"},
	}
	for _, tc := range cases {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "edge: ") {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestListenError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	e, err := New(Options{ManagementAddr: "127.0.0.1:0", HTTPAddr: busy.Addr().String(), HTTPMode: ModeACMEOnly})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Listen(); err == nil || !strings.Contains(err.Error(), "http listener") {
		t.Fatalf("err = %v", err)
	}
	if e.Addr("management") != nil {
		t.Fatal("management listener left open after a failed Listen")
	}
}

// TestCloseBeforeRun: an embedder whose later part fails after Listen
// closes the edge instead of running it; every port it bound is free
// again, and the closed edge cannot be brought back by Listen or Run.
func TestCloseBeforeRun(t *testing.T) {
	e, err := New(Options{
		ManagementAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", HTTPSAddr: "127.0.0.1:0",
		HTTPMode: ModeACMEOnly, Handler: http.NotFoundHandler(),
		TLS: gatewayTLS(t, tlsmgr.Options{Names: []string{"api." + zone}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Listen(); err != nil {
		t.Fatal(err)
	}
	bound := map[string]string{}
	for _, name := range []string{"management", "http", "https"} {
		bound[name] = e.Addr(name).String()
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, addr := range bound {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s %s still bound after Close: %v", name, addr, err)
			continue
		}
		ln.Close()
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := e.Listen(); err == nil {
		t.Error("Listen after Close succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Run(ctx); err == nil {
		t.Error("Run after Close succeeded")
	}
}

// TestPassthroughDegradedHostStillTried: an app whose every host cools
// down after a failed dial (one host that restarted) is still piped to
// the host that failed longest ago, as the L7 dispatch does, rather than
// having every client closed for the whole cool-down while the host is
// back.
func TestPassthroughDegradedHostStillTried(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "secure."+zone)
	host := startTLSHost(t, cert, echo)
	live := table(host.ln.Addr().String())
	now := time.Now()
	for _, h := range live.Load().Pool("secure") {
		h.Health.Fail(now) // the restart's failed dial
	}
	e := start(t, Options{Passthrough: RoutePassthrough(live, func() time.Time { return now })})
	c, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, RootCAs: pool})
	if err != nil {
		t.Fatalf("handshake through the pipe to the cooling host: %v", err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0]; !got.Equal(cert.Leaf) {
		t.Fatalf("client saw %q, want the host's own certificate", got.Subject)
	}
	for _, h := range live.Load().Pool("secure") {
		if h.Health.Degraded(now) {
			t.Fatalf("host %s still degraded after a dial that worked", h.ID)
		}
	}
}

// slowClient is a TLS client's connection that sends its ClientHello in
// two parts, the second at helloDone, and everything after the hello (its
// Finished, its request) at finished; both times count from the dial.
type slowClient struct {
	net.Conn
	helloDone, finished time.Time
	writes              int
}

func (c *slowClient) Write(p []byte) (int, error) {
	c.writes++
	if c.writes == 1 {
		n, err := c.Conn.Write(p[:len(p)/2])
		if err != nil {
			return n, err
		}
		time.Sleep(time.Until(c.helloDone))
		m, err := c.Conn.Write(p[len(p)/2:])
		return n + m, err
	}
	time.Sleep(time.Until(c.finished))
	return c.Conn.Write(p)
}

// TestHandshakeBoundedWithTheHello: ReadHeaderTimeout bounds the
// ClientHello and the TLS handshake together, from the connection's
// start: a client that spends most of it sending the hello does not get
// the whole timeout again to finish the handshake.
func TestHandshakeBoundedWithTheHello(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	const budget = 2 * time.Second
	e := start(t, Options{ReadHeaderTimeout: budget})
	raw, err := net.Dial("tcp", e.https)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	dialed := time.Now()
	// The hello is whole at three quarters of the budget, the client's
	// Finished comes after the budget (but within the budget counted
	// from the hello).
	sc := &slowClient{Conn: raw, helloDone: dialed.Add(budget * 3 / 4), finished: dialed.Add(budget * 3 / 2)}
	c := tls.Client(sc, &tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		return // refused already: what the test wants
	}
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatalf("a handshake finished after ReadHeaderTimeout was served: %q", line)
	}
}

// TestPassthroughRoundRobinPerApp: each passthrough app takes turns over
// its own hosts. With one counter shared by every app, two apps whose
// clients take turns would each land on the same one of their hosts every
// time.
func TestPassthroughRoundRobinPerApp(t *testing.T) {
	live := &route.Live{}
	b := route.NewBuilder(live)
	b.PutZone(&route.Zone{Name: zone}, 1)
	hosts := map[string]*tlsHost{}
	pools := map[string]*x509.CertPool{}
	for _, app := range []string{"one", "two"} {
		b.PutApp(&route.App{ID: app, Mode: route.ModePassthrough, Status: route.StatusActive})
		cert, pool := testutil.SelfSigned(t, app+"."+zone)
		pools[app] = pool
		for _, id := range []string{app + "-a", app + "-b"} {
			h := startTLSHost(t, cert, func(*tls.Conn) {})
			hosts[id] = h
			b.SetHost(&route.Host{ID: id, Apps: []string{app}, Addr: h.ln.Addr().String(), Scheme: "tls", State: route.HostVerified})
		}
	}
	e := start(t, Options{Passthrough: RoutePassthrough(live, nil)})
	for range 4 {
		for _, app := range []string{"one", "two"} {
			c, err := dialTLS(t, e.https, &tls.Config{ServerName: app + "." + zone, RootCAs: pools[app]})
			if err != nil {
				t.Fatalf("%s: %v", app, err)
			}
			c.Close()
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "pipes still open")
	for id, h := range hosts {
		if n := h.accepted.Load(); n != 2 {
			t.Errorf("host %s took %d of its app's 4 connections, want 2", id, n)
		}
	}
}

// TestPlainHTTPOnHTTPS: an HTTP request sent to the https listener (an
// http:// URL with the https port) gets a 400 problem saying to use
// https://, and, like every answer the gateway writes itself (DESIGN
// §5.2: every response carries it), names the cluster.
func TestPlainHTTPOnHTTPS(t *testing.T) {
	e := start(t, Options{Cluster: "one"})
	resp, body := rawResponse(t, e.https, "GET / HTTP/1.1\r\nHost: web.example.test\r\n\r\n")
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "https://") {
		t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if got := resp.Header.Values("X-Gatehouse-Cluster"); len(got) != 1 || got[0] != "one" {
		t.Errorf("X-Gatehouse-Cluster %q, want one", got)
	}
	if resp.Header.Get("Date") == "" {
		t.Error("no Date")
	}
}
