package sock

import (
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// directCalls reports whether the kernel has recvfrom(2) and sendto(2) as
// system calls of their own: on 32-bit x86 only since Linux 4.3 (before,
// socketcall(2) was the one way to them, and Go's syscall package still
// takes it, so it has no SYS_RECVFROM there). Without them Wrap leaves a
// connection to net. Asked once, with fd -1: EBADF where the call exists.
var directCalls = sync.OnceValue(func() bool {
	_, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, ^uintptr(0), 0, 0, 0, 0, 0)
	return e != syscall.ENOSYS
})
