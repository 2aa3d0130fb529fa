//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// pending reports whether c's socket holds a byte its peer sent that no
// read has taken yet. It never waits. Its peer's end of the stream is
// not reported: net/http's transport takes that for a closed idle
// connection, and sends again what it may.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	got := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			got = err == nil && n > 0
			return
		}
	})
	return got
}
