package bus_test

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestEmbeddedBoundsClientLines: anyone who reaches the embedded bus
// connects as a host without a credential, and the server writes an error
// line for each thing such a client does that it may not, such as each
// publish outside the host subjects. Those lines are bounded: a burst,
// then one per period, the next one logged counting those held back
// (not_logged); the server's lines about itself are never held back.
func TestEmbeddedBoundsClientLines(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	b, err := bus.New(bus.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "test",
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.SetServerLogNow(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	t.Cleanup(b.Close)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var pe permErrs
	anon := pe.connect(t, b.ClientURL())
	// Every publish is read (and refused, and its line written) before
	// the PING of the Flush that follows is.
	violate := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := anon.Publish("not.a.host.subject."+strconv.Itoa(i), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := anon.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	violations := func() (lines []map[string]any) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "Publish Violation") {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatal(err)
				}
				lines = append(lines, m)
			}
		}
		return lines
	}
	const flood = 200
	violate(0, flood)
	if got := violations(); len(got) != bus.ClientLogBurst {
		t.Fatalf("%d publishes out of bounds wrote %d lines, want %d", flood, len(got), bus.ClientLogBurst)
	}
	mu.Lock()
	now = now.Add(bus.ClientLogEvery)
	mu.Unlock()
	violate(flood, flood+1)
	got := violations()
	if len(got) != bus.ClientLogBurst+1 {
		t.Fatalf("a period later, %d lines, want %d", len(got), bus.ClientLogBurst+1)
	}
	if last := got[len(got)-1]; last["not_logged"] != float64(flood-bus.ClientLogBurst) || !strings.Contains(last["msg"].(string), strconv.Itoa(flood)) {
		t.Errorf("the line a period later: %v, want the last publish's, with not_logged %d", last, flood-bus.ClientLogBurst)
	}
	for _, l := range got[:bus.ClientLogBurst] {
		if _, ok := l["not_logged"]; ok {
			t.Errorf("a line of the burst says not_logged: %v", l)
		}
	}
	// The server's own lines go on.
	b.Close()
	if !strings.Contains(logs.String(), "Server Exiting") {
		t.Errorf("the server's shutdown lines were held back:\n%s", logs.String())
	}
}

// TestEmbeddedOwnConnectionLinesPass: the server's lines about the
// gateway's own connection (its in-process one: a slow consumer, a
// refused subscription) are the operator's to see, so a client that has
// spent the bound on lines about itself does not hold them back.
func TestEmbeddedOwnConnectionLinesPass(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	b, err := bus.New(bus.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "test",
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	// The clock stands still: no line about a client earns a token back.
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.SetServerLogNow(func() time.Time { return now })
	t.Cleanup(b.Close)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var pe permErrs
	anon := pe.connect(t, b.ClientURL())
	for i := range 3 * bus.ClientLogBurst {
		if err := anon.Publish("not.a.host.subject."+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := anon.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "Publish Violation"); n != bus.ClientLogBurst {
		t.Fatalf("%d lines about the flooding client, want the bound, %d", n, bus.ClientLogBurst)
	}
	// The gateway's own connection subscribes past the server's bound: the
	// server refuses it, with a line, before it answers the Flush's PING.
	nc := b.Conn()
	for i := range bus.MaxSubscriptions + 1 {
		if _, err := nc.SubscribeSync("own.subject." + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	own := false
	for _, l := range strings.Split(logs.String(), "\n") {
		own = own || strings.Contains(l, `"component":"nats-server"`) && strings.Contains(l, "maximum subscriptions exceeded")
	}
	if !own {
		t.Errorf("the server's line about the gateway's own connection was held back:\n%s", logs.String())
	}
}
