package main

import (
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestMain fails the package if a test leaves a goroutine behind: serve,
// demo and host run in-process here and must stop everything they start
// when their context ends (certmagic's own goroutines aside:
// testutil.VerifyNoLeaks).
func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
