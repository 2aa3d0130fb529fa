package discovery_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

const (
	cluster = "c1"
	hbEvery = 100 * time.Millisecond
)

// keys is an in-memory enrolment table with the store's method shape.
type keys struct {
	mu sync.Mutex
	m  map[string]*route.HostKey
}

func (k *keys) GetHostKey(_ context.Context, id string) (*route.HostKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if hk := k.m[id]; hk != nil {
		return hk, nil
	}
	return nil, errors.New("not found")
}

func (k *keys) enrol(id string, pub ed25519.PublicKey, apps ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[id] = &route.HostKey{HostID: id, PublicKey: host.PublicKeyString(pub), Apps: apps}
}

func (k *keys) revoke(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, id)
}

type env struct {
	t    testing.TB
	url  string // bus URL(s) for hosts
	nc   *nats.Conn
	live *route.Live
	b    *route.Builder
	keys *keys
	d    *discovery.Discovery
	reg  *prometheus.Registry
}

// startOn runs a discovery on the bus at url (several URLs: tried in order).
func startOn(t testing.TB, url string) *env { return start(t, url, nil) }

// quiet is for tests whose hosts announce once and do not heartbeat: the
// host stays fresh long enough that a busy machine, stalling the test
// for a few hundred milliseconds, cannot make it stale mid-test.
func quiet(o *discovery.Options) { o.MissedHeartbeats, o.HostTTL = 20, 10*time.Second }

// start runs a discovery on a fresh embedded bus (or on url, if given).
func start(t testing.TB, url string, mod func(*discovery.Options)) *env {
	t.Helper()
	if url == "" {
		url = tu.StartBus(t).ClientURL()
	}
	e := &env{t: t, url: url, live: new(route.Live), keys: &keys{m: map[string]*route.HostKey{}}, reg: prometheus.NewRegistry()}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e.nc = nc
	e.b = route.NewBuilder(e.live)
	opts := discovery.Options{
		Conn: e.nc, Cluster: cluster, GatewayID: "gw-1", Builder: e.b, Keys: e.keys,
		HeartbeatInterval: hbEvery, HostTTL: 2 * time.Second, Registry: e.reg,
		VerifyTimeout: 3 * time.Second, // a TLS-free challenge; generous for a busy machine
	}
	if mod != nil {
		mod(&opts)
	}
	d, err := discovery.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	e.run()
	return e
}

func (e *env) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.d.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Error(err)
		}
	})
	// The subscription is live once the server has seen it.
	tu.WaitFor(e.t, 5*time.Second, func() bool { return e.d != nil && e.nc.NumSubscriptions() > 0 && e.nc.Flush() == nil }, "discovery did not subscribe")
}

func (e *env) routable(app, id string) bool {
	return slices.ContainsFunc(e.live.Load().Pool(app), func(h *route.Host) bool { return h.ID == id })
}

func (e *env) info(id string) route.HostInfo {
	hi, _ := e.d.Host(id)
	return hi
}

func (e *env) failures(reason string) float64 {
	return metric(e.reg, "gatehouse_host_verification_failures_total", reason)
}

func (e *env) hostsIn(state route.HostState) float64 {
	return metric(e.reg, "gatehouse_hosts", string(state))
}

func (e *env) dropped(reason string) float64 {
	return metric(e.reg, "gatehouse_host_messages_dropped_total", reason)
}

// metric reads one single-label series from reg; 0 if absent.
func metric(reg *prometheus.Registry, name, label string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// publish sends a JSON body on a hosts subject from the gateway's conn.
func (e *env) publish(kind string, body any) {
	e.t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.nc.Publish("gatehouse."+cluster+".hosts."+kind, b); err != nil {
		e.t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

// challengeServer answers challenges as hostID at its own address, signing
// with k; it also serves /healthz with status *health (200 when zero).
type challengeServer struct {
	*httptest.Server
	addr   string
	mu     sync.Mutex
	status int
}

func newChallengeServer(t testing.TB, hostID string, k ed25519.PrivateKey) *challengeServer {
	cs := &challengeServer{}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case host.ChallengePath:
			var req host.ChallengeRequest
			if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
				http.Error(w, "bad", 400)
				return
			}
			json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, hostID, cs.addr, req.Nonce, req.Gateway)})
		case "/healthz":
			cs.mu.Lock()
			s := cs.status
			cs.mu.Unlock()
			if s == 0 {
				s = 200
			}
			w.WriteHeader(s)
		default:
			http.NotFound(w, r)
		}
	}))
	cs.addr = cs.Listener.Addr().String()
	t.Cleanup(cs.Close)
	return cs
}

func (cs *challengeServer) setHealth(status int) {
	cs.mu.Lock()
	cs.status = status
	cs.mu.Unlock()
}

func newKey(t testing.TB) (ed25519.PrivateKey, ed25519.PublicKey) {
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k, k.Public().(ed25519.PublicKey)
}

func announce(id, addr string, pub ed25519.PublicKey, apps ...string) host.Announce {
	return host.Announce{HostID: id, Apps: apps, Addr: addr, Scheme: "http", PublicKey: host.PublicKeyString(pub), TS: time.Now().Unix()}
}

func heartbeat(id string, inflight int64) host.Heartbeat {
	return host.Heartbeat{HostID: id, TS: time.Now().Unix(), Inflight: inflight}
}

// runHost runs a real host.Host for id, serving a challenge-answering
// httptest server, on its own bus connection to url. It returns the
// host's stop function, which sends leave and waits for Run.
func runHost(t testing.TB, url, id string, k ed25519.PrivateKey, apps []string, opts ...nats.Option) (addr string, stop func()) {
	t.Helper()
	return runHostWith(t, url, id, k, apps, nil, opts...)
}

// runHostWith is runHost with edit applied to the host's options (a clock
// of its own, say).
func runHostWith(t testing.TB, url, id string, k ed25519.PrivateKey, apps []string, edit func(*host.Options), opts ...nats.Option) (addr string, stop func()) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ho := host.Options{Conn: nc, Cluster: cluster, HostID: id, Key: k, Apps: apps, Addr: addr, HeartbeatInterval: hbEvery, Logger: slog.New(slog.DiscardHandler)}
	if edit != nil {
		edit(&ho)
	}
	h, err := host.New(ho)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(id)) }))
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return addr, stop
}

// handled returns once the gateway has handled every message nc sent
// before: it asks about a host it does not know, and the gateway's answer
// comes from the unproven lane once the subscription has sorted every
// earlier message into its lane; then it waits for both lanes.
func (e *env) handled(nc *nats.Conn) {
	e.t.Helper()
	b, _ := json.Marshal(heartbeat("nobody-sync", 0))
	if _, err := nc.Request(host.HeartbeatSubject(cluster), b, 5*time.Second); err != nil {
		e.t.Fatalf("gateway did not answer a heartbeat of an unknown host: %v", err)
	}
	discovery.SyncLanes(e.d)
}
