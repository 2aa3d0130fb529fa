package bus_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// logBuf collects a text log for a test to read while it is written.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{&l.mu, &l.buf}, nil))
}

// lines returns the log lines that contain sub.
func (l *logBuf) lines(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

// linesAfter returns the log lines that contain sub and come after the
// first line that contains mark (none before that line is written).
func (l *logBuf) linesAfter(mark, sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, rest, ok := strings.Cut(l.buf.String(), mark)
	if !ok {
		return nil
	}
	var out []string
	for _, line := range strings.Split(rest, "\n")[1:] { // [0] is the mark's own line
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// userServer starts a NATS server on addr ("127.0.0.1:0" for any port)
// that accepts the user gw with password. A test that shuts it down and
// starts it again at its address gives it a testutil.FreeAddr: a port
// from 0 is free for any other test binary to take while it is down, and
// the restart then fails, or the reconnects reach that binary's listener.
func userServer(t *testing.T, addr, password string) *server.Server {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	if p == 0 {
		p = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{Host: host, Port: p, NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "gw", Password: password}}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return ns
}

// reconnectFailed is what the bus logs for a failed reconnect attempt.
const reconnectFailed = `msg="nats reconnect failed"`

// Once started, the bus says why its reconnect attempts fail (here: the
// server is gone, the dial refused), not only "nats disconnected"; a
// reconnect loop trying four times a second logs that once per 10 s, and
// the count of the attempts it left out is told when it reconnects.
func TestReconnectFailuresSayWhy(t *testing.T) {
	t.Parallel()
	ns := userServer(t, testutil.FreeAddr(t), "pw-0123456789")
	addr := ns.Addr().String()
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:pw-0123456789@" + addr, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(logs.lines(reconnectFailed)) > 0 }, "no reconnect failure logged:\n"+logs.String())
	time.Sleep(3 * time.Second) // a dozen more attempts
	got := logs.lines(reconnectFailed)
	if len(got) != 1 || !strings.Contains(got[0], "connection refused") {
		t.Fatalf("want one line saying the dial was refused, got:\n%s", strings.Join(got, "\n"))
	}

	userServer(t, addr, "pw-0123456789")
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(logs.lines(`msg="nats reconnected"`)) > 0 }, "not reconnected")
	m := regexp.MustCompile(`failed_attempts=(\d+)`).FindStringSubmatch(logs.lines(`msg="nats reconnected"`)[0])
	if m == nil {
		t.Fatalf("the reconnect does not count the failed attempts:\n%s", logs.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 5 {
		t.Fatalf("failed_attempts=%d after 3 s of attempts every 250 ms:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "pw-0123456789") {
		t.Fatalf("the credential was logged:\n%s", logs.String())
	}
}

// A server that refuses the gateway's credential after a rotation does
// not end the bus: nats.go gives up after the same auth error twice and
// closes the connection for good, so the gateway never reconnected, even
// once the operator put a credential it holds back. It keeps trying, says
// why once, and reconnects when the server takes the credential again.
func TestReconnectSurvivesRefusedCredential(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "gw", Password: "old-0123456789"}}}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:old-0123456789@" + ns.Addr().String(), Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}

	rotated := opts.Clone()
	rotated.Users = []*server.User{{Username: "gw", Password: "new-0123456789"}}
	if err := ns.ReloadOptions(rotated); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return !b.Conn().IsConnected() }, "the server kept the old credential")
	time.Sleep(3 * time.Second) // a dozen refused attempts
	if b.Conn().IsClosed() {
		t.Fatalf("the connection gave up after a refused credential:\n%s", logs.String())
	}
	got := logs.lines(reconnectFailed)
	if len(got) != 1 || !strings.Contains(strings.ToLower(got[0]), "authorization violation") {
		t.Fatalf("want one line with the server's refusal, got:\n%s", logs.String())
	}

	if err := ns.ReloadOptions(opts.Clone()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, b.Conn().IsConnected, "not reconnected once the credential was taken again:\n"+logs.String())
	if strings.Contains(logs.String(), "0123456789") {
		t.Fatalf("the credential was logged:\n%s", logs.String())
	}
}

// acceptAndClose listens on addr and closes every connection it accepts,
// as a load balancer with no server behind it does, until t ends.
func acceptAndClose(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

// A start against an address that accepts and closes at once (a load
// balancer with no server behind it) fails no dial, so nats.go reports
// nothing: the start says every so often that it is still waiting, and
// why, instead of waiting in silence with readiness at 503.
func TestStartWaitingSaysSo(t *testing.T) {
	t.Parallel()
	ln := acceptAndClose(t, "127.0.0.1:0")
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:pw-0123456789@" + ln.Addr().String(), Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetWaitLogEvery(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if err := b.Start(ctx); err == nil {
		t.Fatal("started against an address that closes every connection")
	}
	got := logs.lines(`msg="waiting for the bus"`)
	if len(got) < 3 || !strings.Contains(got[0], "no NATS handshake completed") {
		t.Fatalf("want a line every 200 ms saying the start waits, got:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "pw-0123456789") {
		t.Fatalf("the credential was logged:\n%s", logs.String())
	}
}

// A running gateway whose bus address comes back as one that accepts and
// closes (a load balancer whose servers are gone) fails no dial, so
// nats.go reports nothing after "nats disconnected": the bus says every so
// often that it is still down, for how long and why, and stops saying so
// once it is back.
func TestStillDisconnectedSaysSo(t *testing.T) {
	t.Parallel()
	ns := userServer(t, testutil.FreeAddr(t), "pw-0123456789")
	addr := ns.Addr().String()
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:pw-0123456789@" + addr, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetWaitLogEvery(200 * time.Millisecond)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	const still = `msg="the bus is still disconnected"`
	time.Sleep(time.Second)
	if got := logs.lines(still); len(got) != 0 {
		t.Fatalf("a connected bus says it is disconnected:\n%s", logs.String())
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	ln := acceptAndClose(t, addr)
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(logs.lines(still)) >= 3 }, "the bus never said it is still down:\n"+logs.String())
	t.Log(logs.lines(still)[0])
	if got := logs.lines(still)[0]; !strings.Contains(got, "for=") || !strings.Contains(got, "last_error=") {
		t.Fatalf("the line says neither for how long nor why: %s", got)
	}

	ln.Close()
	userServer(t, addr, "pw-0123456789")
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(logs.lines(`msg="nats reconnected"`)) > 0 }, "not reconnected")
	time.Sleep(200 * time.Millisecond)
	n := len(logs.lines(still))
	time.Sleep(time.Second)
	if got := len(logs.lines(still)); got != n {
		t.Fatalf("still says disconnected after the reconnect:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "pw-0123456789") {
		t.Fatalf("the credential was logged:\n%s", logs.String())
	}
}

// A start against an address where nothing listens says why it waits:
// the dial was refused. nats.go keeps no error for a failed dial
// (LastError is nil), so the line used to guess "no NATS handshake
// completed (an address that accepts and closes…)".
func TestStartWaitingSaysRefused(t *testing.T) {
	t.Parallel()
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://" + testutil.FreeAddr(t), Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetWaitLogEvery(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if err := b.Start(ctx); err == nil {
		t.Fatal("started with nothing listening")
	}
	got := logs.lines(`msg="waiting for the bus"`)
	if len(got) < 3 {
		t.Fatalf("want a line every 200 ms saying the start waits, got:\n%s", logs.String())
	}
	// The first may be nats.go's word for the first round of dials, "no
	// servers available for connection"; none may guess at a handshake.
	for i, l := range got {
		if strings.Contains(l, "no NATS handshake") || i > 0 && !strings.Contains(l, "connection refused") {
			t.Fatalf("want the refused dial as last_error: %s", l)
		}
	}
	if b.Connected() {
		t.Error("Connected after a failed start")
	}
}

// A started bus whose server is gone, nothing listening at its address,
// says it is still down because the dial is refused, not that no
// handshake completed. Connected follows the connection.
func TestStillDisconnectedSaysRefused(t *testing.T) {
	t.Parallel()
	ns := userServer(t, testutil.FreeAddr(t), "pw-0123456789")
	addr := ns.Addr().String()
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:pw-0123456789@" + addr, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetWaitLogEvery(200 * time.Millisecond)
	if b.Connected() {
		t.Error("Connected before Start")
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !b.Connected() {
		t.Error("not Connected after Start")
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	// The reconnect dials ReconnectWait (and jitter) after the loss, and
	// a line may come before that on this short period, when no dial has
	// failed yet (a loaded machine's slow shutdown shifts the two): the
	// lines that must name the refusal are those after the first.
	const still = `msg="the bus is still disconnected"`
	const refused = `msg="nats reconnect failed"`
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(logs.linesAfter(refused, still)) >= 2 }, "the bus never said it is still down after a refused dial:\n"+logs.String())
	for _, l := range logs.linesAfter(refused, still) {
		if !strings.Contains(l, "connection refused") || strings.Contains(l, "no NATS handshake") {
			t.Fatalf("want the refused dial as last_error: %s", l)
		}
	}
	if b.Connected() {
		t.Error("Connected with the server gone")
	}
	userServer(t, addr, "pw-0123456789")
	testutil.WaitFor(t, 10*time.Second, b.Connected, "not Connected after the server came back")
	b.Close()
	if b.Connected() {
		t.Error("Connected after Close")
	}
}

// One asynchronous error repeating (here a slow consumer; while a bus is
// down, "consumer not active" every few seconds per consumer) is logged
// once per period per subject, and the next line counts those left out.
func TestAsyncErrorsThrottled(t *testing.T) {
	t.Parallel()
	ns := userServer(t, "127.0.0.1:0", "pw-0123456789")
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:pw-0123456789@" + ns.Addr().String(), Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetAsyncLogEvery(time.Second)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	nc := b.Conn()
	for _, subj := range []string{"slow.a", "slow.b"} {
		sub, err := nc.Subscribe(subj, func(*nats.Msg) { time.Sleep(time.Millisecond) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := sub.SetPendingLimits(1, -1); err != nil {
			t.Fatal(err)
		}
	}
	flood := func() {
		for range 2000 {
			_ = nc.Publish("slow.a", []byte("x"))
			_ = nc.Publish("slow.b", []byte("x"))
		}
		_ = nc.Flush()
	}
	asyncLines := func(subj string) []string {
		var out []string
		for _, l := range logs.lines(`msg="nats async error"`) {
			if strings.Contains(l, " subject="+subj+" ") {
				out = append(out, l)
			}
		}
		return out
	}
	began := time.Now()
	flood()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(asyncLines("slow.a")) > 0 && len(asyncLines("slow.b")) > 0 },
		"no line at once:\n"+logs.String())
	time.Sleep(300 * time.Millisecond) // more lines, if the bound let them through
	// On a loaded machine the flood's errors go on past the period (they
	// did for over a second under -race): one line per period begun since the
	// flood, where an unbounded log writes one per error, a dozen here.
	allowed := 1 + int(time.Since(began)/time.Second)
	for _, subj := range []string{"slow.a", "slow.b"} {
		if got := asyncLines(subj); len(got) > allowed || !strings.Contains(got[0], "not_logged=0") {
			t.Fatalf("%s: want one line at once and at most %d in all, got:\n%s", subj, allowed, logs.String())
		}
	}
	time.Sleep(time.Second)
	flood()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(asyncLines("slow.a")) >= 2 }, "no second line after the period:\n"+logs.String())
	m := regexp.MustCompile(`not_logged=(\d+)`).FindStringSubmatch(asyncLines("slow.a")[1])
	if n, _ := strconv.Atoi(m[1]); n < 1 {
		t.Fatalf("the second line does not count those left out:\n%s", logs.String())
	}
}

// A bus whose certificate is signed by a CA the process does not trust (a
// private CA, its tls:// URL right) fails the same way at every attempt:
// the start error, the failed attempt and the waiting line each say that
// the certificate is not trusted and how to trust the CA, since
// gatehouse has no setting of its own for it.
func TestStartUntrustedCASaysHow(t *testing.T) {
	t.Parallel()
	cert, _ := testutil.PrivateCA(t, "127.0.0.1")
	ns := testutil.StartBusTLS(t, cert)
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "tls://" + ns.Addr().String(), Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetWaitLogEvery(200 * time.Millisecond)
	// The start gives up once both lines are out (each of its attempts
	// fails alike), or after 10 s: a fixed 1 s left a loaded machine's
	// slow TLS handshakes no time to log either.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if len(logs.lines(reconnectFailed)) > 0 && len(logs.lines(`msg="waiting for the bus"`)) > 0 {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	err = b.Start(ctx)
	if err == nil {
		t.Fatal("started against a bus whose certificate is not trusted")
	}
	const how = "SSL_CERT_FILE set to the CA's PEM file"
	for what, said := range map[string][]string{
		"start error":         {err.Error()},
		"failed attempt":      logs.lines(reconnectFailed),
		"waiting for the bus": logs.lines(`msg="waiting for the bus"`),
	} {
		if len(said) == 0 {
			t.Errorf("no %s:\n%s", what, logs.String())
		}
		for _, s := range said {
			if !strings.Contains(s, "certificate signed by unknown authority") || !strings.Contains(s, how) {
				t.Errorf("%s does not say the certificate is not trusted and how to trust it: %s", what, s)
			}
		}
	}
}

// The first failed attempt of a start against an unreachable bus names
// the URLs it tries, their credential hidden, and the dial's own error:
// it said only nats.go's word for its first round of dials, "no servers
// available for connection", which names neither.
func TestStartFirstFailureNamesURLAndDial(t *testing.T) {
	t.Parallel()
	const secret = "pw-0123456789"
	a, c := testutil.FreeAddr(t), testutil.FreeAddr(t)
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://gw:" + secret + "@" + a + ",nats://" + c, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if err := b.Start(ctx); err == nil {
		t.Fatal("started with nothing listening")
	}
	got := logs.lines(reconnectFailed)
	if len(got) == 0 {
		t.Fatalf("no failed attempt logged:\n%s", logs.String())
	}
	first := got[0]
	if want := `url=nats://gw:xxxxx@` + a + `,nats://` + c; !strings.Contains(first, want) {
		t.Errorf("the first failed attempt does not name the URLs (%s): %s", want, first)
	}
	if !strings.Contains(first, "connection refused") || strings.Contains(first, "no servers available") {
		t.Errorf("the first failed attempt does not give the dial's error: %s", first)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the credential was logged:\n%s", logs.String())
	}
}

// A start's failed attempts are its own: once the start connects, the
// first outage after it is logged at once, with not_logged=0, and its
// reconnect counts only its own failed attempts. The count was reset only
// by a reconnect, so an outage soon after a start that had waited for its
// bus was not logged for up to 10 s and then counted the start's
// attempts (the first of them held back and so never logged at all).
func TestStartFailuresNotCarriedIntoLaterOutage(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	dir := t.TempDir()
	const secret = "chosen-by-the-operator"
	if err := os.WriteFile(filepath.Join(dir, bus.TokenFile), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	b, err := bus.New(bus.Options{URL: "nats://" + bus.GatewayUser + ":" + secret + "@" + addr, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		done <- b.Start(ctx)
	}()
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(logs.lines(reconnectFailed)) > 0 }, "no failed start attempt logged:\n"+logs.String())
	time.Sleep(time.Second) // a few more attempts, left out of the log
	srv := startEmbeddedIn(t, dir, addr)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	srv.Close() // the outage
	testutil.WaitFor(t, 3*time.Second, func() bool { return len(logs.linesAfter(`msg="connected to nats"`, reconnectFailed)) > 0 },
		"the outage's first failed attempt was not logged at once:\n"+logs.String())
	if got := logs.linesAfter(`msg="connected to nats"`, reconnectFailed)[0]; !strings.Contains(got, "not_logged=0 ") {
		t.Errorf("the outage's first line counts attempts of the start: %s", got)
	}
}
