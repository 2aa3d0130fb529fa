package edge

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestPassthroughDialFailureLogBounded: every client of a passthrough app
// whose host is down is closed, but the log says so once per app and
// window, with a count of what it left out, rather than once per
// connection: a popular app with a dead host would flood the log. The
// name's spellings that reach the app (its case, a trailing dot) are one
// name: a client choosing a new one for each connection must not get a
// line each.
func TestPassthroughDialFailureLogBounded(t *testing.T) {
	addr := testutil.RefusedAddr(t)
	const clients = 20
	for _, tc := range []struct {
		name  string
		spell func(i int) string
	}{
		{"one spelling", func(int) string { return "secure." + zone }},
		{"a spelling each", func(i int) string {
			// secure, Secure, sEcure, SEcure, ...: bit j of i is the case of letter j.
			b := []byte("secure." + zone)
			for j := range len("secure") {
				if i&(1<<j) != 0 {
					b[j] -= 'a' - 'A'
				}
			}
			return string(b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testutil.SyncBuffer
			e := start(t, Options{Passthrough: RoutePassthrough(table(addr), nil),
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			for i := range clients {
				if _, err := dialTLS(t, e.https, &tls.Config{ServerName: tc.spell(i), InsecureSkipVerify: true}); err == nil {
					t.Fatal("handshake succeeded with no host")
				}
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "connections still counted")
			if n := strings.Count(logs.String(), "passthrough dial"); n != 1 {
				t.Errorf("%d log lines for %d failed dials, want 1:\n%s", n, clients, logs.String())
			}
		})
	}
}

func TestFailLogSay(t *testing.T) {
	var l failLog
	t0 := time.Unix(1000, 0)
	steps := []struct {
		key  string
		at   time.Duration
		say  bool
		left int
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // keys are apart
		{"a", 2 * time.Second, false, 0},
		{"a", failLogWindow, true, 2}, // the window is over: says the two it left out
		{"a", failLogWindow + time.Second, false, 0},
	}
	for i, s := range steps {
		say, left := l.say(s.key, t0.Add(s.at))
		if say != s.say || left != s.left {
			t.Errorf("step %d (%s at %s): say %v, left %d; want %v, %d", i, s.key, s.at, say, left, s.say, s.left)
		}
	}
}

// TestDialCalledOffIsNoHostFailure: a dial the gateway itself calls off
// (its drain cancels the pipes' context) says nothing about the host: it
// must not put the host in its cool-down, where every client after the
// drain of one gateway would skip it. A dial that times out does.
func TestDialCalledOffIsNoHostFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h := &route.Host{ID: "h1", Addr: ln.Addr().String(), Health: new(route.Health)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := dialFirst(ctx, []*route.Host{h}, 0, time.Now); err == nil {
		t.Fatal("a called-off dial succeeded")
	}
	if h.Health.Degraded(time.Now()) {
		t.Error("a dial the gateway called off put the host in its cool-down")
	}
	tctx, tcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer tcancel()
	if _, _, err := dialFirst(tctx, []*route.Host{h}, 0, time.Now); err == nil {
		t.Fatal("a timed-out dial succeeded")
	}
	if !h.Health.Degraded(time.Now()) {
		t.Error("a dial that timed out did not put the host in its cool-down")
	}
}
