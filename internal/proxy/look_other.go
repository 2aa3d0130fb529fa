//go:build !unix

package proxy

import "net"

// sockLook cannot look here: the read that follows a write finds out.
type sockLook struct{}

func (*sockLook) arrived(net.Conn, uint64) bool { return false }
