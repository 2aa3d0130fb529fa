//go:build unix

package bus

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on the directory dir, which must exist,
// and returns what releases it. The lock is the kernel's (flock on the
// directory itself, so no file is added to it): a process that dies
// leaves no stale lock behind. It fails at once with errDirLocked while
// another process, or another Bus of this one, holds it, and with
// errNoDirLock (and a release that does nothing) where the file system
// takes no locks.
func lockDir(dir string) (release func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		switch {
		case errors.Is(err, syscall.EWOULDBLOCK):
			return nil, errDirLocked
		case errors.Is(err, syscall.ENOTSUP), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOLCK):
			// A file system without locks (some NFS and FUSE mounts):
			// the store still works there, unguarded, as before.
			return func() {}, fmt.Errorf("%w: %v", errNoDirLock, err)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
