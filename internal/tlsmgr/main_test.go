package tlsmgr

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestMain fails the package if a test leaves a goroutine behind
// (certmagic's own aside: testutil.VerifyNoLeaks).
func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
