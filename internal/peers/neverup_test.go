package peers

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// TestStaticPeerNeverUpIsWarned: a configured peer whose probes fail from
// the start (a wrong URL, a firewall) is a warning once its probes have
// missed Misses times in a row, naming it and the error, as a peer that
// goes down is: it never turned inactive, so nothing was logged at all,
// and every request was served locally without a word about why. One
// warning per run of misses, not one per probe; a peer that was up and
// goes down still gets exactly one.
func TestStaticPeerNeverUpIsWarned(t *testing.T) {
	fail := errors.New("dial tcp: connection refused")
	tests := []struct {
		name  string
		steps []error // probe results in order; nil is a success
		warns int     // "peers: cluster inactive" warnings, in all
	}{
		{"never answers", []error{fail, fail}, 0},
		{"never answers, misses reached", []error{fail, fail, fail}, 1},
		{"never answers, long run", []error{fail, fail, fail, fail, fail, fail, fail}, 1},
		{"up, then down", []error{nil, fail, fail, fail, fail}, 1},
		{"never up, then up, then down", []error{fail, fail, fail, fail, nil, fail, fail, fail}, 2},
		{"never up, a success short of misses", []error{fail, fail, nil, fail, fail}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logBuf
			p, err := New(Options{Self: cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"}, Key: newKey(t),
				Static: []cluster.Peer{{ID: "us", URL: "http://127.0.0.1:2", PublicKey: pubOf(newKey(t))}},
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tt.steps {
				p.recordProbe("us", "http://127.0.0.1:2", e)
			}
			var warns []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, `msg="peers: cluster inactive`) {
					warns = append(warns, l)
				}
			}
			if len(warns) != tt.warns {
				t.Fatalf("%d inactive warnings, want %d:\n%s", len(warns), tt.warns, logs.String())
			}
			for _, w := range warns {
				if !strings.Contains(w, "cluster=us") || !strings.Contains(w, "connection refused") {
					t.Errorf("the warning names neither the peer nor the error: %s", w)
				}
			}
		})
	}
}
