package gateway

import (
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/peers"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// The multi-cluster tests run three clusters on loopback, each with a
// gateway (a real http.Server), its own routing table and one host per
// cluster serving every test app, discovering each other through
// internal/peers: by the static list (probes) or over one shared bus.

// clientAddr is the address test clients connect from, so that a host can
// tell the original client (127.0.0.2) from a forwarding gateway
// (127.0.0.1).
const clientAddr = "127.0.0.2"

// clApps are the apps every test cluster serves.
var clApps = func() []string {
	var a []string
	for i := range 32 {
		a = append(a, fmt.Sprintf("app-%d", i))
	}
	return a
}()

// Host behaviours, set per cluster host.
const (
	hostOK        int32 = iota // 200 "served by {cluster}"; /status/NNN answers NNN
	host500                    // 500 on every path
	hostHang                   // never answers (until the client gives up)
	hostSlow503                // 503 after slowFor
	hostStream                 // 200 at once, the body "served by {cluster}" over slowFor
	hostStall                  // reads nothing of the body and never answers (until released)
	host503NoHost              // 503 with an X-Gatehouse-No-Host of its own making
	hostBreak                  // 200 promising 100000 bytes, cut after 30000 (the last 1000 a moment later)
	hostForge                  // hostOK, with the gateway's response fields forged (forgeFields)
)

// slowFor is how long a hostSlow503 host takes to answer.
const slowFor = 1500 * time.Millisecond

// clHost is one cluster's host: it records what reached it.
type clHost struct {
	cluster string
	srv     *httptest.Server
	mode    atomic.Int32
	slow    atomic.Int64  // how long hostSlow503 takes, in ns; 0: slowFor
	release chan struct{} // closed at cleanup: a hostStall handler returns
	mu      sync.Mutex
	seen    []seenReq
}

type seenReq struct {
	Method, Path, ClientIP, Cluster string
	Marks                           bool   // any X-Gatehouse-Forwarded/-Client reached the host
	Body                            int64  // the body bytes the host read
	Checksum                        string // the X-Checksum trailer the host read
	Proto                           string // X-Forwarded-Proto
	RequestID                       string // X-Request-Id
	AcceptEncoding                  []string
	MaxForwards                     string
}

func (h *clHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.mode.Load() == hostStall {
		<-h.release // not r.Context(): with the body unread, net/http never sees the client go
		return
	}
	n, _ := io.Copy(io.Discard, r.Body)
	h.mu.Lock()
	h.seen = append(h.seen, seenReq{
		Body:           n,
		Method:         r.Method,
		Path:           r.URL.Path,
		ClientIP:       r.Header.Get(proxy.HeaderClientIP),
		Cluster:        r.Header.Get(proxy.HeaderCluster),
		Marks:          r.Header.Get(cluster.HeaderForwarded) != "" || r.Header.Get(cluster.HeaderClient) != "",
		Checksum:       r.Trailer.Get("X-Checksum"),
		Proto:          r.Header.Get("X-Forwarded-Proto"),
		RequestID:      r.Header.Get("X-Request-Id"),
		AcceptEncoding: r.Header.Values("Accept-Encoding"),
		MaxForwards:    r.Header.Get("Max-Forwards"),
	})
	h.mu.Unlock()
	if r.URL.Path == "/upgrade" && h.mode.Load() == hostOK {
		h.upgrade(w, r)
		return
	}
	switch h.mode.Load() {
	case hostForge:
		forgeFields(w.Header())
	case host503NoHost:
		w.Header().Set(cluster.HeaderNoHost, base64.StdEncoding.EncodeToString(make([]byte, 64)))
		http.Error(w, "host says no host", http.StatusServiceUnavailable)
		return
	case host500:
		http.Error(w, "host broken", http.StatusInternalServerError)
		return
	case hostHang:
		<-r.Context().Done()
		return
	case hostSlow503:
		d := slowFor
		if v := h.slow.Load(); v > 0 {
			d = time.Duration(v)
		}
		select {
		case <-time.After(d):
			http.Error(w, "host slow and broken", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
		return
	case hostBreak:
		w.Header().Set("Content-Length", "100000")
		io.WriteString(w, strings.Repeat("b", 29000))
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // so the 1000 bytes are read on their own
		io.WriteString(w, strings.Repeat("b", 1000))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case hostStream:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "served ")
		w.(http.Flusher).Flush()
		time.Sleep(slowFor)
		fmt.Fprintf(w, "by %s", h.cluster)
		return
	}
	if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
		var n int
		fmt.Sscan(code, &n)
		w.WriteHeader(n)
		fmt.Fprintf(w, "%d from %s", n, h.cluster)
		return
	}
	if r.URL.Path == "/gzip" && slices.Contains(r.Header.Values("Accept-Encoding"), "gzip") {
		// Gzipped when asked to, as a host's compressing middleware does.
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		fmt.Fprintf(zw, "served by %s", h.cluster)
		zw.Close()
		return
	}
	fmt.Fprintf(w, "served by %s", h.cluster)
}

// upgrade switches to the protocol the request's Upgrade names, in which
// the host writes one line, "{protocol} by {cluster}", and hangs up.
func (h *clHost) upgrade(w http.ResponseWriter, r *http.Request) {
	proto := r.Header.Get("Upgrade")
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", proto)
	w.WriteHeader(http.StatusSwitchingProtocols)
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintf(brw, "%s by %s\n", proto, h.cluster)
	brw.Flush()
}

func (h *clHost) requests() []seenReq {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// kill closes the host: connections to it are refused from now on.
func (h *clHost) kill() { h.srv.Close() }

// testCluster is one cluster: gateway, table, host, discovery.
type testCluster struct {
	id    string
	key   ed25519.PrivateKey
	url   string
	ln    net.Listener
	b     *route.Builder
	gw    *Gateway
	peers *peers.Peers
	host  *clHost
	srv   *http.Server
	roots *x509.CertPool // trusts the gateway's certificate (clusterSetup.tls)
}

// stop kills c's gateway: listener and every open connection closed.
func (c *testCluster) stop() { c.srv.Close() }

// clusterSetup says how the test clusters are built.
type clusterSetup struct {
	ids      []string
	deadline time.Duration
	bus      *nats.Conn // non-nil: discover over this bus instead of the static list
	edit     func(c *testCluster, o *Options)
	noWait   bool // do not wait for every set to see every cluster
	// tls serves every gateway over TLS (a certificate for 127.0.0.1)
	// and has them reach each other at https URLs, so forwards and
	// failovers travel over HTTP/2 as between public gateways.
	tls bool

	cert          *tls.Certificate // set by startClusters when tls
	peerTransport *peerTransport   // likewise: the gateways' own kind, trusting cert
}

// startClusters builds and serves the clusters of s, returned by id.
func startClusters(t testing.TB, s clusterSetup) map[string]*testCluster {
	t.Helper()
	cs := map[string]*testCluster{}
	var static []cluster.Peer
	var certs *x509.CertPool
	if s.tls {
		var cert tls.Certificate
		cert, certs = testutil.SelfSigned(t, "127.0.0.1")
		s.cert = &cert
	}
	for _, id := range s.ids {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		scheme := "http://"
		if s.tls {
			scheme = "https://"
		}
		c := &testCluster{id: id, key: key, ln: ln, url: scheme + ln.Addr().String(), roots: certs}
		cs[id] = c
		static = append(static, cluster.Peer{ID: id, URL: c.url, PublicKey: key.Public().(ed25519.PublicKey)})
	}
	for _, id := range s.ids {
		c := cs[id]
		po := peers.Options{
			Self:             cluster.Peer{ID: id, URL: c.url},
			Key:              c.key,
			ProbeInterval:    100 * time.Millisecond,
			ProbeTimeout:     time.Second,
			AnnounceInterval: 200 * time.Millisecond,
		}
		if certs != nil {
			po.HTTPClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs}}}
			s.peerTransport = newPeerTransport(&tls.Config{RootCAs: certs})
			t.Cleanup(s.peerTransport.CloseIdleConnections)
		}
		if s.bus != nil {
			po.Conn = s.bus
		} else {
			po.Static = static
		}
		p, err := peers.New(po)
		if err != nil {
			t.Fatal(err)
		}
		c.peers = p
		runPeers(t, p)
		c.startGateway(t, s)
	}
	if !s.noWait {
		for _, c := range cs {
			testutil.WaitFor(t, 10*time.Second, func() bool { return len(c.peers.Set().ActiveIDs()) == len(s.ids) }, c.id+" never saw every cluster")
		}
	}
	return cs
}

func runPeers(t testing.TB, p *peers.Peers) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (c *testCluster) startGateway(t testing.TB, s clusterSetup) {
	t.Helper()
	live := new(route.Live)
	c.b = route.NewBuilder(live)
	var apps []*route.App
	for _, a := range clApps {
		// A budget the benchmark cannot exhaust: limits are not what
		// these tests measure.
		apps = append(apps, &route.App{ID: a, Mode: route.ModeHTTP, Status: route.StatusActive,
			RateLimit: route.RateLimit{Requests: 1 << 30, Window: route.Duration(time.Minute)}})
	}
	apps = append(apps, &route.App{ID: "gone", Mode: route.ModeHTTP, Status: route.StatusRetired})
	c.b.Replace(route.State{Zones: []*route.Zone{{Name: testZone}}, Apps: apps})
	c.host = &clHost{cluster: c.id, release: make(chan struct{})}
	c.host.srv = httptest.NewServer(c.host)
	t.Cleanup(c.host.srv.Close)
	t.Cleanup(func() { close(c.host.release) }) // before Close, which waits for handlers
	u, _ := url.Parse(c.host.srv.URL)
	c.b.SetHost(&route.Host{ID: c.id + "-h1", Apps: append(slices.Clone(clApps), "gone"), Addr: u.Host, Scheme: "http", URL: u, State: route.HostVerified})
	o := Options{
		ClusterID: c.id,
		Live:      live,
		Cluster:   ClusterOptions{Members: c.peers.Set, Key: c.key, Deadline: s.deadline},
		Proxy:     proxy.Options{DialTimeout: time.Second},
	}
	if s.peerTransport != nil {
		o.Cluster.Transport = s.peerTransport
	}
	if s.edit != nil {
		s.edit(c, &o)
	}
	gw, err := New(o)
	if err != nil {
		t.Fatalf("gateway %s: %v", c.id, err)
	}
	c.gw = gw
	srv := &http.Server{Handler: asEdge(gw), ReadHeaderTimeout: 5 * time.Second}
	c.srv = srv
	done := make(chan struct{})
	if s.cert != nil {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*s.cert}}
		go func() { defer close(done); _ = srv.ServeTLS(c.ln, "", "") }()
	} else {
		go func() { defer close(done); _ = srv.Serve(c.ln) }()
	}
	t.Cleanup(func() {
		srv.Close()
		<-done
		gw.Close()
		gw.closeCluster()
	})
}

// ownedBy returns a test app that ids' owner function gives to owner.
func ownedBy(t testing.TB, owner string, ids []string) string {
	t.Helper()
	for _, a := range clApps {
		if cluster.Owner(a, ids) == owner {
			return a
		}
	}
	t.Fatalf("no test app owned by %s", owner)
	return ""
}

// clClient returns a client that connects from clientAddr, and trusts
// roots (nil: the system's) over https.
func clClient(t testing.TB, roots ...*x509.CertPool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientAddr)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}
	if len(roots) > 0 {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots[0]}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// send makes one request for app through c's gateway and reads the body.
func send(t testing.TB, cl *http.Client, c *testCluster, method, app, path string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader(`{"x":1}`)
	}
	req, err := http.NewRequest(method, c.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = app + "." + testZone
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s via %s: %v", method, app, c.id, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}
