package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

const (
	zone    = "e2e.test"
	cluster = "e2e"
	token   = "e2e-control-token-0123456789"
	app     = "web"
	appHost = app + "." + zone
	// drainTimeout is the gateway's and the sidecars' -drain-timeout.
	drainTimeout = 10 * time.Second
)

// gateway is a running `gatehouse serve`.
type gateway struct {
	*proc
	http, mgmt, bus string // loopback host:port each
}

// startGateway runs `gatehouse serve` on loopback with an embedded bus and
// waits until /readyz answers 200. The ports are picked free just before;
// if another process takes one in between, it tries again with new ones.
// extra are more serve flags; a flag given again wins.
func startGateway(t *testing.T, extra ...string) *gateway {
	t.Helper()
	for attempt := 1; ; attempt++ {
		g := tryGateway(t, extra...)
		if !g.exited() {
			return g
		}
		if attempt == 3 || !strings.Contains(g.out.String(), "address already in use") {
			t.Fatalf("gateway exited before ready: %v", g.err)
		}
		t.Logf("gateway: a port was taken meanwhile; trying new ones")
	}
}

// tryGateway starts one gateway and waits until it is ready or has exited.
func tryGateway(t *testing.T, extra ...string) *gateway {
	a := freeAddrs(t, 3)
	g := &gateway{http: a[0], mgmt: a[1], bus: a[2]}
	g.proc = start(t, "gatehouse serve", append([]string{
		"serve", "-data", t.TempDir(), "-zone", zone, "-cluster", cluster, "-control-token", token,
		"-http", g.http, "-http-mode", "serve", "-https", "127.0.0.1:0", "-dns", "127.0.0.1:0",
		"-management", g.mgmt, "-bus-listen", g.bus,
		"-drain-timeout", drainTimeout.String(), "-heartbeat-interval", "1s", "-host-ttl", "10s",
		// The load tests send thousands of requests from one client
		// address; the default 600/min would answer most of them 429.
		"-limits-requests", "1000000"}, extra...)...)
	testutil.WaitFor(t, 60*time.Second, func() bool {
		return g.exited() || get(t, "http://"+g.mgmt+"/readyz") == http.StatusOK
	}, "gateway /readyz not 200")
	return g
}

// get returns the status of a GET to url, or 0 if it could not be sent.
func get(t *testing.T, url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// ctl runs `gatehouse ctl` against the gateway's control API.
func (g *gateway) ctl(t *testing.T, args ...string) string {
	t.Helper()
	return gatehouse(t, append([]string{"ctl", "-api", "http://" + g.mgmt, "-token", token}, args...)...)
}

// hostStates reads GET /api/v3/hosts: host id -> state.
func (g *gateway) hostStates(t *testing.T) map[string]string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+g.mgmt+"/api/v3/hosts", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Hosts []struct {
			HostID string `json:"host_id"`
			State  string `json:"state"`
		} `json:"hosts"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	m := map[string]string{}
	for _, h := range body.Hosts {
		m[h.HostID] = h.State
	}
	return m
}

// upstream is an app behind one sidecar. Every answer's body is its
// label; it records the headers of requests to /headers, and /slow?ms=N
// answers after N ms (at most 5000).
type upstream struct {
	label string
	srv   *httptest.Server

	total  atomic.Int64 // requests seen
	slowIn atomic.Int64 // /slow requests that arrived

	mu   sync.Mutex
	seen []http.Header // of /headers requests
}

func startUpstream(t *testing.T, label string) *upstream {
	u := &upstream{label: label}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.total.Add(1)
	switch r.URL.Path {
	case "/headers":
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
	case "/slow":
		u.slowIn.Add(1)
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		tm := time.NewTimer(time.Duration(min(max(ms, 0), 5000)) * time.Millisecond)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-r.Context().Done():
			return
		}
	}
	io.WriteString(w, u.label)
}

func (u *upstream) headers() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

// system is a gateway with the app "web" and two verified sidecars,
// "web-a" in front of upstream "a" and "web-b" in front of "b".
type system struct {
	gw    *gateway
	ups   map[string]*upstream // by label
	hosts map[string]*proc     // by label
}

// startSystem starts the gateway, creates the app, enrols two keys with
// `gatehouse keygen` and `gatehouse ctl`, starts two `gatehouse host`
// sidecars and waits until the gateway has verified both.
func startSystem(t *testing.T, gatewayFlags ...string) *system {
	t.Helper()
	began := time.Now()
	s := &system{gw: startGateway(t, gatewayFlags...), ups: map[string]*upstream{}, hosts: map[string]*proc{}}
	ready := time.Now()
	s.gw.ctl(t, "apps", "put", app, "{}")
	dir := t.TempDir()
	for _, l := range []string{"a", "b"} {
		id := "web-" + l
		keyFile := filepath.Join(dir, id+".pem")
		pub := strings.TrimSpace(gatehouse(t, "keygen", "-out", keyFile))
		s.gw.ctl(t, "keys", "put", id, fmt.Sprintf(`{"public_key":%q,"apps":[%q]}`, pub, app))
		s.ups[l] = startUpstream(t, l)
		s.hosts[l] = start(t, "gatehouse host "+id,
			"host", "-bus", "nats://"+s.gw.bus, "-cluster", cluster, "-id", id, "-key", keyFile,
			"-app", app, "-addr", "127.0.0.1:0", "-upstream", s.ups[l].srv.URL,
			"-heartbeat", "1s", "-drain-timeout", drainTimeout.String(), "-leave-grace", "1s")
	}
	testutil.WaitFor(t, 30*time.Second, func() bool {
		if s.anyExited() {
			return true
		}
		st := s.gw.hostStates(t)
		return st["web-a"] == "verified" && st["web-b"] == "verified"
	}, "both sidecars verified")
	if s.anyExited() {
		t.Fatal("a process exited while the hosts were being verified")
	}
	t.Logf("gateway ready in %s, both sidecars enrolled and verified %s later",
		ready.Sub(began).Round(time.Millisecond), time.Since(ready).Round(time.Millisecond))
	return s
}

func (s *system) anyExited() bool {
	if s.gw.exited() {
		return true
	}
	for _, h := range s.hosts {
		if h.exited() {
			return true
		}
	}
	return false
}

// client is a keep-alive HTTP/1.1 client for the gateway's plaintext
// listener with bounded timeouts.
func newClient(conns int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			MaxIdleConnsPerHost:   conns,
			DisableCompression:    true,
			ResponseHeaderTimeout: 15 * time.Second,
		},
		Timeout: 20 * time.Second,
	}
}

// appRequest builds a request for the app through the gateway.
func (s *system) appRequest(ctx context.Context, path string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.gw.http+path, nil)
	req.Host = appHost
	return req
}
