package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond every 10 ms until it holds or timeout passes, then
// fails t with msg. Use it in place of sleeping.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", timeout, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Eventually is WaitFor that reports instead of failing.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
