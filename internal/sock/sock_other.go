//go:build !linux

package sock

import "net"

// Wrap returns c: the raw system calls are Linux's.
func Wrap(c net.Conn) net.Conn { return c }
