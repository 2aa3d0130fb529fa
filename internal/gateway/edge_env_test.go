package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// edgeEnv is a full gateway (New, every layer, real proxy) on loopback in
// front of one edgeRecording backend per app, with a hand-moved clock for the
// limiters and an Ed25519 issuer "idp" for tokens.
type edgeEnv struct {
	t    *testing.T
	live *route.Live
	b    *route.Builder
	gw   *Gateway
	srv  *httptest.Server
	reg  *prometheus.Registry
	now  atomic.Int64 // unix nanos of the limiters' clock
	key  ed25519.PrivateKey
	seen map[string]*edgeRecording
	zone string
}

// edgeRecording is what one app's backend received.
type edgeRecording struct {
	mu   sync.Mutex
	reqs []edgeSeen
	h    http.Handler // answers after edgeRecording; nil: 200 "ok"
}

type edgeSeen struct {
	Method, Path, RawPath string
	Header                http.Header
	BodyLen               int
}

func (rc *edgeRecording) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var n int
	if rc.h == nil {
		b, _ := io.ReadAll(r.Body)
		n = len(b)
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, edgeSeen{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Header: r.Header.Clone(), BodyLen: n})
	rc.mu.Unlock()
	if rc.h != nil {
		rc.h.ServeHTTP(w, r)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func (rc *edgeRecording) all() []edgeSeen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]edgeSeen(nil), rc.reqs...)
}

func (rc *edgeRecording) count() int { return len(rc.all()) }

// newEdgeEnv builds the gateway for zone with the given apps (each gets a
// edgeRecording backend). Loopback is a trusted proxy so tests choose the
// client address with X-Forwarded-For. edit may change the options.
func newEdgeEnv(t *testing.T, zone string, apps []*route.App, edit func(*Options)) *edgeEnv {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	e := &edgeEnv{t: t, live: new(route.Live), reg: prometheus.NewRegistry(), key: priv, seen: map[string]*edgeRecording{}, zone: zone}
	e.now.Store(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	e.b = route.NewBuilder(e.live)
	for _, a := range apps {
		if a.Mode == "" {
			a.Mode = route.ModeHTTP
		}
		if a.Status == "" {
			a.Status = route.StatusActive
		}
	}
	e.b.Replace(route.State{Zones: []*route.Zone{{Name: zone}}, Apps: apps})
	opts := Options{
		ClusterID:      "c1",
		Live:           e.live,
		Registry:       e.reg,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		Edge: EdgeOptions{
			Registry: e.reg,
			Now:      e.clock,
			Auth: auth.Options{
				Issuers:     []auth.Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}},
				ClaimLimits: true,
				Now:         time.Now, // tokens are signed against the real clock
			},
		},
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
	for _, a := range apps {
		rc := &edgeRecording{}
		e.seen[a.ID] = rc
		be := httptest.NewServer(rc)
		u, _ := url.Parse(be.URL)
		e.b.SetHost(&route.Host{ID: "h-" + a.ID, Apps: []string{a.ID}, Addr: u.Host, Scheme: "http", URL: u, State: route.HostVerified})
		t.Cleanup(be.Close)
	}
	t.Cleanup(func() {
		e.srv.CloseClientConnections()
		e.srv.Close()
		gw.Close()
	})
	return e
}

func (e *edgeEnv) clock() time.Time                    { return time.Unix(0, e.now.Load()) }
func (e *edgeEnv) advance(d time.Duration)             { e.now.Add(int64(d)) }
func (e *edgeEnv) host(app string) string              { return app + "." + e.zone }
func (e *edgeEnv) backendOf(app string) *edgeRecording { return e.seen[app] }

// req is one request through the gateway.
type edgeReq struct {
	method, app, path string
	hdr               http.Header
	body              io.Reader
}

func (e *edgeEnv) do(q edgeReq) (*http.Response, string) {
	e.t.Helper()
	if q.method == "" {
		q.method = "GET"
	}
	r, err := http.NewRequest(q.method, e.srv.URL+q.path, q.body)
	if err != nil {
		e.t.Fatal(err)
	}
	if p, _, _ := strings.Cut(q.path, "?"); strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") {
		r.URL.Opaque = p // sent exactly as written, no client-side re-encoding
	}
	r.Host = e.host(q.app)
	for k, v := range q.hdr {
		r.Header[k] = v
	}
	res, err := e.srv.Client().Do(r)
	if err != nil {
		e.t.Fatalf("%s %s%s: %v", q.method, r.Host, q.path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// token signs claims for app with the env's issuer key; exp defaults to an
// hour from now (real clock).
func (e *edgeEnv) token(mod func(jwt.MapClaims)) string {
	e.t.Helper()
	return edgeSign(e.t, e.key, mod)
}

func edgeSign(t *testing.T, key ed25519.PrivateKey, mod func(jwt.MapClaims)) string {
	t.Helper()
	c := jwt.MapClaims{"iss": "idp", "sub": "alice", "aud": []string{"shop"}, "exp": time.Now().Add(time.Hour).Unix(), "scope": "read write"}
	if mod != nil {
		mod(c)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func edgeBearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// isProblem checks body is a problem+json of status.
func edgeProblem(t *testing.T, res *http.Response, body string, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want problem+json", ct)
	}
	var p problem.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != status {
		t.Fatalf("problem body %q: %v", body, err)
	}
}

// counter reads a counter from the registry, 0 if absent.
func edgeCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
