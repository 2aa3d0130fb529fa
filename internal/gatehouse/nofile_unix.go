//go:build unix

package gatehouse

import "syscall"

// fileLimit is the process's open file limit (RLIMIT_NOFILE), which Go's
// runtime raised to its hard limit at start.
func fileLimit() (uint64, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, false
	}
	// Rlimit.Cur is int64 on the BSDs, uint64 on Linux and Darwin.
	return uint64(r.Cur), true
}
