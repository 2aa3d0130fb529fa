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

// canPark reports whether copyHalf may wait on c without a kernel pipe.
func canPark(c net.Conn) bool {
	_, ok := c.(*net.TCPConn)
	return ok
}

// waitReadable returns once c has a byte to read, or its end, or an
// error: it peeks (MSG_PEEK, consuming nothing) and, finding nothing,
// waits in the netpoller. Peeking first matters: the netpoller forgets a
// readiness that came before the wait began.
func waitReadable(c net.Conn) error {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
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
