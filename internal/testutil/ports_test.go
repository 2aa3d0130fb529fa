package testutil

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
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

// TestRefusedAddr: a connection to the address is refused, and no
// listener can take its port while the test runs.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("a connection to %s was accepted", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took %s", addr)
	}
}

// TestFreeUDPAddr: both protocols can bind the address, and a datagram
// sent there with nothing bound is refused, as a DNS server that is down
// refuses it.
func TestFreeUDPAddr(t *testing.T) {
	addr := FreeUDPAddr(t)
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("udp %s: %v", addr, err)
	}
	pc.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("tcp %s: %v", addr, err)
	}
	l.Close()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("read from %s: %v, want connection refused", addr, err)
	}
}
