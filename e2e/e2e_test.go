package e2e

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A bad flag stops `gatehouse serve` before it touches anything, with one
// line on stderr naming the key (issue 2, item 1).
func TestServeBadConfig(t *testing.T) {
	for _, tc := range []struct {
		flag, value, key string
	}{
		{"-http-mode", "nope", "http.mode"},
		{"-drain-timeout", "soon", "drain_timeout"},
		{"-limits-requests", "0", "limits.requests"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			data := t.TempDir()
			_, stderr, code := runOnce(t, "serve", "-data", data, "-management", "127.0.0.1:0",
				"-http", "127.0.0.1:0", "-https", "127.0.0.1:0", "-dns", "127.0.0.1:0", "-bus-listen", "127.0.0.1:0",
				tc.flag, tc.value)
			if code == 0 {
				t.Fatalf("serve %s %s: exit 0", tc.flag, tc.value)
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.key) {
				t.Fatalf("stderr is not one line naming %s:\n%s", tc.key, stderr)
			}
			if ents, _ := os.ReadDir(data); len(ents) != 0 {
				t.Errorf("the data directory was written: %v", ents)
			}
		})
	}
}

// The real binaries end to end: `gatehouse serve` with its embedded bus,
// two `gatehouse host` sidecars enrolled with `keygen` and `ctl`.
func TestSidecars(t *testing.T) {
	s := startSystem(t)
	waitRouted(t, s)

	t.Run("context headers", func(t *testing.T) { checkContextHeaders(t, s) })
	t.Run("both hosts serve", func(t *testing.T) {
		c := newClient(1)
		defer c.CloseIdleConnections()
		count := map[string]int{}
		for i := range 20 {
			resp, body := do(t, c, s.appRequest(t.Context(), "/rr"))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
			}
			count[body]++
		}
		t.Logf("20 requests by upstream: %v", count)
		if count["a"] < 5 || count["b"] < 5 {
			t.Fatalf("round robin over two verified hosts: %v", count)
		}
	})
	t.Run("SIGTERM to a host under load", func(t *testing.T) { hostSIGTERM(t, s) })
}

// waitRouted waits until a request for the app is answered by a host: the
// routing table can follow the verified state by a moment.
func waitRouted(t *testing.T, s *system) {
	t.Helper()
	c := newClient(1)
	defer c.CloseIdleConnections()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		resp, err := c.Do(s.appRequest(t.Context(), "/"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the app is not routed")
}

// checkContextHeaders sends client-forged X-Gatehouse-* headers (in three
// spellings) and checks the upstream sees only the gateway's own.
func checkContextHeaders(t *testing.T, s *system) {
	req := s.appRequest(t.Context(), "/headers")
	forged := map[string]string{
		"X-Gatehouse-App-Id":     "forged-app",
		"x-gatehouse-subject":    "forged-subject",
		"X_Gatehouse_Scopes":     "forged-scopes",
		"X-Gatehouse-Request-Id": "forged-request-id",
		"X-Gatehouse-Cluster":    "forged-cluster",
		"X-Forwarded-For":        "203.0.113.9",
	}
	for k, v := range forged {
		req.Header[k] = []string{v} // as spelt, not canonicalised
	}
	c := newClient(1)
	defer c.CloseIdleConnections()
	if resp, body := do(t, c, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	seen := append(s.ups["a"].headers(), s.ups["b"].headers()...)
	if len(seen) != 1 {
		t.Fatalf("upstreams saw %d /headers requests, want 1", len(seen))
	}
	h := seen[0]
	want := map[string]func(string) bool{
		"x-gatehouse-app-id":     func(v string) bool { return v == app },
		"x-gatehouse-client-ip":  func(v string) bool { return v == "127.0.0.1" },
		"x-gatehouse-cluster":    func(v string) bool { return v == cluster },
		"x-gatehouse-request-id": func(v string) bool { return v != "" },
	}
	got := map[string]bool{}
	for k, vs := range h {
		norm := strings.ToLower(strings.ReplaceAll(k, "_", "-"))
		for _, v := range vs {
			for _, f := range forged {
				if strings.Contains(v, f) {
					t.Errorf("client-sent value reached the upstream: %s: %s", k, v)
				}
			}
		}
		if !strings.HasPrefix(norm, "x-gatehouse-") {
			continue
		}
		ok := want[norm]
		if ok == nil {
			t.Errorf("unexpected context header at the upstream: %s: %q", k, vs)
			continue
		}
		if len(vs) != 1 || !ok(vs[0]) {
			t.Errorf("%s: %q", k, vs)
		}
		got[norm] = true
	}
	for k := range want {
		if !got[k] {
			t.Errorf("context header %s missing at the upstream; it saw %v", k, h)
		}
	}
}

// hostSIGTERM stops sidecar web-a under load: it sends leave, the gateway
// stops picking it, the slow requests already on it finish, and no
// request fails; web-b takes the traffic.
func hostSIGTERM(t *testing.T, s *system) {
	a, b := s.ups["a"], s.ups["b"]
	l := startLoad(t, s, 8, 5000, 20*time.Second)
	testutil.WaitFor(t, 10*time.Second, func() bool { return l.okCount.Load() >= 200 }, "load did not get going")

	// Put slow requests in flight until at least one is on web-a (round
	// robin makes that the first or second; 16 bounds it).
	var slow []<-chan result
	for i := 0; i < 16 && a.slowIn.Load() == 0; i++ {
		slow = append(slow, slowRequests(s, 1, 1500))
		testutil.WaitFor(t, 5*time.Second, func() bool { return a.slowIn.Load()+b.slowIn.Load() == int64(i+1) },
			"slow request did not reach an upstream")
	}
	if a.slowIn.Load() == 0 {
		t.Fatal("16 slow requests, none picked web-a")
	}
	onA := a.slowIn.Load()

	l.markSignal()
	sig := time.Now()
	s.hosts["a"].sigterm(t)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		st := s.gw.hostStates(t)["web-a"]
		return st != "" && st != "verified"
	}, "web-a still verified after SIGTERM")
	// The API shows discovery's state as soon as the drain message is
	// handled; the routing table follows from discovery's flusher (up to
	// 50 ms later, then a rebuild). Requests that start in that gap may
	// still go to web-a; the check below begins a settle margin after.
	drainSeen := time.Now()
	draining := drainSeen.Add(250 * time.Millisecond)
	if st := s.gw.hostStates(t)["web-a"]; st != "draining" {
		t.Errorf("web-a is %q after SIGTERM, want draining", st)
	}
	if code := s.hosts["a"].wait(t, drainTimeout+5*time.Second); code != 0 {
		t.Fatalf("web-a exited %d", code)
	}
	exited := time.Now()
	// Keep the load going a little after web-a is gone.
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(l.resultsSince(exited)) >= 200 },
		"load stalled after web-a exited")
	l.finish()

	var slowRs []result
	for _, ch := range slow {
		slowRs = append(slowRs, collect(t, ch, 1, 10*time.Second)...)
	}
	all, afterDrain := summarize(l.all()), summarize(l.resultsSince(draining))
	slowSum := summarize(slowRs)
	t.Logf("host SIGTERM: load %v", all)
	t.Logf("host SIGTERM: after web-a was draining: %v", afterDrain)
	t.Logf("host SIGTERM: slow requests %v (%d on web-a when signalled); web-a draining %s and exited %s after SIGTERM",
		slowSum, onA, drainSeen.Sub(sig).Round(time.Millisecond), exited.Sub(sig).Round(time.Millisecond))
	if all.failed != 0 || all.refused != 0 || all.lateReset != 0 {
		t.Errorf("requests failed while a host drained: %v\n%s", all, strings.Join(all.failures, "\n"))
	}
	if slowSum.ok != len(slowRs) || slowSum.byLabel["a"] != int(onA) {
		t.Errorf("slow requests in flight: %v, want all ok and %d by web-a\n%s", slowSum, onA, strings.Join(slowSum.failures, "\n"))
	}
	if afterDrain.byLabel["a"] != 0 || afterDrain.byLabel["b"] < 200 {
		t.Errorf("after web-a was draining: %v, want every request on web-b", afterDrain)
	}
}

// SIGTERM to the gateway under keep-alive load with slow requests in
// flight: /readyz turns 503, every request it accepted is answered 200,
// new ones after the signal find the listener closed, and it exits 0
// within drain_timeout.
func TestGatewaySIGTERMUnderLoad(t *testing.T) {
	s := startSystem(t)
	waitRouted(t, s)
	l := startLoad(t, s, 8, 5000, 20*time.Second)
	testutil.WaitFor(t, 10*time.Second, func() bool { return l.okCount.Load() >= 500 }, "load did not get going")
	const nSlow = 4
	slow := slowRequests(s, nSlow, 1500)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return s.ups["a"].slowIn.Load()+s.ups["b"].slowIn.Load() == nSlow
	}, "slow requests did not reach the upstreams")

	l.markSignal()
	sig := time.Now()
	s.gw.sigterm(t)
	// While the slow requests hold the drain open, readiness says so.
	if !testutil.Eventually(time.Second, func() bool { return get(t, "http://"+s.gw.mgmt+"/readyz") == http.StatusServiceUnavailable }) {
		t.Error("/readyz did not turn 503 while draining")
	}
	slowRs := collect(t, slow, nSlow, drainTimeout+5*time.Second)
	code := s.gw.wait(t, drainTimeout+5*time.Second)
	exitAfter := time.Since(sig)
	l.finish()

	all, slowSum := summarize(l.all()), summarize(slowRs)
	t.Logf("gateway SIGTERM: load %v", all)
	t.Logf("gateway SIGTERM: slow requests %v; exit %d after %s", slowSum, code, exitAfter.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("gateway exited %d", code)
	}
	if exitAfter > drainTimeout {
		t.Errorf("gateway took %s to exit, drain timeout %s", exitAfter, drainTimeout)
	}
	if all.failed != 0 {
		t.Errorf("%d requests failed in flight:\n%s", all.failed, strings.Join(all.failures, "\n"))
	}
	if slowSum.ok != nSlow {
		t.Errorf("slow requests in flight at SIGTERM: %v\n%s", slowSum, strings.Join(slowSum.failures, "\n"))
	}
	if all.refused+all.lateReset == 0 {
		t.Errorf("no request found the listener closed: the load did not span the drain (%v)", all)
	}
}

// do sends req and returns the response and its body.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}
