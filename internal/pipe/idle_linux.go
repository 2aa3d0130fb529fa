package pipe

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// canAsk reports whether sinceData can ask c, without a system call: a
// pipe's start is on every new passthrough connection's path.
func canAsk(c net.Conn) bool {
	_, ok := c.(*net.TCPConn)
	return ok
}

// sinceData is how long ago c's socket last received or sent data,
// whichever is later, as the kernel keeps it (TCP_INFO's
// tcpi_last_data_recv and tcpi_last_data_sent, in milliseconds). ok is
// false when c is not a TCP socket or is closed.
func sinceData(c net.Conn) (since time.Duration, ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	ms := min(info.Last_data_recv, info.Last_data_sent)
	return time.Duration(ms) * time.Millisecond, true
}
