package edge

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestDrainCountsNoLingeringConnectionAsCut: an HTTP/2 connection of
// gatehouse's own server that lingers when drain_timeout ends (after its
// GOAWAY, reading out what the client still sends, for up to a second)
// has nothing unanswered: the drain did not cut it, and says so (no
// warning, cut_connections=0). It was counted as open, and the drain
// logged "drain_timeout cut the connections still open" though every
// request had been answered.
func TestDrainCountsNoLingeringConnectionAsCut(t *testing.T) {
	var logs testutil.SyncBuffer
	e := start(t, Options{DrainTimeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r := dialRawH2(t, e.https)
	if res := r.get(1, "/"); res.status != "200" {
		t.Fatalf("status %q, want 200", res.status)
	}
	// An even stream id is a connection error: GOAWAY, then the server
	// ends its side (close_notify) and lingers; the client stays, silent.
	r.headers(2, request("GET", "/"), true)
	if seen := readUntilClosed(t, r, 2); len(seen.goaways) != 1 {
		t.Fatalf("GOAWAYs %+v, want one", seen.goaways)
	}
	if err := e.stop(t); err != nil {
		t.Fatal(err)
	}
	e.done <- nil // for the cleanup
	if out := logs.String(); strings.Contains(out, "drain_timeout cut") || !strings.Contains(out, "cut_connections=0") {
		t.Fatalf("the drain counted a lingering connection as cut:\n%s", out)
	}
}
