//go:build unix && !linux

package proxy

import "syscall"

// sockLook is a headConn's look at its socket before a request goes out
// on it again (arrived), under the headConn's mu; made once for the
// connection, as on Linux. There is no count of the bytes a socket
// received here: the peek stands alone.
type sockLook struct {
	rc   syscall.RawConn  // nil: not made yet
	none bool             // the connection has no socket to look at
	at   func(fd uintptr) // s.look, bound once
	endN uint64
	got  bool
	b    [1]byte
}

func (s *sockLook) look(fd uintptr) { s.got = s.peek(fd) }
