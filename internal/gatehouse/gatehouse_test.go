package gatehouse

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// controlToken is testConfig's control.token.
const controlToken = "secret-token-0123456789"

// testConfig is a gateway on loopback with every port picked by the kernel.
func testConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Zone = "test.local"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.HTTP.Mode = config.HTTPModeServe
	cfg.HTTPS.Addr = "127.0.0.1:0"
	cfg.DNS.Addr = "127.0.0.1:0"
	cfg.Management.Addr = "127.0.0.1:0"
	cfg.Bus.Listen = "127.0.0.1:0"
	cfg.Cluster.ID = "one"
	cfg.Control.Token = controlToken
	cfg.DrainTimeout = 5 * time.Second
	return cfg
}

// running is a started gateway; stop ends it and returns Run's error.
type running struct {
	g      *Gatehouse
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg config.Config) *running {
	t.Helper()
	return startWith(t, cfg, nil)
}

// startWith is start with a chance to adjust the gateway between New and
// Run.
func startWith(t *testing.T, cfg config.Config, adjust func(*Gatehouse)) *running {
	t.Helper()
	return startLogged(t, cfg, nil, adjust)
}

// startLogging is start with the gateway's log, JSON lines from Info up,
// kept for the test to read.
func startLogging(t *testing.T, cfg config.Config) (*running, *testutil.SyncBuffer) {
	t.Helper()
	logs := new(testutil.SyncBuffer)
	return startLogged(t, cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})), nil), logs
}

// startLogged is startWith logging to log (nil: discarded).
func startLogged(t *testing.T, cfg config.Config, log *slog.Logger, adjust func(*Gatehouse)) *running {
	t.Helper()
	g, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- g.Run(ctx) }()
	select {
	case <-g.Ready():
	case err := <-r.done:
		cancel()
		t.Fatalf("gateway stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("gateway not ready after 30s")
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not stop within 30s")
		return nil
	}
}

func (r *running) control(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+r.g.Addrs().Management+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+controlToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get sends a request for host to the gateway's plaintext listener.
func (r *running) get(t *testing.T, hostname, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().HTTP+path, nil)
	req.Host = hostname
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// startHost enrols a key for id through the control API and runs a real
// plain-http host on the gateway's bus, serving h behind the challenge.
func startHost(t *testing.T, r *running, id, app string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runHost(t, r, "one", id, app, "http", ln, h)
}

// runHost enrols a fresh key for id and runs host id of cluster clusterID
// on ln with scheme, until the test ends.
func runHost(t *testing.T, r *running, clusterID, id, app, scheme string, ln net.Listener, h http.Handler) {
	t.Helper()
	runHostOn(t, r, "nats://"+r.g.Addrs().Bus, time.Second, clusterID, id, app, scheme, ln, h)
}

// runHostOn is runHost with the host on a bus connection of its own to
// busURL (another node of the gateway's NATS cluster, say) and its
// heartbeat every beat.
func runHostOn(t *testing.T, r *running, busURL string, beat time.Duration, clusterID, id, app, scheme string, ln net.Listener, h http.Handler) {
	t.Helper()
	key, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := host.PublicKeyString(key.Public().(ed25519.PublicKey))
	if code, body := r.control(t, "PUT", "/api/v3/hosts/keys/"+id, fmt.Sprintf(`{"public_key":%q,"apps":[%q]}`, pub, app)); code != 200 {
		t.Fatalf("enrol %s: %d %s", id, code, body)
	}
	nc := testutil.Connect(t, busURL)
	hh, err := host.New(host.Options{Conn: nc, Cluster: clusterID, HostID: id, Key: key, Apps: []string{app}, Addr: ln.Addr().String(), Scheme: scheme, HeartbeatInterval: beat})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: hh.Wrap(h)}
	if scheme == host.SchemeH2C {
		// HTTP/2 with prior knowledge and nothing else, as a gRPC server
		// speaks: the gateway must reach it (challenge, probes, requests)
		// over h2c.
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hh.Run(ctx) }()
	t.Cleanup(func() {
		// A host whose bus is gone (the test stopped the gateway or its
		// bus node) would wait out its leave's flush bound, 2 s, for a
		// leave nobody reads any more: the test is over.
		if !nc.IsConnected() {
			nc.Close()
		}
		cancel()
		<-done
		srv.Close()
	})
}

func TestEndToEnd(t *testing.T) {
	r := start(t, testConfig(t))

	// Unknown host: 404 problem+json.
	resp, body := r.get(t, "nope.test.local", "/", nil)
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unknown host: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// Control API needs the token.
	req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().Management+"/api/v3/apps", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("control without token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// No auth.issuers here: an app requiring tokens could admit no
	// request, and is refused rather than stored to answer 401 to all.
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{"auth":{"required":true}}`); code != 400 || !strings.Contains(body, "auth.issuers") {
		t.Fatalf("put app with auth.required and no issuer: %d %s, want 400 naming auth.issuers", code, body)
	}
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{"mode":"http"}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	got := make(chan http.Header, 16)
	startHost(t, r, "host-1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got <- req.Header.Clone()
		fmt.Fprint(w, "hello from host-1")
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return len(r.g.Live().Load().Pool("hello")) == 1
	}, "host-1 never became routable")

	resp, body = r.get(t, "hello.test.local", "/x", map[string]string{"X-Gatehouse-App-Id": "evil", "X_Gatehouse_Subject": "root"})
	if resp.StatusCode != 200 || body != "hello from host-1" {
		t.Fatalf("app: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Gatehouse-Cluster") != "one" {
		t.Errorf("X-Gatehouse-Cluster = %q", resp.Header.Get("X-Gatehouse-Cluster"))
	}
	h := <-got
	if h.Get("X-Gatehouse-App-Id") != "hello" || h.Get("X-Gatehouse-Cluster") != "one" || h.Get("X-Gatehouse-Request-Id") == "" || h.Get("X-Gatehouse-Client-Ip") != "127.0.0.1" {
		t.Errorf("context headers at host: %v", h)
	}
	if _, ok := h["X_gatehouse_subject"]; ok || h.Get("X-Gatehouse-Subject") != "" {
		t.Errorf("client-sent X-Gatehouse header reached the host: %v", h)
	}

	// The hosts list shows it verified.
	code, body := r.control(t, "GET", "/api/v3/hosts", "")
	var hl struct {
		Hosts []struct{ HostID, State string }
	}
	if code != 200 || json.Unmarshal([]byte(body), &hl) != nil || len(hl.Hosts) != 1 || hl.Hosts[0].State != "verified" {
		t.Fatalf("hosts: %d %s", code, body)
	}
	// Metrics are served and count the request.
	mresp, err := http.Get("http://" + r.g.Addrs().Management + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(mb), `app="hello"`) {
		t.Errorf("metrics lack the hello app:\n%.2000s", mb)
	}
}

// TestManagementErrorsAreProblems: the heads net/http refuses itself on
// the management listener (no handler runs) are answered with its status
// as a problem+json naming the reason, as on the http listener (DESIGN
// §2), and the connection is closed; so is a desync framing, which the
// guard refuses there too. /readyz after an honest request still answers.
func TestManagementErrorsAreProblems(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listeners.MaxHeaderBytes = 4 << 10
	r := start(t, cfg)
	const h = "Host: 127.0.0.1\r\n"
	tests := []struct {
		name, raw string
		status    int
		detail    string
	}{
		{"malformed Host", "GET /readyz HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "malformed Host header"},
		{"no Host", "GET /readyz HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"invalid byte in a name", "GET /readyz HTTP/1.1\r\n" + h + "X(A: 1\r\n\r\n", 400, "the request head is malformed"},
		{"HTTP/2.0 request line", "GET /readyz HTTP/2.0\r\n" + h + "\r\n", 505, "unsupported protocol version"},
		{"head over the limit", "GET /readyz HTTP/1.1\r\n" + h + "X-Big: " + strings.Repeat("b", 10<<10) + "\r\n\r\n", 431, "the request head is over the listener's limit"},
		{"unknown expectation", "GET /readyz HTTP/1.1\r\n" + h + "Expect: foo\r\n\r\n", 417, "the Expect field names an expectation other than 100-continue"},
		{"both framings", "POST /api/v3/apps HTTP/1.1\r\n" + h + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "both Content-Length and Transfer-Encoding"},
		{"after /readyz", "GET /readyz HTTP/1.1\r\n" + h + "\r\nGET /readyz HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "malformed Host header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", r.g.Addrs().Management)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, tt.raw)
			b, err := io.ReadAll(c) // the listener closes the connection
			if err != nil {
				t.Fatalf("%v after %q", err, b)
			}
			br := bufio.NewReader(bytes.NewReader(b))
			var res *http.Response
			var body []byte
			for {
				if res, err = http.ReadResponse(br, nil); err != nil {
					t.Fatalf("%v in %q", err, b)
				}
				body, _ = io.ReadAll(res.Body)
				if _, err := br.Peek(1); err != nil {
					break
				}
				if res.StatusCode != 200 {
					t.Fatalf("an answer before the last is not /readyz's: %q", b)
				}
			}
			var p struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if res.StatusCode != tt.status || res.Header.Get("Content-Type") != "application/problem+json" || !res.Close ||
				json.Unmarshal(body, &p) != nil || p.Status != tt.status || p.Detail != tt.detail {
				t.Fatalf("got %q, want a %d problem %q with Connection: close", b, tt.status, tt.detail)
			}
		})
	}
}

// Desync framings are refused on the plaintext listener with a 400
// problem and a closed connection, before any host could see them
// (DESIGN §2 step 4), as is a head net/http refuses itself. The guard's
// refusals of the framings name the cluster, as every answer does.
func TestFramingRefusedOnHTTPListener(t *testing.T) {
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	seen := make(chan string, 8)
	startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		seen <- req.Method + " " + req.URL.Path
	}))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")
	for _, raw := range []string{
		"POST /smuggle HTTP/1.1\r\nHost: hello.test.local\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /smuggle HTTP/1.1\r\nHost: hello.test.local\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"POST /smuggle HTTP/1.1\r\nHost: hello.test.local\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"GET /smuggle HTTP/1.1\r\nHost: hello.test.local bad\r\n\r\n", // net/http refuses it itself
	} {
		c, err := net.Dial("tcp", r.g.Addrs().HTTP)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, raw)
		b, _ := io.ReadAll(c) // the gateway closes the connection
		c.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 400") || !strings.Contains(string(b), "Content-Type: application/problem+json") {
			t.Errorf("%q: got %q, want a 400 problem", raw, b)
		}
		// Every answer names the cluster (DESIGN §5.2), the guard's
		// refusal of a desync framing too.
		if desync := !strings.HasPrefix(raw, "GET"); desync && !strings.Contains(string(b), "\r\nX-Gatehouse-Cluster: one\r\n") {
			t.Errorf("%q: got %q, without X-Gatehouse-Cluster", raw, b)
		}
	}
	select {
	case s := <-seen:
		t.Fatalf("the host saw %s", s)
	default:
	}
}

// TestManagementRefusesForeignHost: the management listener, on loopback
// as by default, answers 421 to a Host that is not localhost or a
// loopback address (a page's own name under DNS rebinding), on /metrics,
// /readyz and the API alike, and serves the loopback names.
func TestManagementRefusesForeignHost(t *testing.T) {
	r := start(t, testConfig(t))
	for _, c := range []struct {
		host string
		want int
	}{
		{"rebind.attacker.example:9180", 421},
		{"rebind.attacker.example", 421},
		{r.g.Addrs().Management, 200},
		{"localhost:9180", 200},
	} {
		for _, path := range []string{"/metrics", "/readyz", "/api/v3/discovery/clusters"} {
			req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().Management+path, nil)
			req.Host = c.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("Host %s %s: %d, want %d", c.host, path, resp.StatusCode, c.want)
			}
		}
	}
}

// TestManagementRouteErrorsAreProblems: a path the management listener
// does not serve is a 404, and a method its route does not take a 405
// naming the methods it does, both as problem+json like every error the
// gateway answers itself (DESIGN §2), not net/http's plain text. The
// routes themselves still answer.
func TestManagementRouteErrorsAreProblems(t *testing.T) {
	r := start(t, testConfig(t))
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/nope", 404, ""},
		{"GET", "/dashboard/nope.js", 404, ""},
		{"GET", "/dashboard/", 404, ""},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"POST", "/readyz", 405, "GET, HEAD"},
		{"PUT", "/metrics", 405, "GET, HEAD"},
		{"DELETE", "/", 405, "GET, HEAD"},
		{"POST", "/dashboard/dashboard.js", 405, "GET, HEAD"},
		{"GET", "/healthz", 200, ""},
		{"HEAD", "/readyz", 200, ""},
		{"GET", "/metrics", 200, ""},
		{"GET", "/", 200, ""},
		{"GET", "/dashboard/dashboard.css", 200, ""},
	} {
		req, _ := http.NewRequest(c.method, "http://"+r.g.Addrs().Management+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
			continue
		}
		if c.status < 400 {
			continue
		}
		var p struct {
			Status int `json:"status"`
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(b, &p) != nil || p.Status != c.status {
			t.Errorf("%s %s: %s %q, want a %d problem", c.method, c.path, ct, b, c.status)
		}
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}
