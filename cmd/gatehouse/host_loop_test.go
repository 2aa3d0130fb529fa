package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A sidecar whose -upstream is its own listen address would forward each
// request to itself until a limit of the machine's ran out (ports, file
// descriptors): it is refused at start, naming both flags, and exits 1
// as any other refused value does. A listener on every address (":P",
// "0.0.0.0:P", "[::]:P") takes a loopback upstream; "localhost" is
// loopback; the scheme does not matter.
func TestHostRefusesUpstreamItself(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(testutil.FreePort(t))
	for _, tc := range []struct{ addr, upstream string }{
		{"127.0.0.1:" + p, "http://127.0.0.1:" + p},
		{"127.0.0.1:" + p, "http://localhost:" + p + "/app"},
		{"127.0.0.1:" + p, "https://127.0.0.1:" + p},
		{":" + p, "http://127.0.0.1:" + p},
		{"0.0.0.0:" + p, "http://localhost:" + p},
		{"[::]:" + p, "http://127.0.0.1:" + p},
		{"localhost:" + p, "http://127.0.0.1:" + p},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"host", "-bus", "nats://127.0.0.1:1", "-cluster", "c1", "-id", "h1", "-key", keyFile,
			"-app", "hello", "-addr", tc.addr, "-upstream", tc.upstream, "-leave-grace", "0s"}, &stdout, &stderr)
		cancel()
		if err == nil || exitCode(err, io.Discard) != 1 || !strings.Contains(err.Error(), "-upstream") || !strings.Contains(err.Error(), "-addr") {
			t.Errorf("-addr %s -upstream %s: err = %v, want a refusal naming -upstream and -addr (exit 1)", tc.addr, tc.upstream, err)
		}
		if stdout.Len() > 0 {
			t.Errorf("-addr %s -upstream %s: started: %s", tc.addr, tc.upstream, stdout.String())
		}
	}
}

// A loop that cannot be seen at start (an upstream name or a port
// forward that leads back to the sidecar) is cut at its first turn: the
// sidecar marks what it forwards with a Via of its own, and answers a
// request that comes back with its mark 508 Loop Detected, problem+json,
// instead of forwarding it again for ever.
func TestHostSidecarAnswersALoop508(t *testing.T) {
	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	// A TCP forward to the sidecar: its -upstream reaches the sidecar
	// itself through another address.
	forward := testutil.NewSilentLink(t, addr)
	upstream := "http://" + strings.TrimPrefix(forward.URL(), "nats://")

	ctx, sigterm := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "loop-1", "-key", keyFile,
			"-app", "hello", "-addr", addr, "-upstream", upstream, "-leave-grace", "0s"}, &stdout, &stderr)
	}()
	defer func() {
		sigterm()
		if err := <-exited; err != nil {
			t.Error(err)
		}
	}()
	sidecarAddr(t, &stdout)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
	req.Host = "hello.localhost"
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("a looping request got no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusLoopDetected || res.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(b), `"status":508`) {
		t.Errorf("looping request: %d %q %s, want a problem+json 508", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return strings.Contains(stderr.String(), `"msg":"host: a request came back to this sidecar: -upstream leads back to it"`)
	}, "the loop was not logged")
	testutil.CheckJSONLog(t, stderr.String())
}

// The mark is this sidecar's own: a request another sidecar forwarded (a
// chain of two, a proxy that adds its own Via) goes through, and the app
// sees every Via before its own.
func TestSidecarPassesOthersVia(t *testing.T) {
	var via []string
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		via = r.Header.Values("Via")
		io.WriteString(w, "ok")
	}))
	defer app.Close()
	appURL, _ := url.Parse(app.URL)
	second := httptest.NewServer(sidecarProxy(appURL, "", slog.New(slog.DiscardHandler)))
	defer second.Close()
	secondURL, _ := url.Parse(second.URL)
	first := httptest.NewServer(sidecarProxy(secondURL, "", slog.New(slog.DiscardHandler)))
	defer first.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest("GET", first.URL+"/", nil)
	req.Header.Set("Via", "1.1 cdn")
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Fatalf("through two sidecars: %d %s", res.StatusCode, b)
	}
	all := strings.Join(via, ", ")
	parts := strings.Split(all, ", ")
	if len(parts) != 3 || parts[0] != "1.1 cdn" || !strings.HasPrefix(parts[1], "1.1 gatehouse-host-") ||
		!strings.HasPrefix(parts[2], "1.1 gatehouse-host-") || parts[1] == parts[2] {
		t.Errorf("the app saw Via %q, want the client's then one of each sidecar's", all)
	}
}

func TestSelfLoop(t *testing.T) {
	local := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.2"), net.ParseIP("fd00::2")}
	for _, tc := range []struct {
		listen, upstream string
		loop             bool
	}{
		{"127.0.0.1:8081", "http://127.0.0.1:8081", true},
		{"127.0.0.1:8081", "http://LOCALHOST.:8081", true},
		{"127.0.0.1:8081", "http://0.0.0.0:8081", true}, // dialling 0.0.0.0 reaches loopback
		{"[::1]:8081", "http://[::]:8081", true},
		{"127.0.0.1:80", "http://127.0.0.1", true},    // the scheme's port
		{"127.0.0.1:443", "https://127.0.0.1/", true}, // the scheme's port
		{"127.0.0.1:http", "http://127.0.0.1", true},
		{":8081", "http://127.0.0.2:8081", true}, // all of 127/8 is loopback
		{":8081", "http://192.0.2.2:8081", true}, // an address of this machine's
		{"[::]:8081", "http://[fd00::2]:8081", true},
		{"0.0.0.0:8081", "http://[::1]:8081", true}, // Go listens dual-stack
		{"192.0.2.2:8081", "http://192.0.2.2:8081", true},
		{"localhost:8081", "http://127.0.0.1:8081", true},
		{"web-1.internal:8081", "http://WEB-1.internal.:8081", true}, // the same name

		{"[::]:8081", "http://0.0.0.0:8081", true},               // 127.0.0.1, which the dual-stack listener takes
		{"0.0.0.0:8081", "http://[::]:8081", true},               // ::1, as above
		{":8081", "http://0.0.0.0:8081", true},                   // 127.0.0.1
		{"[::1]:8081", "http://[::]:8081", true},                 // dialling :: reaches ::1
		{"127.0.0.1:8081", "http://[::ffff:0.0.0.0]:8081", true}, // 0.0.0.0, mapped

		// Go dials :: as ::1, and then, refused there, as 0.0.0.0
		// (net's internetAddrList, go.dev/issue/18806): 127.0.0.1 too,
		// whenever the app on ::1 is not up.
		{"127.0.0.1:8081", "http://[::]:8081", true},
		{"localhost:8081", "http://[::]:8081", true},

		// Dialling 0.0.0.0 reaches 127.0.0.1 alone: a sidecar on ::1 is
		// another socket.
		{"[::1]:8081", "http://0.0.0.0:8081", false},
		{"[::1]:8081", "http://[::ffff:0.0.0.0]:8081", false},
		{"127.0.0.2:8081", "http://0.0.0.0:8081", false}, // 127.0.0.1, not all of 127/8
		{"127.0.0.1:8081", "http://127.0.0.1:8082", false},
		{"127.0.0.1:8081", "http://127.0.0.2:8081", false},
		{"127.0.0.1:8081", "http://[::1]:8081", false},
		{"localhost:8081", "http://[::1]:8081", false}, // Go listens on 127.0.0.1 alone
		{"192.0.2.2:8081", "http://127.0.0.1:8081", false},
		{":8081", "http://198.51.100.7:8081", false}, // another machine
		{":8081", "http://app.internal:8081", false}, // a name: left to the Via check
		{"127.0.0.1:0", "http://127.0.0.1:0", false},
		{"127.0.0.1:80", "https://127.0.0.1", false},
		{"nonsense", "http://127.0.0.1:8081", false},
	} {
		up, err := url.Parse(tc.upstream)
		if err != nil {
			t.Fatal(err)
		}
		if got := selfLoop(up, tc.listen, local); got != tc.loop {
			t.Errorf("selfLoop(%s, %s) = %v, want %v", tc.upstream, tc.listen, got, tc.loop)
		}
	}
}

// An -upstream with a path prefixes every request's path with it, and
// its query joins the request's, as its flag's help says.
func TestSidecarUpstreamPath(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.RequestURI())
	}))
	defer app.Close()
	up, _ := url.Parse(app.URL + "/base?v=1")
	side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.DiscardHandler)))
	defer side.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get(side.URL + "/x?q=2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "/base/x?v=1&q=2" {
		t.Errorf("the app saw %q, want /base/x?v=1&q=2", b)
	}
}

// -addr localhost:P listens on 127.0.0.1:P alone (Go binds the first
// IPv4 address the name has), so an app on [::1]:P is another socket,
// not the sidecar: the start goes on, and requests reach that app.
func TestHostLocalhostAddrTakesAnIPv6LoopbackUpstream(t *testing.T) {
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	probe.Close()
	// The sidecar binds 127.0.0.1 at the app's port later: a FreePort, as
	// a port from 0 is free for any test binary alongside to take first.
	var ln net.Listener
	var port string
	for range 20 {
		port = strconv.Itoa(testutil.FreePort(t))
		if ln, err = net.Listen("tcp", "[::1]:"+port); err == nil {
			break
		}
	}
	if ln == nil {
		t.Fatalf("no port free on both [::1] and 127.0.0.1: %v", err)
	}
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the app on ::1") })}
	go app.Serve(ln)
	defer app.Close()

	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, _ := host.GenerateKey()
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	ctx, sigterm := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- runHost(ctx, []string{"-bus", ns.ClientURL(), "-cluster", "c1", "-id", "v6-1", "-key", keyFile,
			"-app", "hello", "-addr", "localhost:" + port, "-upstream", "http://[::1]:" + port, "-leave-grace", "0s"}, &stdout, &stderr)
	}()
	// A refused start returns at once; a started one says where it serves.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stdout.String(), "serving ") && time.Now().Before(deadline); {
		select {
		case err := <-exited:
			sigterm()
			t.Fatalf("-addr localhost:%s -upstream http://[::1]:%s: the start was refused: %v", port, port, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer func() {
		sigterm()
		if err := <-exited; err != nil {
			t.Error(err)
		}
	}()
	sidecarAddr(t, &stdout)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+"/", nil)
	req.Host = "hello.localhost"
	res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "the app on ::1" {
		t.Errorf("through the sidecar: %d %q, want the app's answer", res.StatusCode, b)
	}
}

// TestLoopbackOrIsWhatADialReaches: the addresses loopbackOr gives for
// an unspecified upstream host are the loopbacks a dial of it reaches,
// through Go's dialer on this machine's sockets, when the app is not up
// on the other one. "::" reached 127.0.0.1 (Go falls back to 0.0.0.0
// when ::1 refuses) though loopbackOr said ::1 alone, and a sidecar on
// 127.0.0.1 with -upstream http://[::]:P started, forwarding to itself
// whenever nothing listened on [::1]:P.
func TestLoopbackOrIsWhatADialReaches(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "::", "::ffff:0.0.0.0"} {
		for _, lo := range []string{"127.0.0.1", "::1"} {
			ln, err := net.Listen("tcp", net.JoinHostPort(lo, "0"))
			if err != nil {
				t.Logf("no %s: %v", lo, err)
				continue
			}
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			other := map[string]string{"127.0.0.1": "::1", "::1": "127.0.0.1"}[lo]
			// The other loopback's port is free (a fallback lands there
			// otherwise, or reaches nothing): else the case says nothing.
			if probe, err := net.Listen("tcp", net.JoinHostPort(other, port)); err == nil {
				probe.Close()
			} else if !strings.Contains(err.Error(), "cannot assign") {
				ln.Close()
				t.Logf("%s port %s is taken: %v", other, port, err)
				continue
			}
			accepted := make(chan struct{}, 1)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if c, err := ln.Accept(); err == nil {
					accepted <- struct{}{}
					c.Close()
				}
			}()
			d := net.Dialer{Timeout: 2 * time.Second}
			c, err := d.Dial("tcp", net.JoinHostPort(host, port))
			reached := false
			if err == nil {
				c.Close()
				select {
				case <-accepted:
					reached = true
				case <-time.After(2 * time.Second):
					t.Errorf("dial %s:%s connected, but the listener on %s accepted nothing", host, port, lo)
				}
			}
			ln.Close()
			<-done
			said := slices.ContainsFunc(loopbackOr(host), net.ParseIP(lo).Equal)
			if reached != said {
				t.Errorf("a dial of [%s]:P reached %s: %v; loopbackOr(%q) = %v", host, lo, reached, host, loopbackOr(host))
			}
		}
	}
}
