//go:build linux

package sock

import (
	"context"
	"net"
	"syscall"
)

// Go's keep-alive for accepted connections (net's defaults: probes after
// 15 s idle, every 15 s, 9 of them).
var keepAlive = []struct{ level, opt, v int }{
	{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
}

// Listen is net.Listen("tcp", addr) with the same TCP keep-alive on every
// accepted connection, set once instead of per connection: net sets it
// with four setsockopt calls after each accept, while Linux copies the
// listening socket's keep-alive options to each connection it accepts.
// Four of the ~43 system calls of a passthrough connection.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			for _, o := range keepAlive {
				if serr = syscall.SetsockoptInt(int(fd), o.level, o.opt, o.v); serr != nil {
					return
				}
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(ctx, "tcp", addr)
}
