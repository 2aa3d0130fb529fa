package gatehouse

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestMain fails the package if a test leaves a goroutine behind: a
// Gatehouse's Run must have stopped every part it started when it
// returns (certmagic's own goroutines aside: testutil.VerifyNoLeaks).
func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
