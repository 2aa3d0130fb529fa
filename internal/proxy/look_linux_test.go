package proxy

import (
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// counts reports whether c's socket counts the bytes it received.
func counts(c net.Conn) bool {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return false
	}
	var s sockLook
	ok := false
	_ = rc.Control(func(fd uintptr) { ok = s.count(fd) })
	return ok
}

// TestSockLookPeeksWhenTheCountIsBelowWhatWasRead: a count of bytes
// received below those already read from the socket is not the kernel's
// (gVisor's TCP_INFO, say, is full length with tcpi_bytes_received 0):
// a byte the host sent before the request still waits in the socket,
// and the look must find it by the peek.
func TestSockLookPeeksWhenTheCountIsBelowWhatWasRead(t *testing.T) {
	cc, peer := testutil.TCPPair(t)
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var s sockLook
	testutil.WaitFor(t, 10*time.Second, func() bool { return s.arrived(cc, 0) }, "the byte reaches the socket")
	if !s.arrived(cc, 1<<40) {
		t.Fatalf("a byte waits in the socket, read count past the socket's own: the look found nothing")
	}
}

// The offset of tcpi_bytes_received in Linux's struct tcp_info
// (include/uapi/linux/tcp.h): 8 bytes of u8 and bit fields, 24 u32, then
// pacing_rate, max_pacing_rate, bytes_acked as u64, on every arch.
var _ = [1]struct{}{}[unsafe.Offsetof(unix.TCPInfo{}.Bytes_received)-128]
