package gatehouse

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func mgmtGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestManagementWhileStarting: with the bus unreachable the gateway is
// still starting; management answers /healthz 200, /readyz 503 starting,
// /metrics 200, and the API 503 as a problem+json (DESIGN §2: errors the
// gateway answers itself; §7: JSON only).
func TestManagementWhileStarting(t *testing.T) {
	cfg := testConfig(t)
	mgmt := testutil.FreeAddr(t)
	cfg.Management.Addr = mgmt
	cfg.Bus.URL = []string{"nats://" + testutil.FreeAddr(t)}
	g, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, 5*time.Second, func() bool { c, _ := mgmtGet(t, mgmt, "/healthz"); return c == 200 }, "healthz")
	if c, b := mgmtGet(t, mgmt, "/readyz"); c != 503 || !strings.Contains(b, `"status":"starting"`) {
		t.Errorf("readyz while starting: %d %s", c, b)
	}
	if c, _ := mgmtGet(t, mgmt, "/metrics"); c != 200 {
		t.Errorf("metrics while starting: %d", c)
	}
	resp, err := http.Get("http://" + mgmt + "/api/v3/apps")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(b, &p) != nil || p.Status != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("API while starting: %d %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
}

// TestDrainFinishesProxiedRequest: a request in flight to a host when the
// gateway is told to stop still completes with the host's answer.
func TestDrainFinishesProxiedRequest(t *testing.T) {
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "late answer")
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")
	mgmt := r.g.Addrs().Management
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().HTTP+"/slow", nil)
		req.Host = "hello.test.local"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b), err}
	}()
	<-entered
	r.cancel()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		c, b := mgmtGet(t, mgmt, "/readyz")
		var v struct {
			Status            string `json:"status"`
			ActiveConnections int64  `json:"active_connections"`
		}
		_ = json.Unmarshal([]byte(b), &v)
		return c == 503 && v.Status == "draining" && v.ActiveConnections == 1
	}, "readyz not draining")
	time.Sleep(300 * time.Millisecond) // let the rest of the parts stop
	close(release)
	got := <-res
	if got.err != nil || got.code != 200 || got.body != "late answer" {
		t.Fatalf("in-flight request during drain: %+v", got)
	}
}

// gatehouse_bus_connected on /metrics is 0 while the gateway waits for its
// bus, 1 once connected, 0 again while an external bus is down: a
// platform alerts on it without reading the log.
func TestBusConnectedGauge(t *testing.T) {
	busConnected := func(mgmt string) string {
		_, body := mgmtGet(t, mgmt, "/metrics")
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, "gatehouse_bus_connected "); ok {
				return v
			}
		}
		return "(absent)"
	}
	cfg := testConfig(t)
	mgmt := testutil.FreeAddr(t)
	cfg.Management.Addr = mgmt
	busAddr := testutil.FreeAddr(t)
	cfg.Bus.URL = []string{"nats://" + busAddr}
	g, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, 5*time.Second, func() bool { c, _ := mgmtGet(t, mgmt, "/healthz"); return c == 200 }, "healthz")
	if v := busConnected(mgmt); v != "0" {
		t.Errorf("while waiting for the bus: gatehouse_bus_connected %s, want 0", v)
	}
	host, port, _ := net.SplitHostPort(busAddr)
	p, _ := strconv.Atoi(port)
	ns, err := server.NewServer(&server.Options{Host: host, Port: p, NoSigs: true, NoLog: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	select {
	case <-g.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready once the bus came up")
	}
	if v := busConnected(mgmt); v != "1" {
		t.Errorf("connected: gatehouse_bus_connected %s, want 1", v)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	testutil.WaitFor(t, 10*time.Second, func() bool { return busConnected(mgmt) == "0" }, "gatehouse_bus_connected not 0 with the bus down")
	// The gateway serves its last table meanwhile: still ready, as
	// docs/config.md says, so that a bus outage does not take every
	// gateway out of its load balancer's rotation at once.
	for _, path := range []string{"/readyz", "/healthz"} {
		code, body := mgmtGet(t, mgmt, path)
		if code != http.StatusOK || (path == "/readyz" && !strings.Contains(body, `"status":"ready"`)) {
			t.Errorf("%s with the bus down after the start: %d %s, want 200 (ready)", path, code, body)
		}
	}
}

// gatehouse_store_resyncs_total{reason} on /metrics counts the store's
// full loads: the first one, reason "start", once a gateway is ready. A
// steady table is checked, not reloaded, so that is all there is.
func TestStoreResyncsMetric(t *testing.T) {
	r := start(t, testConfig(t))
	_, body := mgmtGet(t, r.g.Addrs().Management, "/metrics")
	var got []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "gatehouse_store_resyncs_total{") {
			got = append(got, l)
		}
	}
	if want := `gatehouse_store_resyncs_total{reason="start"} 1`; len(got) != 1 || got[0] != want {
		t.Fatalf("resync series %q, want %q", got, want)
	}
}

// TestPublicHealthzWhileStarting: while the gateway starts (here, waiting
// for a bus that is not up yet) it has no table and answers every public
// request 503, and /healthz too: a load balancer that checks /healthz
// keeps it out of rotation until it can serve, rather than sending it
// clients to refuse for as long as the bus stays down. Every one of those
// answers names the cluster (DESIGN §5.2). Once started, /healthz is
// 200 ok.
func TestPublicHealthzWhileStarting(t *testing.T) {
	cfg := testConfig(t)
	public := testutil.FreeAddr(t)
	cfg.HTTP.Addr = public
	busAddr := testutil.FreeAddr(t)
	cfg.Bus.URL = []string{"nats://" + busAddr}
	g, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	defer stop()
	get := func(path string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+public+path, nil)
		req.Host = "any.example"
		res, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return nil, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { res, _ := get("/"); return res != nil }, "the public listener")
	for _, path := range []string{"/healthz", "/"} {
		res, body := get(path)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Content-Type") != "application/problem+json" ||
			res.Header.Get("Retry-After") == "" || res.Header.Get("X-Gatehouse-Cluster") != "one" {
			t.Errorf("GET %s while starting = %d %v %q, want a 503 problem with Retry-After naming cluster one", path, res.StatusCode, res.Header, body)
		}
	}
	host, port, _ := net.SplitHostPort(busAddr)
	p, _ := strconv.Atoi(port)
	ns, err := server.NewServer(&server.Options{Host: host, Port: p, NoSigs: true, NoLog: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	// The gateway stops first: one whose bus is gone waits out the
	// store's bounds on its last calls (5 s), which this test is not about.
	defer func() { stop(); ns.Shutdown(); ns.WaitForShutdown() }()
	select {
	case <-g.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready once the bus came up")
	}
	if res, body := get("/healthz"); res.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz once started = %d %q, want 200 ok", res.StatusCode, body)
	}
}
