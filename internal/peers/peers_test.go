package peers

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// healthz is a member's gateway, of cluster id, whose /healthz can be
// turned off or made to hang.
type healthz struct {
	srv  *httptest.Server
	down atomic.Bool
	hang atomic.Bool
	hits atomic.Int64
}

func startHealthz(t *testing.T, id string) *healthz {
	h := &healthz{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		if h.hang.Load() {
			<-r.Context().Done() // accepts and reads, never answers
			return
		}
		w.Header().Set(cluster.HeaderCluster, id) // as every gateway answer
		if r.URL.Path != "/healthz" || h.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// run starts p.Run until the test ends and waits for it to return.
func run(t *testing.T, p *Peers) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return within 5s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func active(p *Peers, id string) bool {
	c, ok := p.Set().Peer(id)
	return ok && c.Active
}

// logBuf collects log lines, safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func TestNewValidates(t *testing.T) {
	k, other := newKey(t), newKey(t)
	self := cluster.Peer{ID: "eu", URL: "https://eu.example.net"}
	peer := cluster.Peer{ID: "us", URL: "https://us.example.net", PublicKey: pubOf(other)}
	tests := []struct {
		name string
		opts Options
	}{
		{"no key", Options{Self: self}},
		{"bad self id", Options{Self: cluster.Peer{ID: "EU", URL: self.URL}, Key: k}},
		{"bad self url", Options{Self: cluster.Peer{ID: "eu", URL: "eu.example.net"}, Key: k}},
		{"self key mismatch", Options{Self: cluster.Peer{ID: "eu", URL: self.URL, PublicKey: pubOf(other)}, Key: k}},
		{"bad static", Options{Self: self, Key: k, Static: []cluster.Peer{{ID: "us", URL: peer.URL}}}},
		{"duplicate static", Options{Self: self, Key: k, Static: []cluster.Peer{peer, peer}}},
		{"static self with another key", Options{Self: self, Key: k, Static: []cluster.Peer{{ID: "eu", URL: self.URL, PublicKey: pubOf(other)}}}},
		{"negative interval", Options{Self: self, Key: k, ProbeInterval: -1}},
		{"negative misses", Options{Self: self, Key: k, Misses: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts); err == nil {
				t.Fatal("New passed")
			}
		})
	}
	p, err := New(Options{Self: self, Key: k, Static: []cluster.Peer{{ID: "eu", URL: self.URL, PublicKey: pubOf(k)}, peer}})
	if err != nil {
		t.Fatal(err)
	}
	// Before Run: self active, the static peer known but inactive.
	if got := p.Set().ActiveIDs(); len(got) != 1 || got[0] != "eu" {
		t.Fatalf("ActiveIDs before Run = %v", got)
	}
	if c, ok := p.Set().Peer("us"); !ok || c.Active || !c.PublicKey.Equal(pubOf(other)) {
		t.Fatalf("static peer = %+v, %v", c, ok)
	}
}

// TestMisses drives the probe bookkeeping directly: Misses failures in a
// row, not fewer, make a member inactive; one success brings it back.
func TestMisses(t *testing.T) {
	k := newKey(t)
	p, err := New(Options{Self: cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"}, Key: k,
		Static: []cluster.Peer{{ID: "us", URL: "http://127.0.0.1:2", PublicKey: pubOf(newKey(t))}}})
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("refused")
	steps := []struct {
		err  error
		want bool
	}{{nil, true}, {fail, true}, {fail, true}, {fail, false}, {fail, false}, {nil, true}, {fail, true}}
	for i, s := range steps {
		p.recordProbe("us", "http://127.0.0.1:2", s.err)
		if got := active(p, "us"); got != s.want {
			t.Fatalf("step %d: active = %v, want %v", i, got, s.want)
		}
	}
}

// TestStaticProbes runs real probes against real /healthz servers: a
// member turns active, drops out after 3 failed probes and comes back by
// itself. It logs how long the drop took, in probe intervals.
func TestStaticProbes(t *testing.T) {
	const interval = 40 * time.Millisecond
	a, b := startHealthz(t, "ap"), startHealthz(t, "us")
	k := newKey(t)
	p, err := New(Options{
		Self:          cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"},
		Key:           k,
		Static:        []cluster.Peer{{ID: "ap", URL: a.srv.URL, PublicKey: pubOf(newKey(t))}, {ID: "us", URL: b.srv.URL + "/", PublicKey: pubOf(newKey(t))}},
		ProbeInterval: interval,
		// Not interval/2: three slow answers in a row on a busy machine
		// would drop the healthy peer. The failing ones fail at once.
		ProbeTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "ap") && active(p, "us") }, "static peers never turned active")

	hits := b.hits.Load()
	b.down.Store(true)
	start := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() bool { return !active(p, "us") }, "a failing peer stayed active")
	took := time.Since(start)
	if n := b.hits.Load() - hits; n < 3 {
		t.Fatalf("inactive after %d failed probes, want 3", n)
	}
	t.Logf("static member dropped out after %s = %.1f probe intervals (3 misses)", took.Round(time.Millisecond), float64(took)/float64(interval))
	if !active(p, "ap") {
		t.Fatal("the healthy peer went inactive too")
	}
	b.down.Store(false)
	testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "us") }, "a recovered peer did not come back")

	// A closed listener (a killed cluster) drops out as well.
	a.srv.Close()
	testutil.WaitFor(t, 5*time.Second, func() bool { return !active(p, "ap") }, "a dead peer stayed active")
}

// busCluster is one cluster announcing on a shared bus, its gateway's
// /healthz at its URL.
type busCluster struct {
	p    *Peers
	key  ed25519.PrivateKey
	gw   *healthz
	stop func()
}

func startBusClusters(t *testing.T, url string, interval time.Duration, ids ...string) []busCluster {
	var out []busCluster
	for _, id := range ids {
		k := newKey(t)
		gw := startHealthz(t, id)
		p, err := New(Options{
			Self:             cluster.Peer{ID: id, URL: gw.srv.URL},
			Key:              k,
			Conn:             testutil.Connect(t, url),
			AnnounceInterval: interval,
			ProbeInterval:    interval,
			ProbeTimeout:     time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, busCluster{p: p, key: k, gw: gw, stop: run(t, p)})
	}
	return out
}

// TestAnnouncements: three clusters on one bus and no static list find
// each other, agree on the owner of 10,000 apps, and a stopped cluster
// drops out of the others' sets.
func TestAnnouncements(t *testing.T) {
	const interval = 100 * time.Millisecond
	ns := testutil.StartBus(t)
	cs := startBusClusters(t, ns.ClientURL(), interval, "ap", "eu", "us")
	for _, c := range cs {
		testutil.WaitFor(t, 5*time.Second, func() bool { return len(c.p.Set().ActiveIDs()) == 3 }, "clusters did not find each other")
	}
	// Every cluster computes the same owner for 10,000 apps (on snapshots
	// taken while all three see all three).
	var sets []cluster.Set
	testutil.WaitFor(t, 5*time.Second, func() bool {
		sets = sets[:0]
		for _, c := range cs {
			if s := c.p.Set(); len(s.ActiveIDs()) == 3 {
				sets = append(sets, s)
			}
		}
		return len(sets) == 3
	}, "no moment when all three saw all three")
	for i := range 10_000 {
		app := fmt.Sprintf("app-%d", i)
		want := sets[0].Owner(app, cluster.HashModN)
		for _, s := range sets[1:] {
			if got := s.Owner(app, cluster.HashModN); got != want {
				t.Fatalf("%s: %s says %s owns it, %s says %s", app, s.Self(), got, sets[0].Self(), want)
			}
		}
	}
	// Announced keys are the clusters' own.
	if c, _ := cs[0].p.Set().Peer("us"); !c.PublicKey.Equal(pubOf(cs[2].key)) || c.URL != cs[2].gw.srv.URL {
		t.Fatalf("announced peer = %+v", c)
	}
	cs[2].stop()
	start := time.Now()
	for _, c := range cs[:2] {
		testutil.WaitFor(t, 5*time.Second, func() bool { return !active(c.p, "us") }, "a silent cluster stayed active")
	}
	took := time.Since(start)
	t.Logf("announced cluster dropped out of every set after %s = %.1f announce intervals (3 missed)", took.Round(time.Millisecond), float64(took)/float64(interval))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(cs[0].p.Set().ActiveIDs()) == 2 }, "ap does not see eu and itself")
}

// TestBadAnnouncements: malformed, unsigned, stale and distrusted
// announcements are dropped with a log line and change nothing.
func TestBadAnnouncements(t *testing.T) {
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	selfKey, usKey, strangerKey := newKey(t), newKey(t), newKey(t)
	var logs logBuf
	p, err := New(Options{
		Self:             cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"},
		Key:              selfKey,
		Static:           []cluster.Peer{{ID: "us", URL: "http://127.0.0.1:2", PublicKey: pubOf(usKey)}},
		Conn:             testutil.Connect(t, ns.ClientURL()),
		AnnounceInterval: time.Hour, // only the test's messages
		ProbeInterval:    time.Hour,
		Logger:           slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	enc := func(a cluster.Announcement) []byte { b, _ := json.Marshal(a); return b }
	// Wait until p listens: announce a first cluster until it shows.
	aa := newKey(t)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		_ = nc.Publish(cluster.Subject, enc(cluster.Announce(aa, "aa", "http://127.0.0.1:1", time.Now())))
		return active(p, "aa")
	}, "not subscribed")
	before := p.Discovery()

	now := time.Now()
	unsigned := cluster.Announce(strangerKey, "xx", "http://xx.example.net", now)
	unsigned.Sig = ""
	bad := map[string][]byte{
		"garbage":                 []byte("not json"),
		"unsigned":                enc(unsigned),
		"stale":                   enc(cluster.Announce(strangerKey, "xx", "http://xx.example.net", now.Add(-time.Minute))),
		"static id, other key":    enc(cluster.Announce(strangerKey, "us", "http://evil.example.net", now)),
		"self id, other key":      enc(cluster.Announce(strangerKey, "eu", "http://evil.example.net", now)),
		"bad url":                 enc(cluster.Announce(strangerKey, "xx", "file:///etc/passwd", now)),
		"a key that is not a key": []byte(`{"id":"xx","url":"http://xx","public_key":"` + base64.StdEncoding.EncodeToString([]byte("short")) + `","ts":1,"sig":""}`),
	}
	for name, b := range bad {
		if err := nc.Publish(cluster.Subject, b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// A good announcement after them: once it shows, the bad ones before it
	// (same publisher, same subscription: in order) have been handled.
	if err := nc.Publish(cluster.Subject, enc(cluster.Announce(newKey(t), "zz", "http://127.0.0.1:3", time.Now()))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "zz") }, "the good announcement did not arrive")
	if n := strings.Count(logs.String(), "announcement dropped"); n != len(bad) {
		t.Fatalf("%d drop log lines for %d bad announcements:\n%s", n, len(bad), logs.String())
	}
	after := p.Discovery()
	if len(after.Clusters) != len(before.Clusters)+1 {
		t.Fatalf("clusters before %+v, after %+v", before.Clusters, after.Clusters)
	}
	for i, c := range before.Clusters { // aa, eu, us: untouched; zz sorts last
		if after.Clusters[i] != c {
			t.Fatalf("cluster %s changed: %+v -> %+v", c.ID, c, after.Clusters[i])
		}
	}
	// The static member's own key is accepted and makes it active.
	if err := nc.Publish(cluster.Subject, enc(cluster.Announce(usKey, "us", "http://elsewhere.example.net", time.Now()))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "us") }, "the static member's own announcement was not accepted")
	if c, _ := p.Set().Peer("us"); c.URL != "http://127.0.0.1:2" {
		t.Fatalf("an announcement moved a static member's URL to %s", c.URL)
	}
	// A pinned announced id does not change keys.
	if err := nc.Publish(cluster.Subject, enc(cluster.Announce(strangerKey, "zz", "http://evil.example.net", time.Now()))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Count(logs.String(), "announcement dropped") == len(bad)+1 }, "a key change for a pinned id was not dropped")
	if c, _ := p.Set().Peer("zz"); c.URL != "http://127.0.0.1:3" {
		t.Fatalf("pinned id moved to %s", c.URL)
	}
}

// TestStaticOnly drops announcements of ids the static list lacks.
func TestStaticOnly(t *testing.T) {
	k := newKey(t)
	p, err := New(Options{Self: cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"}, Key: k, StaticOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	other := newKey(t)
	peer, err := cluster.ParseAnnouncement(mustJSON(cluster.Announce(other, "xx", "http://xx", time.Now())), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.accept(peer, time.Now()); err == nil {
		t.Fatal("accepted an unknown id with StaticOnly")
	}
	if _, ok := p.Set().Peer("xx"); ok {
		t.Fatal("unknown id in the set")
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// TestBusDown: with the bus gone, static probes keep the set current and
// Run keeps working.
func TestBusDown(t *testing.T) {
	h := startHealthz(t, "us")
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	ns.Shutdown()
	ns.WaitForShutdown()
	p, err := New(Options{
		Self:             cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"},
		Key:              newKey(t),
		Static:           []cluster.Peer{{ID: "us", URL: h.srv.URL, PublicKey: pubOf(newKey(t))}},
		Conn:             nc,
		ProbeInterval:    30 * time.Millisecond,
		AnnounceInterval: 30 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	testutil.WaitFor(t, 5*time.Second, func() bool { return active(p, "us") }, "static probes stopped with the bus down")
	h.down.Store(true)
	testutil.WaitFor(t, 5*time.Second, func() bool { return !active(p, "us") }, "static probes stopped with the bus down")
}

// TestDiscoveryBody: the set as GET /api/v3/discovery/clusters shows it
// (internal/api serves Discovery's JSON).
func TestDiscoveryBody(t *testing.T) {
	k, usKey := newKey(t), newKey(t)
	p, err := New(Options{
		Self:   cluster.Peer{ID: "eu", URL: "https://eu.example.net"},
		Key:    k,
		Static: []cluster.Peer{{ID: "us", URL: "https://us.example.net", PublicKey: pubOf(usKey)}, {ID: "ap", URL: "https://ap.example.net", PublicKey: pubOf(usKey)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.recordProbe("us", "https://us.example.net", nil)
	body, err := json.Marshal(p.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	want := `{"self":"eu","clusters":[` +
		`{"id":"ap","url":"https://ap.example.net","public_key":"` + b64(pubOf(usKey)) + `","active":false},` +
		`{"id":"eu","url":"https://eu.example.net","public_key":"` + b64(pubOf(k)) + `","active":true},` +
		`{"id":"us","url":"https://us.example.net","public_key":"` + b64(pubOf(usKey)) + `","active":true}]}`
	if string(body) != want {
		t.Fatalf("Discovery = %s\nwant\n%s", body, want)
	}
}
