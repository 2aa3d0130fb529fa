//go:build !linux

package pipe

import (
	"net"
	"time"
)

// canAsk is false off Linux: the idle timeout is not enforced there.
func canAsk(net.Conn) bool { return false }

func sinceData(net.Conn) (time.Duration, bool) { return 0, false }
