package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats-server/v2/server"
)

// enrolled is an in-memory enrolment table with the store's method shape.
type enrolled map[string]*route.HostKey

func (e enrolled) GetHostKey(_ context.Context, id string) (*route.HostKey, error) {
	if k := e[id]; k != nil {
		return k, nil
	}
	return nil, errors.New("not found")
}

// The sidecar against a real gateway-side discovery: it is verified over
// the bus and its challenge path, proxies to the upstream with the Host
// and gateway headers intact, and on SIGTERM leaves, then finishes the
// request in flight before it exits.
func TestHostSidecar(t *testing.T) {
	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}

	var challengesSeen atomic.Int32
	release := make(chan struct{})
	slowStarted := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case host.ChallengePath:
			challengesSeen.Add(1)
		case "/slow":
			close(slowStarted)
			<-release
		}
		io.WriteString(w, r.Host+" "+r.URL.Path+" "+r.Header.Get("X-Gatehouse-Request-Id")+" "+r.Header.Get("X-Forwarded-For"))
	}))
	defer upstream.Close()
	defer close(release)

	live := new(route.Live)
	d, err := discovery.New(discovery.Options{
		Conn: testutil.Connect(t, ns.ClientURL()), Cluster: "c1", GatewayID: "gw-1",
		Builder: route.NewBuilder(live), HeartbeatInterval: time.Second, HostTTL: 5 * time.Second,
		Keys: enrolled{"side-1": {HostID: "side-1", PublicKey: host.PublicKeyString(k.Public().(ed25519.PublicKey)), Apps: []string{"hello"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, dstop := context.WithCancel(context.Background())
	ddone := make(chan error, 1)
	go func() { ddone <- d.Run(dctx) }()
	defer func() { dstop(); <-ddone }()

	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "side-1", "-key", keyFile,
			"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", upstream.URL, "-heartbeat", "1s", "-leave-grace", "50ms"}, &stdout, &stderr)
	}()
	routable := func() bool {
		return slices.ContainsFunc(live.Load().Pool("hello"), func(h *route.Host) bool { return h.ID == "side-1" })
	}
	testutil.WaitFor(t, 10*time.Second, routable, "sidecar not verified")
	if !strings.Contains(stdout.String(), "gatehouse host side-1: serving 127.0.0.1:") {
		t.Fatalf("stdout %q", stdout.String())
	}
	addr := live.Load().Pool("hello")[0].Addr
	if challengesSeen.Load() != 0 {
		t.Fatal("the challenge reached the upstream")
	}

	req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
	req.Host = "hello.localhost"
	req.Header.Set("X-Gatehouse-Request-Id", "r1")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello.localhost /x r1 203.0.113.7" {
		t.Fatalf("proxied body %q", body)
	}

	// A request in flight when SIGTERM comes finishes.
	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- resp.Status + " " + string(b)
	}()
	<-slowStarted
	sigterm()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		hi, _ := d.Host("side-1")
		return hi.State == route.HostDraining && !routable()
	}, "not draining after SIGTERM")
	select {
	case err := <-exited:
		t.Fatalf("exited with a request in flight: %v", err)
	default:
	}
	release <- struct{}{}
	if got := <-slow; !strings.HasPrefix(got, "200 OK") {
		t.Fatalf("in-flight request: %s", got)
	}
	if err := <-exited; err != nil {
		t.Fatalf("runHost: %v\n%s", err, stderr.String())
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("still listening after exit")
	}
	testutil.CheckJSONLog(t, stderr.String())
}

func TestHostFlags(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k.pem")
	k, _ := host.GenerateKey()
	host.WriteKey(keyFile, k)
	base := []string{"-cluster", "c1", "-id", "h1", "-key", keyFile, "-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1"}
	without := func(flag string) []string {
		i := slices.Index(base, flag)
		return slices.Delete(slices.Clone(base), i, i+2)
	}
	for name, args := range map[string][]string{
		"no cluster":   without("-cluster"),
		"no id":        without("-id"),
		"no key":       without("-key"),
		"no app":       without("-app"),
		"no addr":      without("-addr"),
		"no upstream":  without("-upstream"),
		"https scheme": append(slices.Clone(base), "-scheme", "https"),
		"bad upstream": append(without("-upstream"), "-upstream", "ftp://x"),
		"missing key":  append(without("-key"), "-key", filepath.Join(dir, "none")),
		"bad app":      append(without("-app"), "-app", "Bad_App"),
		"bad id":       append(without("-id"), "-id", "a b"),
		"bad cluster":  append(without("-cluster"), "-cluster", "C1"),
		"extra arg":    append(slices.Clone(base), "extra"),
		"bad listen":   append(without("-addr"), "-addr", "nonsense"),
	} {
		var out, errb bytes.Buffer
		if err := runHost(t.Context(), args, &out, &errb); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestHostFlagsNameWhatIsWrong: an app given twice and a listen address
// that cannot be bound are refused with the flag they came from.
func TestHostFlagsNameWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	base := []string{"-cluster", "c1", "-id", "h1", "-key", keyFile, "-upstream", "http://127.0.0.1:1"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"app twice", []string{"-app", "hello", "-app", "shop", "-app", "hello", "-addr", "127.0.0.1:0"}, `host: -app "hello" is given twice`},
		{"addr taken", []string{"-app", "hello", "-addr", held.Addr().String()}, "host: -addr " + held.Addr().String() + ": listen tcp"},
		{"addr nonsense", []string{"-app", "hello", "-addr", "nonsense"}, "host: -addr nonsense: "},
	} {
		var out, errb bytes.Buffer
		// Bounded: accepted, the sidecar would wait for its bus.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := runHost(ctx, append(slices.Clone(base), c.args...), &out, &errb)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestAnnounceAddr(t *testing.T) {
	la := &net.TCPAddr{IP: net.IPv4zero, Port: 8081}
	for _, tc := range []struct{ advertise, listen, want string }{
		{"", ":8081", "127.0.0.1:8081"},
		{"", "0.0.0.0:0", "127.0.0.1:8081"},
		{"", "[::]:8081", "127.0.0.1:8081"},
		{"", "10.1.2.3:8081", "10.1.2.3:8081"},
		{"web-1.internal:443", ":8081", "web-1.internal:443"},
	} {
		got, err := announceAddr(tc.advertise, tc.listen, la)
		if err != nil || got != tc.want {
			t.Errorf("announceAddr(%q, %q) = %q, %v; want %q", tc.advertise, tc.listen, got, err, tc.want)
		}
	}
	if _, err := announceAddr(":1", ":8081", la); err == nil {
		t.Error("an advertise address without a host was accepted")
	}
}

// With -scheme h2c the sidecar speaks HTTP/2 cleartext on both sides, as
// gRPC backends need.
func TestHostSidecarH2C(t *testing.T) {
	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}))
	upstream.Config.Protocols = new(http.Protocols)
	upstream.Config.Protocols.SetUnencryptedHTTP2(true)
	upstream.Start()
	defer upstream.Close()

	ctx, sigterm := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "grpc-1", "-key", keyFile,
			"-app", "rpc", "-addr", "127.0.0.1:0", "-upstream", upstream.URL, "-scheme", "h2c", "-leave-grace", "0s"}, &stdout, &stderr)
	}()
	defer func() {
		sigterm()
		if err := <-exited; err != nil {
			t.Error(err)
		}
	}()
	addr := sidecarAddr(t, &stdout)

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "HTTP/2.0" {
		t.Fatalf("client saw %s, upstream saw %q", resp.Proto, b)
	}
}

// A host's bus credential (an external NATS may give hosts one) is never
// printed.
func TestRedactBus(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                        "nats://127.0.0.1:4222",
		"nats://host:s3cret@a:4222,tls://tok3n@b:4222": "nats://xxxxx@a:4222,tls://xxxxx@b:4222",
		"nats://host:s3cret@[::1":                      "nats://xxxxx@[::1",
		"host:s3cret@nats:4222":                        "xxxxx@nats:4222", // no "//": parses as scheme and opaque
	} {
		if got := redactBus(in); got != want {
			t.Errorf("redactBus(%q) = %q, want %q", in, got, want)
		}
	}
}

// An upgraded connection (a WebSocket) through the sidecar is a request in
// flight too: on SIGTERM it gets the drain timeout to finish, like any
// other, instead of dying with the process as soon as plain requests are
// done (http.Server.Shutdown does not wait for hijacked connections).
func TestHostSidecarDrainsUpgraded(t *testing.T) {
	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		io.Copy(c, rw) // echo until the client closes
	}))
	defer upstream.Close()

	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "ws-1", "-key", keyFile,
			"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", upstream.URL, "-leave-grace", "0s", "-drain-timeout", "5s"}, &stdout, &stderr)
	}()
	addr := sidecarAddr(t, &stdout)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	echo := func(s string) string {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, s+"\n")
		line, _ := br.ReadString('\n')
		return strings.TrimSuffix(line, "\n")
	}
	if got := echo("before"); got != "before" {
		t.Fatalf("echo before SIGTERM: %q", got)
	}

	sigterm()
	select {
	case err := <-exited:
		t.Fatalf("exited with an upgraded connection in flight: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if got := echo("during drain"); got != "during drain" {
		t.Fatalf("echo during drain: %q", got)
	}
	c.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("runHost: %v\n%s", err, stderr.String())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("did not exit once the upgraded connection ended")
	}
}

// A sidecar started before its bus keeps retrying, but says so: an
// unreachable or mistyped -bus must not leave it silently unannounced.
func TestHostSidecarSaysBusUnreachable(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	nobody := testutil.RefusedAddr(t)

	ctx, sigterm := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", "nats://host:s3cret@" + nobody, "-cluster", "c1", "-id", "x-1", "-key", keyFile,
			"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-leave-grace", "0s"}, &stdout, &stderr)
	}()
	defer func() { sigterm(); <-exited }()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return strings.Contains(stderr.String(), "bus unreachable")
	}, "nothing said about the unreachable bus")
	if strings.Contains(stderr.String(), "s3cret") {
		t.Fatalf("bus credential logged: %s", stderr.String())
	}
}

// A -bus that is no NATS URL is refused at start, naming the flag, as
// serve refuses such a bus.url: NATS takes any scheme it does not know
// (http, https) as plain nats://, so a sidecar told https:// would speak
// to the bus in the clear, credential included, and an empty -bus would
// quietly mean 127.0.0.1:4222. The credential is not repeated.
func TestHostRefusesBadBus(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	for _, bus := range []string{
		"http://127.0.0.1:4222",
		"https://host:s3cret@nats.example.com:4222",
		"nats://127.0.0.1:4222,ftp://127.0.0.1:4222",
		"nats://",
		"",
		" , ",
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		var stdout, stderr bytes.Buffer
		err := runHost(ctx, []string{"-bus", bus, "-cluster", "c1", "-id", "h1", "-key", keyFile, "-app", "hello",
			"-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-leave-grace", "0s"}, &stdout, &stderr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "-bus") {
			t.Errorf("-bus %q: err = %v, want a refusal naming -bus", bus, err)
		}
		if out := fmt.Sprint(err) + stdout.String() + stderr.String(); strings.Contains(out, "s3cret") {
			t.Errorf("-bus %q: credential printed: %s", bus, out)
		}
	}
}

// An -upstream with user info is refused: the proxy would never send it
// (the client's own Authorization goes through untouched), and it would
// be printed in the startup line.
func TestHostUpstreamUserInfo(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runHost(ctx, []string{"-bus", "nats://127.0.0.1:1", "-cluster", "c1", "-id", "h1", "-key", keyFile, "-app", "hello",
		"-addr", "127.0.0.1:0", "-upstream", "http://app:s3cret@127.0.0.1:1", "-leave-grace", "0s"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-upstream") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("err = %v", err)
	}
	if strings.Contains(stdout.String()+stderr.String(), "s3cret") {
		t.Errorf("credential printed: %s%s", stdout.String(), stderr.String())
	}
}

// A key file the sidecar cannot use is refused naming -key, as its other
// refusals name their flag: "host: read key: open …" named the file but
// not the flag it came from.
func TestHostKeyErrorNamesFlag(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct{ key, want string }{
		{missing, "host: -key: read key: open " + missing + ": no such file or directory"},
		{notPEM, "host: -key: no PEM block in key (in " + notPEM + ")"},
		{dir, "host: -key: read key: read " + dir + ": is a directory"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := runHost(ctx, []string{"-bus", "nats://127.0.0.1:1", "-cluster", "c1", "-id", "h1", "-key", tc.key, "-app", "hello",
			"-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-leave-grace", "0s"}, &bytes.Buffer{}, &bytes.Buffer{})
		cancel()
		if err == nil || err.Error() != tc.want {
			t.Errorf("-key %s: %v\nwant %s", tc.key, err, tc.want)
		}
		if tc.key == missing && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("-key %s: %v does not wrap os.ErrNotExist", tc.key, err)
		}
	}
}

// The sidecar passes a request and its answer on as they are: the
// client's trailers reach the app, no Accept-Encoding is added (nor the
// answer decompressed), a body the app sent untyped gets no sniffed type,
// and an app that does not answer is a problem+json 502.
func TestSidecarPassesThroughUnchanged(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/untyped":
			w.Header()["Content-Type"] = nil
			w.Header().Set("X-Content-Type-Options", "nosniff")
			io.WriteString(w, "<html><script>alert(1)</script></html>")
		case "/echo":
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "ae="+r.Header.Get("Accept-Encoding")+" t="+r.Trailer.Get("X-Sum"))
		}
	}))
	defer app.Close()
	up, _ := url.Parse(app.URL)
	side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.DiscardHandler)))
	defer side.Close()
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	res, err := c.Get(side.URL + "/untyped")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if ct, ok := res.Header["Content-Type"]; ok {
		t.Errorf("Content-Type %q on a body the app sent untyped", ct)
	}

	req, _ := http.NewRequest("POST", side.URL+"/echo", io.MultiReader(strings.NewReader("body")))
	req.ContentLength = -1 // chunked, so trailers can follow
	req.Trailer = http.Header{"X-Sum": {"42"}}
	res, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "ae= t=42" {
		t.Errorf("the app saw %q, want no Accept-Encoding and the trailer", b)
	}

	app.Close()
	res, err = c.Get(side.URL + "/gone")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("app down: %d %q, want a problem+json 502", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

// TestHostHeartbeatAtLeastASecond: -heartbeat is held to the floor of the
// gateways' heartbeat_interval, which it must match: 1ms was taken, and
// the sidecar heartbeat a thousand times a second on the bus (each one
// handled by every gateway), and warned after 3ms that no gateway had
// answered it.
func TestHostHeartbeatAtLeastASecond(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "k.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	base := []string{"-cluster", "c1", "-id", "h1", "-key", keyFile, "-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1"}
	for _, tc := range []struct {
		hb   string
		want string // "" accepted
	}{
		{"1ms", "host: -heartbeat must be at least 1s, as the gateways' heartbeat_interval is, got 1ms"},
		{"999ms", "host: -heartbeat must be at least 1s, as the gateways' heartbeat_interval is, got 999ms"},
		{"1s", ""},
		// 0s and negatives name the same floor: they said "must be
		// positive", and 999ms then "at least 1s".
		{"0s", "host: -heartbeat must be at least 1s, as the gateways' heartbeat_interval is, got 0s"},
		{"-5s", "host: -heartbeat must be at least 1s, as the gateways' heartbeat_interval is, got -5s"},
	} {
		_, err := parseHostFlags(append(slices.Clone(base), "-heartbeat", tc.hb), &bytes.Buffer{}, &bytes.Buffer{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("-heartbeat %s: got %v, want %q", tc.hb, err, tc.want)
		}
	}
}

// A sidecar whose bus node goes silent without closing (its machine off,
// a partition dropping packets) finds out within seconds and says so, as
// it reconnects: with nats.go's default pings (every 2 min, 2
// unanswered) it sent heartbeats nobody read for ~6 min, and every
// gateway took its host out of rotation after 3 missed ones.
func TestHostSidecarFindsASilentBus(t *testing.T) {
	ns := testutil.StartBus(t)
	link := testutil.NewSilentLink(t, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	sub := testutil.Connect(t, ns.ClientURL())
	beats, err := sub.SubscribeSync("gatehouse.c1.>")
	if err != nil {
		t.Fatal(err)
	}
	ctx, sigterm := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", link.URL(), "-cluster", "c1", "-id", "x-1", "-key", keyFile,
			"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-leave-grace", "0s",
			"-heartbeat", "1s"}, &stdout, &stderr)
	}()
	defer func() { sigterm(); <-exited }()
	if _, err := beats.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("nothing from the sidecar on the bus: %v\n%s", err, stderr.String())
	}
	link.Quiet()
	testutil.WaitFor(t, 15*time.Second, func() bool {
		return strings.Contains(stderr.String(), "bus unreachable")
	}, "the sidecar never noticed its bus went silent")
}

// The sidecar keeps its connections to the app for the next requests, as
// many as the gateway sends it at once (the gateway keeps up to 64 idle
// per host): with net/http's default of 2 idle per upstream, every burst
// of concurrent requests opened a fresh connection to the app for all but
// two of them, and closed it after one request.
func TestSidecarReusesUpstreamConnections(t *testing.T) {
	t.Parallel()
	const concurrent, rounds = 8, 3
	var opened atomic.Int32
	arrived, gate := make(chan struct{}, concurrent), make(chan struct{}, concurrent)
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-gate // all of a round are in flight together, each on a connection of its own
		io.WriteString(w, "ok")
	}))
	app.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	app.Start()
	defer app.Close()
	up, _ := url.Parse(app.URL)
	side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.DiscardHandler)))
	defer side.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: concurrent}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	for round := range rounds {
		errs := make(chan error, concurrent)
		for range concurrent {
			go func() {
				res, err := c.Get(side.URL + "/")
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				errs <- err
			}()
		}
		for range concurrent {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the app did not get %d requests at once", round, concurrent)
			}
		}
		for range concurrent {
			gate <- struct{}{}
		}
		for range concurrent {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	// A connection goes back to the pool as its response body ends, which
	// may be just after the client has read it: a round may find one not
	// back yet. The default pool opened concurrent-2 afresh every round.
	if n := int(opened.Load()); n > concurrent+rounds-1 {
		t.Errorf("the app saw %d connections for %d rounds of %d concurrent requests, want about %d", n, rounds, concurrent, concurrent)
	}
}

// A request still in flight when -drain-timeout runs out is cut, as serve
// cuts its connections at drain_timeout (and nginx at
// worker_shutdown_timeout): the sidecar says so in a warning and exits 0,
// the stop it was asked for. It exited 1 with "host: drain: context
// deadline exceeded", so a service manager marked every stop with a long
// request (an event stream, a WebSocket) a failure.
func TestHostSidecarDrainTimeoutCutsAndSaysSo(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer upstream.Close()
	defer close(release)

	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "slow-1", "-key", keyFile,
			"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", upstream.URL, "-leave-grace", "0s", "-drain-timeout", "1s"}, &stdout, &stderr)
	}()
	addr := sidecarAddr(t, &stdout)
	cut := make(chan error, 1)
	go func() {
		res, err := http.Get("http://" + addr + "/slow")
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		cut <- err
	}()
	<-started
	sigterm()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("runHost after a drain that ran out: %v, want nil (exit 0)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit after -drain-timeout")
	}
	if err := <-cut; err == nil {
		t.Error("the request in flight was not cut")
	}
	if log := stderr.String(); !strings.Contains(log, `"level":"WARN","msg":"host: drained; -drain-timeout cut the requests still in flight"`) ||
		!strings.Contains(log, `"cut_requests":1`) || !strings.Contains(log, `"drain_timeout":"1s"`) {
		t.Errorf("no warning naming the cut request and -drain-timeout:\n%s", log)
	}
	testutil.CheckJSONLog(t, stderr.String())
}

// -drain-timeout is held to 1s, as serve's drain_timeout is: a shorter
// drain cuts every request in flight at each stop, so 30ms is a slip of
// 30s, not a choice.
func TestHostDrainTimeoutAtLeastASecond(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "k.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	base := []string{"-cluster", "c1", "-id", "h1", "-key", keyFile, "-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1"}
	for _, tc := range []struct{ d, want string }{
		{"30ms", "host: -drain-timeout must be at least 1s, got 30ms"},
		{"999ms", "host: -drain-timeout must be at least 1s, got 999ms"},
		{"1s", ""},
		{"0s", "host: -drain-timeout must be at least 1s, got 0s"},
		{"-1s", "host: -drain-timeout must be at least 1s, got -1s"},
	} {
		_, err := parseHostFlags(append(slices.Clone(base), "-drain-timeout", tc.d), &bytes.Buffer{}, &bytes.Buffer{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("-drain-timeout %s: got %v, want %q", tc.d, err, tc.want)
		}
	}
}

// -leave-grace is named alone when negative: it shared one line with
// -drain-timeout and -heartbeat, which named no value and no bound.
func TestHostLeaveGraceNotNegative(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "k.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	base := []string{"-cluster", "c1", "-id", "h1", "-key", keyFile, "-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1"}
	for _, tc := range []struct{ g, want string }{
		{"-1s", "host: -leave-grace must not be negative (0s: no grace), got -1s"},
		{"0s", ""},
		{"50ms", ""},
	} {
		_, err := parseHostFlags(append(slices.Clone(base), "-leave-grace", tc.g), &bytes.Buffer{}, &bytes.Buffer{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("-leave-grace %s: got %v, want %q", tc.g, err, tc.want)
		}
	}
}

// sidecarAddr waits for a sidecar started with -addr 127.0.0.1:0 to say
// where it serves, on stdout, and returns that address.
func sidecarAddr(t *testing.T, stdout *testutil.SyncBuffer) string {
	t.Helper()
	var addr string
	testutil.WaitFor(t, 10*time.Second, func() bool {
		_, rest, ok := strings.Cut(stdout.String(), "serving ")
		addr, _, _ = strings.Cut(rest, " ")
		return ok && addr != ""
	}, "sidecar did not start")
	return addr
}

// A -key readable by group or others is warned about at start, naming the
// file and its mode, but not refused: ssh refuses such a key, and serve
// its cluster.key, but a Kubernetes secret is mounted 0644 unless its
// defaultMode says otherwise, and refusing would stop every such
// deployment at its next restart.
func TestHostWarnsKeyReadableByOthers(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix file modes")
	}
	const warning = `"msg":"host: -key is open to group or others, and anyone who reads it can sign as this host: chmod 600 it (a Kubernetes secret: defaultMode 0400)"`
	ns := testutil.StartBus(t)
	for _, mode := range []os.FileMode{0o600, 0o400, 0o644, 0o640, 0o604} {
		keyFile := filepath.Join(t.TempDir(), "host.pem")
		k, _ := host.GenerateKey()
		if err := host.WriteKey(keyFile, k); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(keyFile, mode); err != nil {
			t.Fatal(err)
		}
		ctx, sigterm := context.WithCancel(context.Background())
		var stdout, stderr testutil.SyncBuffer
		exited := make(chan error, 1)
		go func() {
			exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "k-1", "-key", keyFile,
				"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-leave-grace", "0s"}, &stdout, &stderr)
		}()
		sidecarAddr(t, &stdout) // started: the check is behind it
		sigterm()
		if err := <-exited; err != nil {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		log := stderr.String()
		want := mode&0o077 != 0
		if got := strings.Contains(log, warning) && strings.Contains(log, `"file":"`+keyFile+`"`) &&
			strings.Contains(log, fmt.Sprintf(`"mode":"%04o"`, mode)); got != want {
			t.Errorf("mode %04o: warned %v, want %v:\n%s", mode, got, want, log)
		}
		if !want && strings.Contains(log, "-key is open") {
			t.Errorf("mode %04o: warned:\n%s", mode, log)
		}
		testutil.CheckJSONLog(t, log)
	}
}

// A token in -bus is a credential too: the line a sidecar logs when its bus
// comes within reach names the server without it (nats.go's redacted URL
// hides a password, not a token).
func TestHostBusReachedHidesToken(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	const token = "tok3n-0123456789"
	addr := testutil.FreeAddr(t)
	h, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)

	ctx, sigterm := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", "nats://" + token + "@" + addr, "-cluster", "c1", "-id", "x-1", "-key", keyFile,
			"-app", "hello", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-leave-grace", "0s"}, &stdout, &stderr)
	}()
	defer func() { sigterm(); <-exited }()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return strings.Contains(stderr.String(), "bus unreachable")
	}, "nothing said about the bus out of reach")
	ns, err := server.NewServer(&server.Options{Host: h, Port: port, Authorization: token, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	testutil.WaitFor(t, 30*time.Second, func() bool {
		return strings.Contains(stderr.String(), "bus reached")
	}, "nothing said about the bus coming within reach")
	if strings.Contains(stderr.String(), token) {
		t.Fatalf("bus token logged:\n%s", stderr.String())
	}
}
