package testutil

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortOutsideEphemeral: where the kernel says its ephemeral range,
// FreePort's ports come from below it, so no connection's source port
// can take one, each can be bound, and none is handed out twice.
func TestFreePortOutsideEphemeral(t *testing.T) {
	low := ephemeralLow()
	if low <= quietLow+1000 {
		t.Skipf("no room below the ephemeral range (low end %d)", low)
	}
	seen := map[int]bool{}
	for range 50 {
		port := FreePort(t)
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		if port < quietLow || port >= low {
			t.Fatalf("port %d, want one in [%d, %d)", port, quietLow, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", port, err)
		}
		l.Close()
	}
}
