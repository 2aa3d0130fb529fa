package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// FreeAddr returns a loopback TCP address nothing listened on a moment
// ago, for a part that must be told its address before it binds (a peer
// list, a config file). Prefer port 0 wherever the part reports what it
// bound.
//
// The port is drawn at random from below the kernel's ephemeral range
// (ip_local_port_range), where the kernel never hands out a port itself:
// a port from port 0 goes back to that range when the probe closes, and
// any test's outgoing connection could take it as its source port before
// the part binds it. Where no such port is free, port 0 it is.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	if low := ephemeralLow(); low > quietLow+1000 {
		for range 20 {
			port := quietLow + rand.IntN(low-quietLow)
			if _, taken := handed.LoadOrStore(port, true); taken {
				continue // handed to a part of this process that may not have bound it yet
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err == nil {
				l.Close()
				return port
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeUDPAddr is FreeAddr free over UDP as well: for a part that binds
// both (a DNS server), or for an address that must refuse both, a DNS
// server that is down. A UDP port from 0 closed again is no such thing:
// any test binary running alongside may bind it next, a DNS server of its
// own among them, and answer.
func FreeUDPAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		addr := FreeAddr(t)
		if pc, err := net.ListenPacket("udp", addr); err == nil {
			pc.Close()
			return addr
		}
	}
	t.Fatal("testutil: no port free over both TCP and UDP")
	return ""
}

// ListenTwin listens on 127.0.0.1 and on 127.0.0.2 at one port: two
// addresses one host name may point at in turn, for tests of what
// follows a name that moves. It skips the test where 127.0.0.2 is not a
// loopback address (Linux has all of 127/8; some systems only
// 127.0.0.1). Both listeners close when the test ends.
func ListenTwin(t testing.TB) (first, second net.Listener, port string) {
	t.Helper()
	probe, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 is not a loopback address here: %v", err)
	}
	probe.Close()
	for range 20 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = strconv.Itoa(a.Addr().(*net.TCPAddr).Port)
		if b, err := net.Listen("tcp", "127.0.0.2:"+port); err == nil {
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b, port
		}
		a.Close()
	}
	t.Fatal("testutil: no port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil, ""
}

// TCPPair returns both ends of a fresh loopback TCP connection: the
// dialed one and the accepted one. Both close when the test ends.
func TCPPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		c.Close()
		t.Fatal(a.err)
	}
	client, server = c.(*net.TCPConn), a.c.(*net.TCPConn)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// handed holds the ports FreePort has returned in this process: a draw
// may not repeat one, which a test asking for two ports in a row would
// otherwise get now and then, both free when asked.
var handed sync.Map // int -> bool

// quietLow is the lowest port FreePort draws: above the ports services
// are commonly configured on.
const quietLow = 20000

// ephemeralLow is the low end of the kernel's ephemeral port range, or 0
// where it cannot be read (not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// RefusedAddr returns a loopback TCP address every connection to is
// refused, for as long as the test runs: a host that is down. A port
// that was listened on and closed is not that: another test binary
// running alongside (go test runs packages in parallel) may listen on it
// next and answer. This one holds a socket bound to the port and never
// listens on it, so the kernel answers each SYN with a reset and nothing
// else can bind the port; the socket closes when the test ends.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testutil: socket: %v", err)
	}
	syscall.CloseOnExec(fd) // a flag of socket(2) on Linux only
	t.Cleanup(func() { syscall.Close(fd) })
	// No SO_REUSEADDR: a listener that sets it (Go's do) could bind a
	// port whose holder set it too.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testutil: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testutil: getsockname: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}
