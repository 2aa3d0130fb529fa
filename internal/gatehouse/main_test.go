package gatehouse

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestMain fails the package if a test leaves a goroutine behind: a
// Gatehouse's Run must have stopped every part it started when it
// returns (certmagic's own goroutines aside: testutil.VerifyNoLeaks).
// Its parallel tests mostly wait on their own clusters, Pebble or a
// browser's polls: more of them run at once than the CPUs
// (testutil.ParallelWaits). Those that count process-wide goroutines
// stay serial, and VerifyNoLeaks looks once every test has ended.
func TestMain(m *testing.M) {
	testutil.ParallelWaits(4)
	testutil.VerifyNoLeaks(m)
}
