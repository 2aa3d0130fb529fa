package dns

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// server, forward and upstream here has an owner that ends it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
