package discovery_test

import (
	"crypto/ed25519"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// namedServer is a host's HTTP server at one IP of a name: it answers
// challenges for addr (the name:port the host announces) while honest is
// set, and records every other request it gets.
type namedServer struct {
	honest atomic.Bool
	mu     sync.Mutex
	other  []string // "METHOD path" of every request but a challenge
	chals  int
}

func (s *namedServer) requests() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.other...), s.chals
}

func (s *namedServer) serve(t testing.TB, ln net.Listener, id, addr string, k ed25519.PrivateKey) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != host.ChallengePath {
			s.mu.Lock()
			s.other = append(s.other, r.Method+" "+r.URL.Path+" Host:"+r.Host)
			s.mu.Unlock()
			w.Write([]byte(ln.Addr().String()))
			return
		}
		s.mu.Lock()
		s.chals++
		s.mu.Unlock()
		var req host.ChallengeRequest
		if !s.honest.Load() || json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "not this host", http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, id, addr, req.Nonce, req.Gateway)})
	})}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// A host that announces a name is dialed, challenged again and probed at
// the address its challenge passed at, never at what the name resolves
// to later: pointing its name at another address (DNS rebinding, to an
// internal service say) moves no traffic there. A reverify resolves the
// name again and moves the host only when the challenge passes at the new
// address; until then, one that fails there takes the host out.
func TestRebindingMovesNothingUntilAChallengePasses(t *testing.T) {
	t.Parallel()
	const name = "web.rebind.test"
	res := tu.StartResolver(t, map[string]string{name + ".": "127.0.0.1"})
	// quiet: a busy machine that holds up the heartbeats below for a
	// few hundred milliseconds must not make the host stale, which would
	// take it out for a reason this test is not about. Nor may a probe:
	// each waits at most its interval (100 ms; at 20 ms, a loaded
	// machine timed them out), and one that does takes the host out
	// until the next passes, so the test waits for what it checks.
	e := start(t, "", func(o *discovery.Options) { quiet(o); o.Resolver = res.NetResolver() })
	e.b.PutApp(&route.App{ID: "hello", Status: route.StatusActive, Health: &route.HealthCheck{Path: "/healthz", Interval: route.Duration(100 * time.Millisecond)}})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	lnReal, lnOther, port := tu.ListenTwin(t)
	addr := net.JoinHostPort(name, port)
	real, other := new(namedServer), new(namedServer)
	real.honest.Store(true)
	real.serve(t, lnReal, "web-1", addr, k)
	other.serve(t, lnOther, "web-1", addr, k)

	stopHB := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tk := time.NewTicker(hbEvery)
		defer tk.Stop()
		for {
			select {
			case <-stopHB:
				return
			case <-tk.C:
				b, _ := json.Marshal(heartbeat("web-1", 0))
				e.nc.Publish(host.HeartbeatSubject(cluster), b)
			}
		}
	}()
	defer func() { close(stopHB); <-hbDone }()

	published := func() *route.Host {
		for _, h := range e.live.Load().Hosts() {
			if h.ID == "web-1" {
				return h
			}
		}
		return nil
	}
	e.publish(host.KindAnnounce, announce("web-1", addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "host announcing a name not routable")
	h := published()
	if h.Addr != addr || h.Dial != "127.0.0.1:"+port || h.URL.Host != addr || h.DialAddr() != "127.0.0.1:"+port {
		t.Fatalf("published %+v (URL %v): want addr %s dialed at 127.0.0.1:%s", h, h.URL, addr, port)
	}
	if hi := e.info("web-1"); hi.Addr != addr {
		t.Fatalf("info shows addr %q, want the announced %q", hi.Addr, addr)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { o, _ := real.requests(); return len(o) >= 2 }, "no health probe reached the host")

	// The name now points at another address: nothing moves there.
	res.Set(name+".", "127.0.0.2")
	probes := func() int { o, _ := real.requests(); return len(o) }
	n := probes()
	tu.WaitFor(t, 5*time.Second, func() bool { return probes() >= n+5 }, "health probes stopped reaching the pinned address")
	if o, c := other.requests(); len(o) != 0 || c != 0 {
		t.Fatalf("the address the name was pointed at got %d challenges and requests %q", c, o)
	}
	if h := published(); h.Dial != "127.0.0.1:"+port {
		t.Fatalf("after the name moved: published %+v", h)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") && published().Dial == "127.0.0.1:"+port },
		"host not routable at the pinned address after the name moved")

	// A check resolves the name again: the challenge goes to the new
	// address, fails there, and the host is out, not moved.
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool {
		_, c := other.requests()
		return c > 0 && !e.routable("hello", "web-1") && strings.Contains(e.info("web-1").LastError, "127.0.0.2:"+port)
	}, "host not taken out by its challenge failing at the address the name resolves to now (challenged there, unroutable, its last error naming it)")
	if h := published(); h.Dial != "127.0.0.1:"+port {
		t.Fatalf("the host failed its challenge at the new address and was moved there: published %+v", h)
	}
	time.Sleep(100 * time.Millisecond) // room for any probe or dial to go astray
	if o, _ := other.requests(); len(o) != 0 {
		t.Fatalf("the address that failed its challenge got requests %q", o)
	}

	// The host really moved there: the challenge passes, and from then on
	// it is dialed there.
	other.honest.Store(true)
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool {
		h := published()
		return e.routable("hello", "web-1") && h.Dial == "127.0.0.2:"+port
	}, "host not moved to the address its challenge passed at")
	tu.WaitFor(t, 5*time.Second, func() bool { o, _ := other.requests(); return len(o) >= 2 }, "health probes do not follow the host")
	if o, _ := other.requests(); !strings.HasPrefix(o[0], "GET /healthz Host:"+addr) {
		t.Fatalf("probe at the new address was %q, want GET /healthz with Host %s", o[0], addr)
	}
}
