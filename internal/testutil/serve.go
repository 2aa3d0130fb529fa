package testutil

import (
	"context"
	"net"
	"sync"
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

// ServeConns accepts on ln until t ends and runs serve on each connection
// on a goroutine of its own, then closes it: the life of a test's raw
// server, which writes exact bytes no net/http server would. Its cleanup
// closes ln and waits for every serve, so a serve must return once its
// connection's reads fail.
func ServeConns(t testing.TB, ln net.Listener, serve func(c net.Conn)) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
}
