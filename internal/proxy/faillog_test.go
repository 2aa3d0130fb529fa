package proxy

import (
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestUpstreamFailuresLogBounded: an app whose host is down fails every
// request; the warning is logged once per (app, status) per 10 s, with
// the count of the lines left out, not once a request, on both proxy
// paths.
func TestUpstreamFailuresLogBounded(t *testing.T) {
	dead := testutil.RefusedAddr(t)
	for _, disable := range []bool{false, true} {
		var logs testutil.SyncBuffer
		var mu sync.Mutex
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		p, _ := New(Options{ClusterID: "c1", DisableFastPath: disable, Now: clock, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		srv := proxyServer(t, p, dead)
		for range 20 {
			if s, _ := fastGet(t, srv); s != 502 {
				t.Fatalf("status %d, want 502", s)
			}
		}
		lines := func() []string {
			var out []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `msg="proxy: upstream failed"`) {
					out = append(out, l)
				}
			}
			return out
		}
		if got := lines(); len(got) != 1 {
			t.Fatalf("fast path off %v: %d lines for 20 failures, want 1:\n%s", disable, len(got), logs.String())
		}
		mu.Lock()
		now = now.Add(failLogEvery)
		mu.Unlock()
		fastGet(t, srv)
		got := lines()
		if len(got) != 2 || !regexp.MustCompile(`not_logged=19\b`).MatchString(got[1]) {
			t.Fatalf("fast path off %v: after the interval, want a second line counting 19 left out:\n%s", disable, strings.Join(got, "\n"))
		}
		p.Close()
	}
}
