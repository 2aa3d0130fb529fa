package testutil

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback TCP address nothing listened on a moment
// ago, for a part that must be told its address before it binds (a peer
// list, a config file). Prefer port 0 wherever the part reports what it
// bound.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
