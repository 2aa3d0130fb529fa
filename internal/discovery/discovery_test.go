package discovery_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	e := start(t, "", nil)
	good := discovery.Options{Conn: e.nc, Cluster: "c1", GatewayID: "gw", Builder: e.b, Keys: e.keys}
	if _, err := discovery.New(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*discovery.Options){
		"no conn":        func(o *discovery.Options) { o.Conn = nil },
		"bad cluster":    func(o *discovery.Options) { o.Cluster = "C.1" },
		"no gateway":     func(o *discovery.Options) { o.GatewayID = "" },
		"gateway space":  func(o *discovery.Options) { o.GatewayID = "g w" },
		"no builder":     func(o *discovery.Options) { o.Builder = nil },
		"no keys":        func(o *discovery.Options) { o.Keys = nil },
		"negative hb":    func(o *discovery.Options) { o.HeartbeatInterval = -1 },
		"ttl too short":  func(o *discovery.Options) { o.HostTTL = 10 * time.Second },
		"negative works": func(o *discovery.Options) { o.Workers = -1 },
	} {
		o := good
		mod(&o)
		if _, err := discovery.New(o); err == nil || !strings.HasPrefix(err.Error(), "discovery: ") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	reg := prometheus.NewRegistry()
	good.Registry = reg
	if _, err := discovery.New(good); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.New(good); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
}

// An honest host.Host is routable within 1 s of announcing, end to end
// over the bus and the challenge path, and drains on leave.
func TestHonestHostEndToEnd(t *testing.T) {
	t.Parallel()
	e := start(t, "", nil)
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello", "shop")
	addr, stop := runHost(t, e.url, "web-1", k, []string{"hello"})

	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "honest host not routable within 5s")
	hi := e.info("web-1")
	if hi.State != route.HostVerified || hi.Addr != addr || hi.VerifiedAt.IsZero() || hi.LastError != "" || hi.Scheme != "http" {
		t.Fatalf("info %+v", hi)
	}
	h := e.live.Load().Pool("hello")[0]
	if h.URL.String() != "http://"+addr || h.Health == nil {
		t.Fatalf("published host %+v", h)
	}
	if got := e.hostsIn(route.HostVerified); got != 1 {
		t.Fatalf("hosts{verified} = %v", got)
	}
	if len(e.d.Hosts()) != 1 {
		t.Fatal("Hosts()")
	}

	stop() // leave
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.info("web-1").State == route.HostDraining && !e.routable("hello", "web-1")
	}, "not draining after leave")
	if len(e.live.Load().Hosts()) != 1 {
		t.Fatal("draining host not listed")
	}
	if e.live.Load().HasHosts("hello") {
		t.Fatal("a host that has left still counts as the app's host (502, not 503)")
	}
	// No heartbeats after leave: removed after host_ttl.
	tu.WaitFor(t, 5*time.Second, func() bool { _, ok := e.d.Host("web-1"); return !ok && len(e.live.Load().Hosts()) == 0 }, "not removed after host_ttl")
	if e.hostsIn(route.HostDraining) != 0 {
		t.Fatal("gauge not decremented on removal")
	}
}

// None of these may ever become routable.
func TestDishonestHostsNeverRoutable(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	kHonest, pubHonest := newKey(t)
	kOther, pubOther := newKey(t)

	honest := newChallengeServer(t, "real", kHonest)
	e.keys.enrol("real", pubHonest, "hello")

	// A server at another address that replays what the honest host signed
	// for an earlier nonce.
	earlier := base64.StdEncoding.EncodeToString(make([]byte, 32))
	replayed := host.SignChallenge(kHonest, "replay", "127.0.0.1:1", earlier, "gw-1")
	replay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: replayed})
	}))
	defer replay.Close()
	e.keys.enrol("replay", pubHonest, "hello")

	// A server that relays challenges to the honest host.
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		b = []byte(strings.Replace(string(b), `"host_id":"relay"`, `"host_id":"real"`, 1))
		resp, err := http.Post(honest.URL+host.ChallengePath, "application/json", strings.NewReader(string(b)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	}))
	defer relay.Close()
	e.keys.enrol("relay", pubHonest, "hello")

	// A second process at an address the key holder does not hold: it has
	// no key, so it cannot answer.
	squatter := httptest.NewServer(http.NotFoundHandler())
	defer squatter.Close()
	e.keys.enrol("squat", pubHonest, "hello")

	e.keys.enrol("other-app", pubOther, "shop")
	e.keys.enrol("other-app2", pubOther, "shop")
	e.keys.enrol("wrong-sig", pubHonest, "hello")
	wrongSig := newChallengeServer(t, "wrong-sig", kOther) // signs with a key other than the enrolled one
	e.keys.enrol("mismatch", pubHonest, "hello")
	mismatch := newChallengeServer(t, "mismatch", kOther)

	cases := []struct {
		id, addr string
		pub      []byte
		apps     []string
		reason   string
		forgot   bool // refused by the enrolment: removed at once
	}{
		{"unenrolled", newChallengeServer(t, "unenrolled", kOther).addr, pubOther, []string{"hello"}, "unenrolled", true},
		{"other-app", newChallengeServer(t, "other-app", kOther).addr, pubOther, []string{"hello"}, "app_not_allowed", true},
		{"other-app2", newChallengeServer(t, "other-app2", kOther).addr, pubOther, []string{"shop", "hello"}, "app_not_allowed", true},
		{"mismatch", mismatch.addr, pubOther, []string{"hello"}, "key_mismatch", true},
		{"wrong-sig", wrongSig.addr, pubHonest, []string{"hello"}, "bad_signature", false},
		{"replay", replay.Listener.Addr().String(), pubHonest, []string{"hello"}, "bad_signature", false},
		{"relay", relay.Listener.Addr().String(), pubHonest, []string{"hello"}, "bad_signature", false},
		{"squat", squatter.Listener.Addr().String(), pubHonest, []string{"hello"}, "bad_response", false},
	}
	for _, c := range cases {
		t.Run(c.id+"/"+c.reason, func(t *testing.T) {
			before := e.failures(c.reason)
			e.publish(host.KindAnnounce, announce(c.id, c.addr, c.pub, c.apps...))
			tu.WaitFor(t, 3*time.Second, func() bool {
				if e.routable("hello", c.id) || e.routable("shop", c.id) {
					t.Fatalf("%s became routable", c.id)
				}
				return e.failures(c.reason) > before
			}, "no failure counted as "+c.reason)
			hi, ok := e.d.Host(c.id)
			if ok == c.forgot || (!c.forgot && (hi.State != route.HostProvisional || hi.LastError == "")) {
				t.Fatalf("tracked %v (want %v), info %+v", ok, !c.forgot, hi)
			}
		})
	}
	// The honest key at the honest address still verifies.
	e.publish(host.KindAnnounce, announce("real", honest.addr, pubHonest, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "real") }, "honest host not routable")
	if p := e.live.Load().Pool("hello"); len(p) != 1 {
		t.Fatalf("pool %d hosts, want only the honest one", len(p))
	}
}

func TestHeartbeatsKeepAndStop(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	var logs tu.SyncBuffer
	e := start(t, "", func(o *discovery.Options) {
		o.HeartbeatInterval = every
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	// Heartbeats keep it routable well past 3 intervals.
	for i := range 6 {
		e.publish(host.KindHeartbeat, heartbeat("web-1", int64(i)))
		deadline := time.Now().Add(every)
		tu.WaitFor(t, 2*every, func() bool {
			if !e.routable("hello", "web-1") {
				t.Fatal("dropped while heartbeating")
			}
			return time.Now().After(deadline)
		}, "")
	}
	if e.info("web-1").Inflight != 5 {
		t.Fatalf("inflight %d", e.info("web-1").Inflight)
	}
	// Stop: unhealthy within 3 missed heartbeats (plus one sweep).
	stopped := time.Now()
	tu.WaitFor(t, 4*every+every/2, func() bool { return !e.routable("hello", "web-1") }, "still routable 3 intervals after heartbeats stopped")
	t.Logf("unroutable %v after the last heartbeat", time.Since(stopped).Round(time.Millisecond))
	if s := e.info("web-1").State; s != route.HostUnhealthy {
		t.Fatalf("state %s", s)
	}
	if !strings.Contains(logs.String(), `"msg":"discovery: host unhealthy, not routed until it recovers","host_id":"web-1","addr":"`+cs.addr+`","reason":"missed_heartbeats"`) {
		t.Fatalf("no warning that the host turned unhealthy:\n%s", logs.String())
	}
	// One heartbeat brings it back, and says so.
	e.publish(host.KindHeartbeat, heartbeat("web-1", 0))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "no recovery on heartbeat")
	tu.WaitFor(t, 5*time.Second, func() bool {
		return strings.Contains(logs.String(), `"level":"INFO","msg":"discovery: host healthy again","host_id":"web-1"`)
	}, "no line that the host recovered")
}

func TestBadMessagesChangeNothing(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")
	before := e.info("web-1")
	tblBefore := e.live.Load()

	big := announce("web-1", "127.0.0.1:1", pub, "hello")
	big.Apps = nil
	oversized, _ := json.Marshal(map[string]any{"host_id": "web-1", "pad": strings.Repeat("x", host.MaxMessageSize)})
	now := time.Now().Unix()
	bad := []struct{ kind, body string }{
		{host.KindAnnounce, `{`},
		{host.KindAnnounce, `null`},
		{host.KindAnnounce, `[]`},
		{host.KindAnnounce, mustJSON(big)},
		{host.KindAnnounce, strings.Replace(mustJSON(announce("web-1", "127.0.0.1:1", pub, "hello")), `"http"`, `"gopher"`, 1)},
		{host.KindAnnounce, mustJSON(announce("web-1", ":1", pub, "hello"))},
		{host.KindAnnounce, string(oversized)},
		{host.KindHeartbeat, `{"host_id":"web-1","ts":1,"inflight":-5}`},
		{host.KindHeartbeat, `{"host_id":"web 1","ts":1}`},
		{host.KindHeartbeat, string(oversized)},
		{host.KindLeave, `{"host_id":"","ts":1}`},
		{host.KindLeave, `{"host_id":"web-1"}`},
		{host.KindLeave, string(oversized)},
		{"bogus", mustJSON(host.Leave{HostID: "web-1", TS: 1})},
		{host.KindHeartbeat, mustJSON(heartbeat("nobody", 1))},
		{host.KindLeave, `{"host_id":"web-1","ts":1,"sig":"not base64"}`},
		{host.KindLeave, mustJSON(host.Leave{HostID: "nobody", TS: now, Sig: host.SignLeave(k, "nobody", now)})},
	}
	for _, m := range bad {
		e.publish(m.kind, []byte(m.body))
	}
	// Messages from one connection arrive in order: once this one is
	// applied, all of the above were handled.
	e.publish(host.KindHeartbeat, heartbeat("web-1", 7))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").Inflight == 7 }, "sentinel heartbeat not seen")

	after := e.info("web-1")
	after.Inflight, after.LastHeartbeat = before.Inflight, before.LastHeartbeat
	if after.State != before.State || after.Addr != before.Addr || after.VerifiedAt != before.VerifiedAt || after.LastError != before.LastError {
		t.Fatalf("host changed:\n before %+v\n after  %+v", before, after)
	}
	if len(e.d.Hosts()) != 1 {
		t.Fatalf("hosts %d", len(e.d.Hosts()))
	}
	if e.live.Load() != tblBefore {
		t.Fatal("a bad message republished the table")
	}
	if n := e.dropped("malformed") + e.dropped("oversized") + e.dropped("unknown_subject"); n != 15 {
		t.Fatalf("dropped %v messages, want 15", n)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A revoked enrolment stops routing at the next periodic verification.
func TestReverifyRevokes(t *testing.T) {
	t.Parallel()
	e := start(t, "", func(o *discovery.Options) { o.Reverify = 300 * time.Millisecond })
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	_, _ = runHost(t, e.url, "web-1", k, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")
	first := e.info("web-1").VerifiedAt
	tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").VerifiedAt.After(first) }, "not re-verified")
	if hi := e.info("web-1"); hi.LastError != "" || hi.State == route.HostProvisional {
		t.Fatalf("re-verification failed an honest host: %+v", hi)
	}
	e.keys.revoke("web-1")
	tu.WaitFor(t, 5*time.Second, func() bool { return !e.routable("hello", "web-1") }, "still routable after revocation")
	if !strings.Contains(e.info("web-1").LastError, "no enrolment") {
		t.Fatalf("last error %q", e.info("web-1").LastError)
	}
}

// Changed claims are routed to only once proven. Until then, and if they
// fail, the host stays routed by the claims it proved: a forged announce
// neither reaches an unproven address nor takes the host out.
func TestClaimChangeNeedsProof(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello", "shop")
	cs := newChallengeServer(t, "web-1", k)
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")
	neverAt := func(addr string) func() {
		return func() {
			for _, h := range e.live.Load().Pool("hello") {
				if h.Addr == addr {
					t.Fatalf("routed to %s, which it does not hold", addr)
				}
			}
		}
	}

	// A forged announce: same id and key, an address the key holder does
	// not hold.
	nowhere := httptest.NewServer(http.NotFoundHandler())
	defer nowhere.Close()
	forged := nowhere.Listener.Addr().String()
	before := e.failures("bad_response")
	e.publish(host.KindAnnounce, announce("web-1", forged, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool {
		neverAt(forged)()
		if !e.routable("hello", "web-1") {
			t.Fatal("a forged announce took the host out of rotation")
		}
		return e.failures("bad_response") > before && e.info("web-1").Addr == cs.addr
	}, "forged claims not rejected")
	if hi := e.info("web-1"); !strings.Contains(hi.LastError, forged) && hi.LastError != "" {
		t.Fatalf("last error %q", hi.LastError)
	}

	// A real move (and a new app) is proven, then routed.
	cs2 := newChallengeServer(t, "web-1", k)
	e.publish(host.KindAnnounce, announce("web-1", cs2.addr, pub, "hello", "shop"))
	tu.WaitFor(t, 5*time.Second, func() bool {
		p := e.live.Load().Pool("shop")
		return len(p) == 1 && p[0].Addr == cs2.addr && e.live.Load().Pool("hello")[0].Addr == cs2.addr
	}, "proven move not routed")
	if hi := e.info("web-1"); hi.State != route.HostVerified || hi.Addr != cs2.addr || hi.LastError != "" {
		t.Fatalf("after move %+v", hi)
	}
}

// A gateway that starts after its hosts asks them to announce, through
// the heartbeat's reply subject.
func TestLateGatewayLearnsRunningHosts(t *testing.T) {
	t.Parallel()
	url := tu.StartBus(t).ClientURL()
	k, pub := newKey(t)
	runHost(t, url, "web-1", k, []string{"hello"})
	e := start(t, url, nil)
	e.keys.enrol("web-1", pub, "hello")
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "late gateway never learned the host")
}

func TestActiveHealthProbe(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	e.b.PutApp(&route.App{ID: "hello", Status: route.StatusActive, Health: &route.HealthCheck{Path: "/healthz", Interval: route.Duration(50 * time.Millisecond)}})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")
	stopHB := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(hbEvery)
		defer t.Stop()
		for {
			select {
			case <-stopHB:
				return
			case <-t.C:
				b, _ := json.Marshal(heartbeat("web-1", 0))
				e.nc.Publish(host.HeartbeatSubject(cluster), b)
			}
		}
	}()
	defer func() { close(stopHB); <-hbDone }()

	cs.setHealth(503)
	tu.WaitFor(t, 5*time.Second, func() bool {
		return e.info("web-1").State == route.HostUnhealthy && !e.routable("hello", "web-1")
	}, "failed probe did not make it unhealthy")
	if !strings.Contains(e.info("web-1").LastError, "503") {
		t.Fatalf("unhealthy but %+v", e.info("web-1"))
	}
	cs.setHealth(200)
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "passing probe did not restore it")
}
