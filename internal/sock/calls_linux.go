//go:build linux && !386

package sock

// directCalls reports whether the kernel has recvfrom(2) and sendto(2) as
// system calls of their own: every Linux Go runs on, but 32-bit x86's.
func directCalls() bool { return true }
