package peers

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// TestStateLinesNameOnlyAnError: a peer turning active after a probe that
// answered logs no err field (it said "err":null in JSON logs, which reads
// as a failure to anyone grepping for errors); one turning inactive names
// the probe's error.
func TestStateLinesNameOnlyAnError(t *testing.T) {
	fail := errors.New("dial tcp: connection refused")
	var logs logBuf
	p, err := New(Options{Self: cluster.Peer{ID: "eu", URL: "http://127.0.0.1:1"}, Key: newKey(t),
		Static: []cluster.Peer{{ID: "us", URL: "http://127.0.0.1:2", PublicKey: pubOf(newKey(t))}},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{nil, fail, fail, fail, nil} {
		p.recordProbe("us", "http://127.0.0.1:2", e)
	}
	var up, down int
	for _, l := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(l, `"msg":"peers: cluster active"`):
			up++
			if strings.Contains(l, `"err"`) {
				t.Errorf("a peer turning active logs an err field: %s", l)
			}
		case strings.Contains(l, `"msg":"peers: cluster inactive`):
			down++
			if !strings.Contains(l, `"err":"dial tcp: connection refused"`) {
				t.Errorf("a peer turning inactive does not name the probe's error: %s", l)
			}
		}
	}
	if up != 2 || down != 1 {
		t.Fatalf("%d active and %d inactive lines, want 2 and 1:\n%s", up, down, logs.String())
	}
}
