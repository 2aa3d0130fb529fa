package gatehouse

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDrainDelay: with drain_delay set, a stop (what SIGTERM does) turns
// /readyz 503 "draining" at once, while the listeners go on taking new
// connections and serving them, over HTTP/1.1 (plain and TLS) and
// HTTP/2, for the delay: a load balancer that has yet to see the 503
// still sends them. Their HTTP/1.1 answers say Connection: close and the
// connection closes, so that the client's next request goes through the
// load balancer again. Keep-alive connections idle since before the stop
// are not closed under a request the load balancer may be sending on
// them: their next answer is served and ends them (GOAWAY after it on
// HTTP/2, by either server). An upgrade's 101 says Connection: Upgrade alone.
// Only after the delay does the drain begin: the
// listener refuses, and a request in flight since before the stop still
// gets its answer. Before drain_delay, the listener refused at once. Run
// once per fast_path setting: the lane and net/http serve HTTP/1.1 then.
func TestDrainDelay(t *testing.T) {
	const delay = time.Second
	for _, impl := range h2Impls {
		t.Run(impl.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Listeners.FastPath = impl.fast
			cfg.DrainDelay = delay
			r, logs := startLogging(t, cfg)
			if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
				t.Fatalf("put: %d %s", code, body)
			}
			arrived, release := make(chan struct{}), make(chan struct{})
			startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path == "/wait" {
					close(arrived)
					select {
					case <-release:
					case <-time.After(20 * time.Second):
					}
					io.WriteString(w, "waited")
					return
				}
				if req.URL.Path == "/ws" {
					upgradeEcho.ServeHTTP(w, req)
					return
				}
				io.WriteString(w, "hello")
			}))
			testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")
			addrs := r.g.Addrs()

			inflight := dialHTTP(t, addrs.HTTP)
			io.WriteString(inflight, "GET /wait HTTP/1.1\r\nHost: hello.test.local\r\n\r\n")
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("the in-flight request never reached the host")
			}

			// Keep-alive connections opened before the stop and idle when
			// it comes, as a load balancer's pool is: each served one
			// answer that kept it open.
			idle := dialHTTP(t, addrs.HTTP)
			checkKept(t, "plain HTTP/1.1 before the stop", idle)
			idleTLS := dialTLS11(t, addrs.HTTPS)
			checkKept(t, "HTTP/1.1 over TLS before the stop", idleTLS)
			idleH2 := dialRawH2(t, addrs.HTTPS, "hello.test.local")
			idleH2.open(t, 1, "GET", "/", true)
			idleH2.until(t, "the HTTP/2 answer before the stop", func() bool { return idleH2.ended[1] || idleH2.reset[1] })

			stopped := time.Now()
			r.cancel()
			testutil.WaitFor(t, delay/2, func() bool {
				code, status := readyz(t, addrs.Management)
				return code == 503 && status == "draining"
			}, "/readyz not 503 draining after the stop")

			// New connections, served in full within the delay.
			checkClosing(t, "plain HTTP/1.1", getOnce(t, dialHTTP(t, addrs.HTTP), "plain"))
			checkClosing(t, "HTTP/1.1 over TLS", getOnce(t, dialTLS11(t, addrs.HTTPS), "tls"))
			h2 := &http.Transport{Protocols: new(http.Protocols), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
			h2.Protocols.SetHTTP2(true)
			defer h2.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addrs.HTTPS+"/", nil)
			req.Host = "hello.test.local"
			if hres, err := h2.RoundTrip(req); err != nil {
				t.Errorf("HTTP/2 on a new connection during the delay: %v", err)
			} else {
				b, _ := io.ReadAll(hres.Body)
				hres.Body.Close()
				if hres.StatusCode != 200 || hres.ProtoMajor != 2 || string(b) != "hello" {
					t.Errorf("HTTP/2 on a new connection during the delay: %s %d %q, want HTTP/2 200 hello", hres.Proto, hres.StatusCode, b)
				}
			}
			// An upgrade (a WebSocket) is no keep-alive: it is switched
			// and carries its bytes as it would without a delay.
			ws := dialHTTP(t, addrs.HTTP)
			io.WriteString(ws, "GET /ws HTTP/1.1\r\nHost: hello.test.local\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			wsr := bufio.NewReader(ws)
			if res, err := http.ReadResponse(wsr, nil); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
				t.Errorf("an upgrade during the delay: %v %v, want 101", res, err)
			} else {
				// Connection: close beside Upgrade would say the
				// switched connection ends with this answer.
				if res.Close || res.Header.Get("Connection") != "Upgrade" {
					t.Errorf("the 101 during the delay: Connection %q (close %v), want Upgrade alone", res.Header["Connection"], res.Close)
				}
				io.WriteString(ws, "during\n")
				if line, err := wsr.ReadString('\n'); line != "echo:during\n" {
					t.Errorf("an upgraded connection during the delay echoed %q, %v", line, err)
				}
			}
			ws.Close()
			// The idle connections were left open, not closed under a
			// request the load balancer may be sending on them as the
			// stop comes: their next answer is served, and ends them.
			checkClosing(t, "plain HTTP/1.1 idle since before the stop", getOnce(t, idle, "idle plain"))
			checkClosing(t, "HTTP/1.1 over TLS idle since before the stop", getOnce(t, idleTLS, "idle tls"))
			idleH2.open(t, 3, "GET", "/", true)
			idleH2.until(t, "an HTTP/2 answer during the delay", func() bool { return idleH2.ended[3] || idleH2.reset[3] })
			if idleH2.status[3] != "200" || string(idleH2.body[3]) != "hello" {
				t.Errorf("HTTP/2 idle since before the stop, during the delay: %q %q, want 200 hello", idleH2.status[3], idleH2.body[3])
			}
			// Either HTTP/2 server ends the connection after it: GOAWAY,
			// the last one naming the stream answered (gatehouse's own
			// names 2^31-1 first, refusing nothing in flight).
			idleH2.until(t, "GOAWAY naming stream 3 after an HTTP/2 answer in the delay", func() bool { return idleH2.goaway && idleH2.goLast == 3 })
			if idleH2.goCode != http2.ErrCodeNo || idleH2.reset[3] {
				t.Errorf("HTTP/2 idle since before the stop, during the delay: GOAWAY %v, stream reset %v; want NO_ERROR and none", idleH2.goCode, idleH2.reset[3])
			}
			t.Logf("the checks of the delay took %s", time.Since(stopped))
			if took := time.Since(stopped); took >= delay {
				t.Fatalf("the checks of the delay took %s, over the delay itself (%s): raise it", took, delay)
			}

			// Then the drain: the listener refuses, the in-flight request is answered.
			var refusedAt time.Time
			testutil.WaitFor(t, 10*time.Second, func() bool {
				c, err := net.DialTimeout("tcp", addrs.HTTP, time.Second)
				if err == nil {
					c.Close()
					return false
				}
				// Reset: the dial reached the accept queue as the
				// listener closed.
				if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("dial after the delay: %v, want connection refused", err)
				}
				refusedAt = time.Now()
				return true
			}, "the http listener still accepts after the delay")
			if waited := refusedAt.Sub(stopped); waited < delay {
				t.Errorf("the listener refused %s after the stop, before drain_delay (%s)", waited, delay)
			}
			close(release)
			res, err := http.ReadResponse(bufio.NewReader(inflight), nil)
			if err != nil {
				t.Fatalf("the in-flight request's answer: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || string(b) != "waited" {
				t.Errorf("the in-flight request: %d %q, want 200 waited", res.StatusCode, b)
			}
			if err := r.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}

			var delayed, draining map[string]any
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) != nil {
					continue
				}
				msg, _ := m["msg"].(string)
				switch {
				case strings.HasPrefix(msg, "edge: drain delayed:"):
					delayed = m
				case strings.HasPrefix(msg, "edge: draining:"):
					if delayed == nil {
						t.Errorf("the drain began before its delay was logged")
					}
					draining = m
				}
			}
			if delayed == nil || delayed["drain_delay"] != float64(delay) || delayed["open_connections"] != float64(4) {
				t.Errorf("the delay's line: %v; want drain_delay %v and 4 open connections (the request in flight, three idle)", delayed, delay)
			}
			if draining == nil {
				t.Errorf("no drain logged after the delay")
			}
		})
	}
}

// TestDrainDelayOffRefusesAtOnce: drain_delay 0, the default, is the drain
// as it was: the listener refuses at once and nothing says a delay.
func TestDrainDelayOffRefusesAtOnce(t *testing.T) {
	cfg := testConfig(t)
	r, logs := startLogging(t, cfg)
	addr := r.g.Addrs().HTTP
	r.cancel()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}, "the http listener still accepts after the stop")
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(logs.String(), "drain delayed") {
		t.Errorf("drain_delay 0 logged a delay:\n%s", logs)
	}
}

// dialTLS11 is a TLS connection to the https listener for hello, HTTP/1.1
// by ALPN.
func dialTLS11(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{ServerName: "hello.test.local", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// checkKept sends GET / for hello on c and wants 200 hello with c kept
// open for the next request.
func checkKept(t *testing.T, what string, c net.Conn) {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test.local\r\n\r\n"); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	// One read buffer per answer: the connection is idle after it.
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 || string(b) != "hello" || res.Close {
		t.Fatalf("%s: %d %q close %v, %v; want 200 hello, kept open", what, res.StatusCode, b, res.Close, err)
	}
}

func dialHTTP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// closingAnswer is an HTTP/1.1 answer read off a connection: saidClose,
// whether it said Connection: close; ended, whether the connection ended
// (EOF) after it.
type closingAnswer struct {
	status           int
	body             string
	saidClose, ended bool
}

// getOnce sends GET / for hello on c, reads the answer, then reads on
// until c ends or 5 s pass.
func getOnce(t *testing.T, c net.Conn, what string) closingAnswer {
	t.Helper()
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: hello.test.local\r\n\r\n"); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: the answer during the delay: %v", what, err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: body: %v", what, err)
	}
	// ReadResponse takes a Connection: close field out of the header into Close.
	a := closingAnswer{status: res.StatusCode, body: string(b), saidClose: res.Close}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := br.Read(make([]byte, 1))
	a.ended = n == 0 && errors.Is(err, io.EOF)
	return a
}

func checkClosing(t *testing.T, what string, a closingAnswer) {
	t.Helper()
	if a.status != 200 || a.body != "hello" {
		t.Errorf("%s during the delay: %d %q, want 200 hello", what, a.status, a.body)
	}
	if !a.saidClose {
		t.Errorf("%s during the delay: no Connection: close", what)
	}
	if !a.ended {
		t.Errorf("%s during the delay: the connection stayed open after the answer", what)
	}
}

func readyz(t *testing.T, mgmt string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + mgmt + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer res.Body.Close()
	var v struct{ Status string }
	_ = json.NewDecoder(res.Body).Decode(&v)
	return res.StatusCode, v.Status
}

// TestDrainDelayStopBeforeReady: a stop while the gateway still starts
// (its bus unreachable, /readyz 503 "starting") is not delayed: no load
// balancer was sent here, so there is nothing to wait out, and Run
// returns at once rather than drain_delay later.
func TestDrainDelayStopBeforeReady(t *testing.T) {
	cfg := testConfig(t)
	cfg.DrainDelay = 10 * time.Minute
	cfg.Management.Addr = testutil.FreeAddr(t)
	cfg.Bus.URL = []string{"nats://" + testutil.RefusedAddr(t)} // nothing listens
	logs := new(testutil.SyncBuffer)
	g, err := New(cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		res, err := http.Get("http://" + cfg.Management.Addr + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable
	}, "/readyz never answered while starting")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after a stop while starting: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still runs 10s after a stop while starting, with drain_delay 10m")
	}
	if strings.Contains(logs.String(), "drain delayed") {
		t.Errorf("a stop while starting delayed the drain:\n%s", logs)
	}
}
