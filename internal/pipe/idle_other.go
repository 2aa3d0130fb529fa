//go:build !linux

package pipe

import (
	"net"
	"time"
)

// canAsk is false off Linux: the idle timeout is not enforced there.
func canAsk(net.Conn) bool { return false }

func sinceData(net.Conn) (time.Duration, bool) { return 0, false }

// canPark is false off Linux: a waiting copy keeps what it holds.
func canPark(net.Conn) bool { return false }

func waitReadable(net.Conn) error { return nil }
