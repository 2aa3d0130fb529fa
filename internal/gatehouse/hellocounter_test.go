package gatehouse

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/internal/edge"
	"github.com/gatehouse-dev/gatehouse/internal/metrics"
)

// TestHelloCounterUnlistedOutcome: an outcome edge reports that is not in
// edge.HelloOutcomes (one added to edge and not to the list) is counted
// under its own name and logged at error once, not a panic on the
// connection's goroutine, which no one recovers: the gateway would die.
func TestHelloCounterUnlistedOutcome(t *testing.T) {
	set, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	hello := helloCounter(set.TLSHellos, slog.New(slog.NewJSONHandler(&logs, nil)))
	for _, o := range edge.HelloOutcomes {
		if n := testutil.ToFloat64(set.TLSHellos.WithLabelValues(o)); n != 0 {
			t.Fatalf("outcome %q at %v before any hello", o, n)
		}
	}
	hello(edge.HelloOK)
	hello("made_up")
	hello("made_up")
	if n := testutil.ToFloat64(set.TLSHellos.WithLabelValues(edge.HelloOK)); n != 1 {
		t.Errorf("ok counted %v, want 1", n)
	}
	if n := testutil.ToFloat64(set.TLSHellos.WithLabelValues("made_up")); n != 2 {
		t.Errorf("made_up counted %v, want 2", n)
	}
	if got := strings.Count(logs.String(), `"level":"ERROR"`); got != 1 || !strings.Contains(logs.String(), `"outcome":"made_up"`) {
		t.Errorf("logged %d errors, want 1 naming the outcome:\n%s", got, logs.String())
	}
}
