//go:build linux

package sock

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// TestListenKeepAlive: a connection accepted by Listen has the keep-alive
// and no-delay options of one accepted by net.Listen (which sets them per
// connection), over IPv4 and IPv6.
func TestListenKeepAlive(t *testing.T) {
	opts := []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
		{"TCP_NODELAY", syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	}
	accepted := func(t *testing.T, ln net.Listener) map[string]int {
		t.Helper()
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		rc, err := a.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		rc.Control(func(fd uintptr) {
			for _, o := range opts {
				v, err := syscall.GetsockoptInt(int(fd), o.level, o.opt)
				if err != nil {
					t.Errorf("%s: %v", o.name, err)
				}
				got[o.name] = v
			}
		})
		return got
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			std, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("no %s here: %v", addr, err)
			}
			ours, err := Listen(context.Background(), addr)
			if err != nil {
				t.Fatal(err)
			}
			a, b := accepted(t, std), accepted(t, ours)
			for _, o := range opts {
				if a[o.name] != o.want || b[o.name] != a[o.name] {
					t.Errorf("%s: net.Listen's connection %d, Listen's %d; want %d", o.name, a[o.name], b[o.name], o.want)
				}
			}
		})
	}
	if _, err := Listen(context.Background(), "127.0.0.1:-1"); err == nil {
		t.Error("Listen on a bad address succeeded")
	}
}
