package h2

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// connection's and handler's goroutine is the Server's to end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
