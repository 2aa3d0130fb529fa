package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

const testZone = "apps.test"

// env is a gateway served by a real http.Server on loopback, with a
// routing table the test fills directly through a route.Builder.
type env struct {
	t    testing.TB
	live *route.Live
	b    *route.Builder
	gw   *Gateway
	srv  *httptest.Server
	reg  *prometheus.Registry
	logs *testutil.SyncBuffer
}

// newEnv starts a gateway for cluster "c1" over zone apps.test with app
// "hello" (active). edit may change the options before New.
func newEnv(t testing.TB, edit func(*Options)) *env {
	t.Helper()
	e := &env{t: t, live: new(route.Live), reg: prometheus.NewRegistry(), logs: new(testutil.SyncBuffer)}
	e.b = route.NewBuilder(e.live)
	e.b.Replace(route.State{
		Zones: []*route.Zone{{Name: testZone}},
		Apps:  []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive}},
	})
	opts := Options{
		ClusterID: "c1",
		Live:      e.live,
		Logger:    slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registry:  e.reg,
		AccessLog: true,
	}
	if edit != nil {
		edit(&opts)
	}
	gw, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.gw = gw
	e.srv = httptest.NewServer(asEdge(gw))
	t.Cleanup(func() { e.srv.Close(); gw.Close() })
	return e
}

// backend starts an httptest server and adds it as a verified host of app.
func (e *env) backend(id, app string, h http.Handler) *httptest.Server {
	e.t.Helper()
	s := httptest.NewServer(h)
	e.t.Cleanup(s.Close)
	e.addHost(id, app, "http", s.URL)
	return s
}

func (e *env) addHost(id, app, scheme, rawURL string) *route.Host {
	e.t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		e.t.Fatal(err)
	}
	h := &route.Host{ID: id, Apps: []string{app}, Addr: u.Host, Scheme: scheme, URL: u, State: route.HostVerified}
	e.b.SetHost(h)
	return e.b.Host(id)
}

// do sends a request for host and path through the gateway.
func (e *env) do(method, host, path string, hdr http.Header, body io.Reader) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s%s: %v", method, host, path, err)
	}
	e.t.Cleanup(func() { res.Body.Close() })
	return res
}

func (e *env) get(host, path string) *http.Response { return e.do("GET", host, path, nil, nil) }

func readBody(t testing.TB, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// wantProblem checks res is an RFC 9457 problem with status and returns it.
func wantProblem(t testing.TB, res *http.Response, status int) problem.Problem {
	t.Helper()
	body := readBody(t, res)
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, problem.ContentType)
	}
	var p problem.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Status != status || p.Title == "" || p.Type == "" {
		t.Fatalf("problem %+v", p)
	}
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "goroutine") {
		t.Fatalf("problem leaks internals: %s", body)
	}
	if got := res.Header.Get("X-Gatehouse-Cluster"); got != "c1" {
		t.Fatalf("X-Gatehouse-Cluster %q on a gateway error", got)
	}
	return p
}

// echo answers with the request's headers as JSON, plus Host.
func echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h)
	})
}

func echoed(t testing.TB, res *http.Response) http.Header {
	t.Helper()
	body := readBody(t, res)
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	var h http.Header
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	return h
}

// rawExchange writes raw to the gateway over a new TCP connection and
// returns everything the server sent until it closed the connection (or
// 5 s passed).
func (e *env) rawExchange(raw string) (string, bool) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		e.t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	closed := err == nil // EOF: the server closed the connection
	return string(b), closed
}

// readResponse reads one response from br.
func readResponse(t testing.TB, br *bufio.Reader) *http.Response {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// deadURL is a loopback address nothing listens on.
func deadURL(t testing.TB) string {
	t.Helper()
	return "http://" + testutil.RefusedAddr(t)
}

func routeContext(r *http.Request, rq *route.Request) context.Context {
	return route.WithRequest(r.Context(), rq)
}

// rawHost is a host that writes exact bytes: it listens on loopback and
// runs serve on each connection it accepts, with a reader over it, then
// closes it. It returns the address; cleanup waits for every serve.
func rawHost(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.ServeConns(t, ln, func(c net.Conn) { serve(c, bufio.NewReader(c)) })
	return ln.Addr().String()
}

// asEdge serves h as gatehouse's edge does (internal/edge's stallBodies):
// an HTTP/1 body the handler left unread is closed as it returns. The
// proxy and the forward read an HTTP/1 upload full duplex, and net/http's
// own read of such a body after the handler races its read that watches
// for the client leaving (golang/go#68560: "invalid concurrent Body.Read
// call", and the connection's next request reset), which a plain
// net/http server in these tests met where the edge never does.
func asEdge(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.ProtoMajor != 1 || r.Body == nil {
			return
		}
		if _, err := w.Write(nil); errors.Is(err, http.ErrHijacked) {
			return // the connection is the handler's, body and all
		}
		_ = r.Body.Close()
	})
}
