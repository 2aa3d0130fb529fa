package proxy

import (
	"net"
	"syscall"
)

// counts reports whether c's socket counts the bytes it received.
func counts(c net.Conn) bool {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	var s sockLook
	ok := false
	_ = rc.Control(func(fd uintptr) { ok = s.count(fd) })
	return ok
}
