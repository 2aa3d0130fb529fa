package verify_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (hosts, discovery, bus clients, servers)
// must be gone when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
