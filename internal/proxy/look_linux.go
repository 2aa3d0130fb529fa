package proxy

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockLook is a headConn's look at its socket before a request goes out
// on it again (arrived), under the headConn's mu. The look runs on every
// request to a kept-alive host, so what it needs is made once for the
// connection: a handle and a closure made for each look, and the TCP_INFO
// unix.GetsockoptTCPInfo allocates, cost 8 allocations a request.
type sockLook struct {
	rc   syscall.RawConn  // nil: not made yet
	none bool             // the connection has no socket to look at
	at   func(fd uintptr) // s.look, bound once
	endN uint64
	got  bool
	b    [1]byte
	info unix.TCPInfo
	ilen uint32
}

// look sets got when fd's socket received bytes past endN. The count of
// bytes it received in all (tcpi_bytes_received, Linux 4.1 on), read or
// not, sees what a reader (net/http's, or the TLS layer's) took from the
// socket a moment ago and has not handed over yet, and everything a peek
// would find: the peek is made only where there is no count (an older
// kernel, a socket not TCP's). The peer's end of the stream counts one
// (its FIN's sequence number): a reused connection the host closed fails
// the write, nothing sent, and net/http sends again what it may.
//
// A count below endN is none: more was read from the socket than it says
// it received (gVisor's TCP_INFO is full length, the count 0), and
// trusting it would skip the peek and miss a byte already waiting.
func (s *sockLook) look(fd uintptr) {
	if s.count(fd) && s.info.Bytes_received >= s.endN {
		s.got = s.info.Bytes_received > s.endN
		return
	}
	s.got = s.peek(fd)
}

// count reads fd's TCP_INFO into s.info, and reports whether it holds
// tcpi_bytes_received.
func (s *sockLook) count(fd uintptr) bool {
	s.ilen = uint32(unsafe.Sizeof(s.info))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&s.info)), uintptr(unsafe.Pointer(&s.ilen)), 0)
	return e == 0 && uintptr(s.ilen) >= unsafe.Offsetof(s.info.Bytes_received)+unsafe.Sizeof(s.info.Bytes_received)
}
