//go:build !linux

package sock

import (
	"context"
	"net"
)

// Wrap returns c: the raw system calls are Linux's.
func Wrap(c net.Conn) net.Conn { return c }

// Listen is net.Listen("tcp", addr): inheriting keep-alive from the
// listening socket is relied on only on Linux.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}
