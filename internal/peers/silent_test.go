package peers

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// TestAnnouncedPeerGoingDownWarnsOnce: a cluster known from its
// announcements that stops (its gateway gone: no announcement, probes
// refused) turns inactive once, so it is one warning, whichever notices
// first, the missed probes or the announcements' silence, and whenever
// the sweep runs. When the silence had run out just before the third
// missed probe and no sweep had published it yet, the probe warned and
// then the sweep warned again, for the same turn.
func TestAnnouncedPeerGoingDownWarnsOnce(t *testing.T) {
	const url = "http://127.0.0.1:2"
	fail := errors.New("dial tcp 127.0.0.1:2: connect: connection refused")
	type step int
	const (
		probe step = iota // a probe of the member fails
		sweep             // the sweep runs
		late              // the clock passes the announcements' window
	)
	tests := []struct {
		name  string
		steps []step
	}{
		{"probes miss, then silence", []step{probe, probe, probe, sweep, late, sweep}},
		{"silence noticed by the sweep, then probes miss", []step{probe, probe, late, sweep, probe, sweep}},
		{"silence unnoticed, then the third miss", []step{probe, probe, late, probe, sweep, sweep}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logBuf
			var mu sync.Mutex
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			p, err := New(Options{Self: cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"}, Key: newKey(t),
				Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.accept(cluster.Peer{ID: "us", URL: url, PublicKey: pubOf(newKey(t))}, clock()); err != nil {
				t.Fatal(err)
			}
			if !active(p, "us") {
				t.Fatal("us is not active after its announcement")
			}
			for _, s := range tt.steps {
				switch s {
				case probe:
					p.recordProbe("us", url, fail)
				case sweep:
					p.sweep()
				case late:
					mu.Lock()
					now = now.Add(p.window + time.Second)
					mu.Unlock()
				}
			}
			if active(p, "us") {
				t.Fatal("us is still active")
			}
			var warns int
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, `msg="peers: cluster inactive`) {
					warns++
				}
			}
			if warns != 1 {
				t.Fatalf("%d inactive warnings for one turn, want 1:\n%s", warns, logs.String())
			}
		})
	}
}
