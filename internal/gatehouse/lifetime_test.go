package gatehouse

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// leakOpts are goleak's options for a check within a test: the goroutines
// running before it (other tests' helpers), and certmagic's two that are
// not the gateway's to join (testutil.VerifyNoLeaks).
func leakOpts() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
	}
}

// verifyNone is goleak.VerifyNone given longer: the embedded NATS
// server's goroutines that end on a signal rather than before Shutdown
// returns (its access-time ticker, ats, once the last file store
// unregisters; a file store's flush loop, after it closes its done
// channel) were once seen still running past goleak's ~0.5 s of retries
// on a loaded machine. A goroutine that never ends still fails the test,
// 5 s later.
func verifyNone(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); goleak.Find(opts...) != nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	goleak.VerifyNone(t, opts...)
}

// assertReleased binds every address a stopped gateway was given, so a
// socket it left open fails the test by its key.
func assertReleased(t *testing.T, cfg config.Config) {
	t.Helper()
	tcp := map[string]string{
		"management.addr": cfg.Management.Addr, "http.addr": cfg.HTTP.Addr,
		"https.addr": cfg.HTTPS.Addr, "dns.addr": cfg.DNS.Addr, "bus.listen": cfg.Bus.Listen,
	}
	for key, addr := range tcp {
		if addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s %s still bound over TCP: %v", key, addr, err)
			continue
		}
		ln.Close()
	}
	if cfg.DNS.Addr != "" {
		pc, err := net.ListenPacket("udp", cfg.DNS.Addr)
		if err != nil {
			t.Errorf("dns.addr %s still bound over UDP: %v", cfg.DNS.Addr, err)
		} else {
			pc.Close()
		}
	}
}

// fixedConfig is testConfig with every listener on a port of its own
// (not 0), so that it can be bound again after the gateway stopped.
func fixedConfig(t *testing.T) config.Config {
	cfg := testConfig(t)
	cfg.Management.Addr, cfg.HTTP.Addr, cfg.HTTPS.Addr = testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	cfg.DNS.Addr, cfg.Bus.Listen = testutil.FreeUDPAddr(t), testutil.FreeAddr(t)
	return cfg
}

// TestFailedStartLeavesNothing: a start that fails part-way, at each
// listener in turn, says why and leaves nothing behind: no goroutine, no
// socket (each address binds again), and no lock on data_dir (a gateway
// started next on the same data_dir and addresses comes up).
func TestFailedStartLeavesNothing(t *testing.T) {
	for _, key := range []string{"management.addr", "http.addr", "https.addr", "dns.addr udp", "dns.addr tcp", "bus.listen"} {
		t.Run(key, func(t *testing.T) {
			cfg := fixedConfig(t)
			var busy string
			switch key {
			case "management.addr":
				busy = cfg.Management.Addr
			case "http.addr":
				busy = cfg.HTTP.Addr
			case "https.addr":
				busy = cfg.HTTPS.Addr
			case "dns.addr udp", "dns.addr tcp":
				busy = cfg.DNS.Addr
			case "bus.listen":
				busy = cfg.Bus.Listen
			}
			var release func()
			if key == "dns.addr udp" {
				pc, err := net.ListenPacket("udp", busy)
				if err != nil {
					t.Fatal(err)
				}
				release = func() { pc.Close() }
			} else {
				ln, err := net.Listen("tcp", busy)
				if err != nil {
					t.Fatal(err)
				}
				release = func() { ln.Close() }
			}
			opts := leakOpts()
			err := runToError(t, cfg)
			release()
			if err == nil {
				t.Fatal("Run = nil with a busy listener")
			}
			verifyNone(t, opts...)
			assertReleased(t, cfg)
			r := start(t, cfg)
			if err := r.stop(t); err != nil {
				t.Fatalf("the start after: %v", err)
			}
			verifyNone(t, opts...)
			assertReleased(t, cfg)
		})
	}
}

// TestStopWhileWaitingForExternalBus: a gateway told to stop while it
// still waits for an external bus that is down returns nil promptly, and
// leaves no goroutine and no socket behind.
func TestStopWhileWaitingForExternalBus(t *testing.T) {
	cfg := fixedConfig(t)
	cfg.Bus.Listen = ""
	cfg.Bus.URL = []string{"nats://" + testutil.RefusedAddr(t)} // nothing listens
	stopAfter(t, cfg, 500*time.Millisecond)                     // the listeners are up, the bus dialled
}

// TestStopAtEachPhaseOfStart: a stop that comes at any point of the
// start (the listeners binding, the embedded bus starting, the store's
// first load, the parts after it) ends Run promptly with nil, and leaves
// no goroutine, no socket and no lock on data_dir behind.
func TestStopAtEachPhaseOfStart(t *testing.T) {
	for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond,
		50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) { stopAfter(t, fixedConfig(t), after) })
	}
}

// stopAfter runs a gateway on cfg, stops it after the given time, and
// checks that Run returns nil promptly and leaves no goroutine, socket or
// data_dir lock behind.
func stopAfter(t *testing.T, cfg config.Config, after time.Duration) {
	t.Helper()
	opts := leakOpts()
	g, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	time.Sleep(after)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil for a stop", err)
		}
	case <-time.After(cfg.DrainTimeout + 5*time.Second):
		t.Fatal("Run did not return after the stop")
	}
	verifyNone(t, opts...)
	assertReleased(t, cfg)
}

// upstreamReadLoops counts the goroutines of upstream client connections
// (net/http's HTTP/1 and HTTP/2 transports) in this process.
func upstreamReadLoops() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "persistConn).readLoop") || strings.Contains(g, "ClientConn).readLoop") {
			n++
		}
	}
	return n
}

// TestDrainClosesUpstreamConnections: a request to a host that finishes
// while the gateway drains leaves no upstream connection open once Run
// has returned. The gateway let go of its idle upstream connections when
// the drain began, so the connection such a request put back afterwards
// stayed open, with its goroutines, for the transport's idle timeout
// (90 s) after the gateway had stopped.
func TestDrainClosesUpstreamConnections(t *testing.T) {
	for _, scheme := range []string{host.SchemeH2C, "https"} {
		t.Run(scheme, func(t *testing.T) {
			before := upstreamReadLoops()
			r := start(t, testConfig(t))
			if code, body := r.control(t, "PUT", "/api/v3/apps/slow", `{}`); code != 200 {
				t.Fatalf("put: %d %s", code, body)
			}
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if scheme == "https" {
				ln = tls.NewListener(ln, selfSigned(t))
			}
			runHost(t, r, "one", "h1", "slow", scheme, ln, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path == "/slow" {
					arrived <- struct{}{}
					<-release
				}
				io.WriteString(w, "done")
			}))
			testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("slow")) == 1 }, "host not routable")

			got := make(chan string, 1)
			go func() {
				req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().HTTP+"/slow", nil)
				req.Host = "slow.test.local"
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					got <- err.Error()
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- fmt.Sprint(resp.StatusCode, " ", string(b))
			}()
			<-arrived
			r.cancel()
			time.Sleep(300 * time.Millisecond) // the drain is under way
			close(release)
			if s := <-got; s != "200 done" {
				t.Fatalf("the request in flight: %s", s)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			http.DefaultClient.CloseIdleConnections()
			deadline := time.Now().Add(2 * time.Second)
			for upstreamReadLoops() > before && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := upstreamReadLoops() - before; n > 0 {
				t.Fatalf("%d upstream connection(s) still open after Run returned", n)
			}
		})
	}
}

// selfSigned is a TLS server config with httptest's self-signed
// certificate, as an https host commonly serves (the gateway checks the
// host's key by its challenge, not its chain).
func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	cfg := &tls.Config{Certificates: srv.TLS.Certificates}
	srv.Close()
	return cfg
}

// TestStopWithHeldConnections: a stop while a host hangs on a request
// (over each upstream scheme) and a client holds a DNS TCP connection
// open with half a query returns within drain_timeout and a little, and
// leaves no upstream connection behind.
func TestStopWithHeldConnections(t *testing.T) {
	for _, scheme := range []string{"http", host.SchemeH2C, "https"} {
		t.Run(scheme, func(t *testing.T) {
			before := upstreamReadLoops()
			cfg := testConfig(t)
			cfg.DrainTimeout = time.Second
			r := start(t, cfg)
			if code, body := r.control(t, "PUT", "/api/v3/apps/hung", `{}`); code != 200 {
				t.Fatalf("put: %d %s", code, body)
			}
			arrived := make(chan struct{}, 1)
			hang := make(chan struct{})
			t.Cleanup(func() { close(hang) })
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if scheme == "https" {
				ln = tls.NewListener(ln, selfSigned(t))
			}
			runHost(t, r, "one", "h1", "hung", scheme, ln, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path == "/hang" {
					arrived <- struct{}{}
					select {
					case <-hang:
					case <-req.Context().Done():
					}
				}
			}))
			testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hung")) == 1 }, "host not routable")

			dc, err := net.Dial("tcp", r.g.Addrs().DNS)
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			if _, err := dc.Write([]byte{0, 40, 0xab}); err != nil { // a length, then 1 byte of 40
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", r.g.Addrs().HTTP)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET /hang HTTP/1.1\r\nHost: hung.test.local\r\n\r\n")
			<-arrived
			began := time.Now()
			r.cancel()
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(began); took > cfg.DrainTimeout+3*time.Second {
				t.Errorf("Run took %v to return after the stop, drain_timeout %v", took, cfg.DrainTimeout)
			}
			deadline := time.Now().Add(2 * time.Second)
			for upstreamReadLoops() > before && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := upstreamReadLoops() - before; n > 0 {
				t.Fatalf("%d upstream connection(s) still open after Run returned", n)
			}
		})
	}
}

// TestExternalBusWithoutJetStream: an external bus that answers but has
// no JetStream stops the start with an error that names bus.url and says
// what it lacks, not nats.go's bare "no responders available for
// request", and leaves no goroutine and no socket behind.
func TestExternalBusWithoutJetStream(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	cfg := fixedConfig(t)
	cfg.Bus.Listen = ""
	cfg.Bus.URL = []string{ns.ClientURL()}
	opts := leakOpts()
	began := time.Now()
	err = runToError(t, cfg)
	t.Logf("Run = %v after %v", err, time.Since(began))
	if err == nil || !strings.HasPrefix(err.Error(), "config: bus.url: ") || !strings.Contains(err.Error(), "has no JetStream") {
		t.Fatalf("Run = %v, want an error beginning %q that says the server has no JetStream", err, "config: bus.url: ")
	}
	verifyNone(t, opts...)
	assertReleased(t, cfg)
}

// TestStopDuringACMEOrder: a stop while the wildcard's first order is in
// flight (Pebble validating DNS-01 against the gateway's DNS server)
// returns promptly and leaves no goroutine behind: the order, its lock's
// refresher and the challenge's DNS answer all end with the gateway.
func TestStopDuringACMEOrder(t *testing.T) {
	for _, after := range []time.Duration{0, 300 * time.Millisecond, time.Second} {
		t.Run(after.String(), func(t *testing.T) {
			dnsAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
			p := tlsmgrtest.StartWithDNS(t, testutil.FreePort(t), testutil.FreePort(t), dnsAddr)
			opts := leakOpts() // Pebble's own goroutines are the test's
			cfg := testConfig(t)
			cfg.DNS.Addr = dnsAddr
			cfg.TLS.ACME.Directory, cfg.TLS.ACME.CARoot, cfg.TLS.ACME.Email = p.Directory, p.CARoot, "ops@test.local"
			r := start(t, cfg)
			time.Sleep(after)
			began := time.Now()
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(began); took > 10*time.Second {
				t.Errorf("Run took %v to return after the stop", took)
			}
			// certmagic's ACME client keeps its connection to the CA in a
			// transport of its own with no idle timeout and no way to
			// close it (certmagic.NewACMEIssuer): it ends when the CA
			// closes it. The gateway's own connections are checked by
			// TestDrainClosesUpstreamConnections.
			verifyNone(t, append(opts, goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"))...)
		})
	}
}
