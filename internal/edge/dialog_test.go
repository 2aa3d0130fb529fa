package edge

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestPassthroughDialFailureLogBounded: every client of a passthrough app
// whose host is down is closed, but the log says so once per app and
// window, with a count of what it left out, rather than once per
// connection: a popular app with a dead host would flood the log.
func TestPassthroughDialFailureLogBounded(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	var logs testutil.SyncBuffer
	e := start(t, Options{Passthrough: RoutePassthrough(table(addr), nil),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const clients = 20
	for range clients {
		if _, err := dialTLS(t, e.https, &tls.Config{ServerName: "secure." + zone, InsecureSkipVerify: true}); err == nil {
			t.Fatal("handshake succeeded with no host")
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "connections still counted")
	if n := strings.Count(logs.String(), "passthrough dial"); n != 1 {
		t.Errorf("%d log lines for %d failed dials, want 1:\n%s", n, clients, logs.String())
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
