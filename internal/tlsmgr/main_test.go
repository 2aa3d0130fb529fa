package tlsmgr

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestMain fails the package if a test leaves a goroutine behind
// (certmagic's own aside: testutil.VerifyNoLeaks). Its parallel tests
// mostly wait on Pebble's validations and orders, and on the handshake
// bounds: more of them run at once than the CPUs (testutil.ParallelWaits).
func TestMain(m *testing.M) {
	testutil.ParallelWaits(8)
	testutil.VerifyNoLeaks(m)
}
