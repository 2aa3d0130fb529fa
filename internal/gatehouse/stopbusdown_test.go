package gatehouse

import (
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestStopWithBusDown stops a gateway whose external bus is gone. Nothing
// it could still tell the bus would arrive, so the stop must not wait for
// it: it used to wait out the JetStream API timeout (5 s) on the store's
// last calls, up to 10 s past the drain.
func TestStopWithBusDown(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	cfg := testConfig(t)
	cfg.Bus.URL = []string{ns.ClientURL()}
	cfg.DrainTimeout = time.Second
	r := start(t, cfg)
	ns.Shutdown()
	ns.WaitForShutdown()
	testutil.WaitFor(t, 5*time.Second, func() bool { return !r.g.bus.Load().Conn().IsConnected() }, "gateway saw its bus go")

	began := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// No connection is open, so the drain ends at once: the bound is
	// the drain_timeout plus a little (room for a loaded machine), under
	// the API timeout (5 s) the stop used to wait out at least once.
	if took := time.Since(began); took > cfg.DrainTimeout+2500*time.Millisecond {
		t.Fatalf("stop took %v with the bus down, want at most drain_timeout (%v) + 2.5s", took, cfg.DrainTimeout)
	}
}
