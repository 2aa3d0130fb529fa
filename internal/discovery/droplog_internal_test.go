package discovery

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The bucket's arithmetic: a burst, then one line every 6 s, never more
// than the burst saved up, one bucket per reason, and a clock set back
// neither refills nor stalls it.
func TestDropLogBucket(t *testing.T) {
	t.Parallel()
	type step struct {
		at     time.Duration // from the start
		reason string
		n      int // messages
		logged int // lines wanted
	}
	every := dropLogEvery
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"burst", []step{{0, "malformed", 1000, dropLogBurst}}},
		{"one more per refill step", []step{
			{0, "malformed", dropLogBurst, dropLogBurst},
			{every - time.Millisecond, "malformed", 5, 0},
			{every, "malformed", 5, 1},
			{3 * every, "malformed", 5, 2},
		}},
		{"saves up no more than the burst", []step{
			{0, "malformed", dropLogBurst, dropLogBurst},
			{time.Hour, "malformed", 100, dropLogBurst},
		}},
		{"reasons have their own buckets", []step{
			{0, "malformed", 100, dropLogBurst},
			{0, "unsigned_leave", 3, 3},
			{0, "oversized", 100, dropLogBurst},
		}},
		{"clock set back", []step{
			{0, "malformed", dropLogBurst, dropLogBurst},
			{-time.Hour, "malformed", 5, 0},
			{-time.Hour + every, "malformed", 5, 1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newDropLog(slog.New(slog.DiscardHandler), dropsNotLogged)
			t0 := time.Unix(1700000000, 0)
			for i, s := range c.steps {
				got := 0
				for range s.n {
					if l.allow(t0.Add(s.at), s.reason) {
						got++
					}
				}
				if got != s.logged {
					t.Errorf("step %d (%s at %s): %d of %d logged, want %d", i, s.reason, s.at, got, s.n, s.logged)
				}
			}
		})
	}
}

// A summary counts what each reason held back since the previous one,
// comes at most every dropSummaryEvery (by a clock that may be set back),
// and says nothing when nothing was held back.
func TestDropLogSummary(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newDropLog(slog.New(slog.NewJSONHandler(&buf, nil)), dropsNotLogged)
	t0 := time.Unix(1700000000, 0)
	summaries := func() []map[string]any {
		var out []map[string]any
		for line := range strings.Lines(buf.String()) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			if m["msg"] == "discovery: dropped bus messages not logged" {
				out = append(out, m["suppressed"].(map[string]any))
			}
		}
		return out
	}

	l.summarize(t0)
	if n := len(summaries()); n != 0 {
		t.Fatalf("%d summaries with nothing held back", n)
	}
	for range 15 {
		l.warn(t0, "malformed", "m")
	}
	l.warn(t0, "oversized", "o")
	l.summarize(t0) // the first one comes at once
	for range 3 {
		l.warn(t0, "malformed", "m")
	}
	l.summarize(t0.Add(dropSummaryEvery - time.Second)) // too soon
	l.summarize(t0.Add(dropSummaryEvery))
	l.summarize(t0.Add(3 * dropSummaryEvery)) // nothing new held back
	l.warn(t0.Add(-time.Hour), "oversized", "o")
	l.warn(t0.Add(-time.Hour), "malformed", "m")
	l.summarize(t0.Add(-time.Hour)) // the clock was set back: not too soon
	got := summaries()
	want := []map[string]any{{"malformed": 5.0}, {"malformed": 3.0}, {"malformed": 1.0}}
	if len(got) != len(want) {
		t.Fatalf("summaries %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) || got[i]["malformed"] != want[i]["malformed"] {
			t.Errorf("summary %d: %v, want %v", i, got[i], want[i])
		}
	}
}
