//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// arrived reports whether raw's socket received bytes from its peer past
// endN, the count of bytes read from raw when the last answer ended. It
// never waits. The first look makes the handle on the socket, kept for
// the connection's later looks.
func (s *sockLook) arrived(raw net.Conn, endN uint64) bool {
	if s.rc == nil {
		if s.none {
			return false
		}
		sc, ok := raw.(syscall.Conn)
		if !ok {
			s.none = true
			return false
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false // closed: the write fails anyway
		}
		s.rc, s.at = rc, s.look
	}
	s.endN, s.got = endN, false
	if s.rc.Control(s.at) != nil {
		return false
	}
	return s.got
}

// peek reports whether fd's socket holds a byte no read has taken yet.
// Its peer's end of the stream is not reported: net/http's transport
// takes that for a closed idle connection, and sends again what it may.
func (s *sockLook) peek(fd uintptr) bool {
	for {
		n, _, err := syscall.Recvfrom(int(fd), s.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}
