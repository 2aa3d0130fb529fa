package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// received returns how many bytes c's socket has received from its peer
// in all (tcpi_bytes_received, Linux 4.1 on), read or not: unlike a
// look at the socket, it counts bytes a read took a moment ago too.
func received(c net.Conn) (uint64, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n uint64
	var ierr error = syscall.EINVAL
	_ = rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); ierr == nil {
			n = info.Bytes_received
		}
	})
	return n, ierr == nil
}
