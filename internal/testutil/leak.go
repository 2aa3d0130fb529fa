package testutil

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs m and fails the package if a test leaves a goroutine
// behind, for a TestMain of a package that runs certmagic. Two of its
// goroutines are not ours to join: its per-CA rate limiters live in a
// package-level map for the process's life, and FileStorage refreshes a
// lock file on a sleep loop that ends on its own.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop"),
		goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.keepLockfileFresh"),
	)
}
