package testutil

import (
	"context"
	"testing"
)

// Serve runs serve on a goroutine until t ends: its cleanup cancels the
// context serve was given, waits for serve to return and fails t, naming
// what, if it returned an error. It is the life of every test server whose
// Serve takes a context (DNS, gateways' listeners): a server that does not
// stop when told hangs the test here, at the end, where it is seen.
func Serve(t testing.TB, what string, serve func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}
