package discovery_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// clock is a hand-moved clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// logLines decodes what a slog.JSONHandler wrote, one map per line.
func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(s) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

const (
	dropMsg    = "discovery: dropped bus message"
	refusedMsg = "discovery: refused leave"
	summaryMsg = "discovery: dropped bus messages not logged"
	logBurst   = 10 // lines per reason before the log holds back (the package default)
)

// dropLog is what the log says about dropped messages: warning lines and
// the suppressed counts of every summary, by reason.
type dropLog struct {
	lines, suppressed map[string]int
	summaries, total  int
}

func readDropLog(t *testing.T, s string) dropLog {
	t.Helper()
	l := dropLog{lines: map[string]int{}, suppressed: map[string]int{}}
	for _, m := range logLines(t, s) {
		switch m["msg"] {
		case dropMsg, refusedMsg:
			l.lines[m["reason"].(string)]++
		case summaryMsg:
			l.summaries++
			for r, n := range m["suppressed"].(map[string]any) {
				l.suppressed[r] += int(n.(float64))
			}
		default:
			continue
		}
		l.total++
	}
	return l
}

// An anonymous bus client floods the hosts subjects with bad messages.
// Every one is counted, but each reason logs at most its burst of lines,
// its own bucket untouched by the others, and a summary says how many
// lines each held back; once the interval has passed (on the injected
// clock) a reason logs again.
func TestDroppedMessagesLogIsBounded(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	var logs tu.SyncBuffer
	clk := &clock{t: time.Now()}
	e := start(t, gatewayURL, func(o *discovery.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		o.Now = clk.Now
	})
	anon, err := nats.Connect(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()

	unsigned, _ := json.Marshal(host.Leave{HostID: "web-1", TS: clk.Now().Unix()})
	floods := []struct {
		reason  string
		subject string
		body    []byte
		n       int
	}{
		{"malformed", host.AnnounceSubject(cluster), []byte(`{`), 1000},
		{"oversized", host.HeartbeatSubject(cluster), bytes.Repeat([]byte(" "), host.MaxMessageSize+1), 30},
		{"unsigned_leave", host.LeaveSubject(cluster), unsigned, 20},
	}
	for _, f := range floods {
		for range f.n {
			if err := anon.Publish(f.subject, f.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := anon.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every flood ends with a held-back message, handled after the lines
	// before it were written: once counted, the log is complete.
	tu.WaitFor(t, 10*time.Second, func() bool {
		for _, f := range floods {
			if e.dropped(f.reason) != float64(f.n) {
				return false
			}
		}
		return true
	}, "flood not counted in full")

	l := readDropLog(t, logs.String())
	for _, f := range floods {
		if l.lines[f.reason] != logBurst {
			t.Errorf("%s: %d of %d messages logged, want %d", f.reason, l.lines[f.reason], f.n, logBurst)
		}
	}
	if bound := len(floods)*logBurst + 1; l.total > bound {
		t.Fatalf("%d lines about dropped messages, want at most %d", l.total, bound)
	}

	// A minute later the sweeper reports every line held back.
	clk.Add(time.Minute)
	tu.WaitFor(t, 5*time.Second, func() bool {
		l = readDropLog(t, logs.String())
		for _, f := range floods {
			if l.suppressed[f.reason] != f.n-logBurst {
				return false
			}
		}
		return true
	}, "no summary of the suppressed lines")
	if l.summaries > 2 {
		t.Fatalf("%d summaries for one flood within a minute", l.summaries)
	}

	// The buckets have refilled: a reason logs again.
	if err := anon.Publish(host.AnnounceSubject(cluster), []byte(`{`)); err != nil {
		t.Fatal(err)
	}
	if err := anon.Flush(); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool {
		return readDropLog(t, logs.String()).lines["malformed"] == logBurst+1
	}, "no line for a malformed message a minute after the flood")
}
