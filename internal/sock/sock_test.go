//go:build linux

package sock

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// pair returns a client connection (wrapped by wrap) and the server end of
// a loopback TCP connection.
func pair(t testing.TB, wrap func(net.Conn) net.Conn) (net.Conn, *net.TCPConn) {
	t.Helper()
	c, peer := testutil.TCPPair(t)
	return wrap(c), peer
}

// describe reduces a Read or Write result to what callers branch on.
func describe(n int, err error) string {
	if err == nil {
		return fmt.Sprintf("n=%d ok", n)
	}
	var kinds []string
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		kinds = append(kinds, "timeout")
	}
	for _, k := range []struct {
		name string
		err  error
	}{{"eof", io.EOF}, {"closed", net.ErrClosed}, {"deadline", os.ErrDeadlineExceeded}, {"reset", syscall.ECONNRESET}, {"pipe", syscall.EPIPE}} {
		if errors.Is(err, k.err) {
			kinds = append(kinds, k.name)
		}
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		kinds = append(kinds, "op="+oe.Op, "net="+oe.Net)
		if oe.Source == nil || oe.Addr == nil {
			kinds = append(kinds, "no-addrs")
		}
	}
	if n > 0 {
		kinds = append(kinds, "partial")
	}
	return fmt.Sprint(kinds)
}

// TestSameAsTCPConn runs each case on a plain *net.TCPConn and on a Conn
// and wants the same observable outcome, and the expected one.
func TestSameAsTCPConn(t *testing.T) {
	cases := []struct {
		name string
		want string
		run  func(t *testing.T, c net.Conn, peer *net.TCPConn) string
	}{
		{"echo", "n=5 ok hello", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			go func() { _, _ = io.CopyN(peer, peer, 5) }()
			if _, err := c.Write([]byte("hello")); err != nil {
				return describe(0, err)
			}
			buf := make([]byte, 5)
			n, err := io.ReadFull(c, buf)
			return describe(n, err) + " " + string(buf[:n])
		}},
		{"eof", "[eof]", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			peer.Close()
			return describe(c.Read(make([]byte, 8)))
		}},
		{"close-write", "n=0 ok got=abc", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			_, _ = c.Write([]byte("abc"))
			if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				return describe(0, err)
			}
			got, err := io.ReadAll(peer)
			return describe(0, err) + " got=" + string(got)
		}},
		{"read-deadline", "[timeout deadline op=read net=tcp] then n=2 ok", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
			out := describe(c.Read(make([]byte, 8)))
			_ = c.SetReadDeadline(time.Time{})
			_, _ = peer.Write([]byte("ok"))
			return out + " then " + describe(c.Read(make([]byte, 8)))
		}},
		{"write-deadline-past", "[timeout deadline op=write net=tcp]", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			_ = c.SetWriteDeadline(time.Now().Add(-time.Second))
			return describe(c.Write([]byte("x")))
		}},
		{"read-after-close", "[closed op=read net=tcp]", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			c.Close()
			return describe(c.Read(make([]byte, 8)))
		}},
		{"close-unblocks-read", "[closed op=read net=tcp]", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			time.AfterFunc(30*time.Millisecond, func() { c.Close() })
			return describe(c.Read(make([]byte, 8)))
		}},
		{"write-to-reset", "reset-or-pipe op=write", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			_ = peer.SetLinger(0)
			peer.Close()
			time.Sleep(20 * time.Millisecond)
			for range 100 {
				if _, err := c.Write(make([]byte, 1024)); err != nil {
					var oe *net.OpError
					if (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) && errors.As(err, &oe) {
						return "reset-or-pipe op=" + oe.Op
					}
					return describe(0, err)
				}
			}
			return "writes kept succeeding"
		}},
		{"big-write-slow-reader", "n=16777216 ok same", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			// Far more than the socket buffers: the write meets EAGAIN and
			// waits on the netpoller many times.
			data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
			sum := make(chan [32]byte, 1)
			go func() {
				h := sha256.New()
				buf := make([]byte, 64<<10)
				var got int
				for got < len(data) {
					n, err := peer.Read(buf)
					h.Write(buf[:n])
					got += n
					if err != nil {
						break
					}
					if got%(1<<20) < n {
						time.Sleep(time.Millisecond)
					}
				}
				var s [32]byte
				copy(s[:], h.Sum(nil))
				sum <- s
			}()
			n, err := c.Write(data)
			out := describe(n, err)
			if <-sum == sha256.Sum256(data) {
				return out + " same"
			}
			return out + " differs"
		}},
		{"concurrent-read-write", "n=65536 ok", func(t *testing.T, c net.Conn, peer *net.TCPConn) string {
			go func() { _, _ = io.Copy(peer, peer) }()
			data := bytes.Repeat([]byte{7}, 64<<10)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < len(data); i += 4096 {
					_, _ = c.Write(data[i : i+4096])
				}
			}()
			buf := make([]byte, len(data))
			n, err := io.ReadFull(c, buf)
			wg.Wait()
			if !bytes.Equal(buf, data) {
				return "echo differs"
			}
			return describe(n, err)
		}},
	}
	wraps := []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{
		{"tcp", func(c net.Conn) net.Conn { return c }},
		{"sock", Wrap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range wraps {
				c, peer := pair(t, w.wrap)
				if _, ok := c.(*Conn); ok != (w.name == "sock") {
					t.Fatalf("%s: connection is %T", w.name, c)
				}
				if got := tc.run(t, c, peer); got != tc.want {
					t.Errorf("%s: %s, want %s", w.name, got, tc.want)
				}
			}
		})
	}
}

// TestWrapOther: a connection that is not a *net.TCPConn stays as it is.
func TestWrapOther(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("Wrap changed a net.Pipe connection")
	}
}

// BenchmarkRoundTrip: one small write and one read back over loopback per
// op, the shape of a proxied request.
func BenchmarkRoundTrip(b *testing.B) {
	for _, w := range []struct {
		name string
		wrap func(net.Conn) net.Conn
		ask  bool
	}{{"tcp", func(c net.Conn) net.Conn { return c }, false}, {"sock", Wrap, false}, {"sock-ask", Wrap, true}} {
		b.Run(w.name, func(b *testing.B) {
			c, peer := pair(b, w.wrap)
			go func() { _, _ = io.Copy(peer, peer) }()
			msg := make([]byte, 1024)
			buf := make([]byte, 1024)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if w.ask {
					c.(*Conn).Ask(msg)
				} else if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reply has p be the reply of c's next Read, as the lane does: held,
// written, unheld.
func reply(c *Conn, p []byte) {
	c.Hold(make([]byte, 0, len(p)))
	_, _ = c.Write(p)
	c.Unhold()
}

// answers reads n bytes on peer, sends them on got, then writes answer:
// the far end of an exchange.
func answers(peer *net.TCPConn, n int, answer string) <-chan string {
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, n)
		k, _ := io.ReadFull(peer, buf)
		got <- string(buf[:k])
		_, _ = peer.Write([]byte(answer))
	}()
	return got
}

// TestAsk: the request rides on the read that waits for its answer, and
// every way that write can go is reported as a write would.
func TestAsk(t *testing.T) {
	cases := []struct {
		name string
		want string
		run  func(t *testing.T, c *Conn, peer *net.TCPConn) string
	}{
		{"answer", "n=4 ok pong peer=ping", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			got := answers(peer, 4, "pong")
			c.Ask([]byte("ping"))
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			return describe(n, err) + " " + string(buf[:n]) + " peer=" + <-got
		}},
		{"reset", "reset-or-pipe op=write", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			_ = peer.SetLinger(0)
			peer.Close()
			time.Sleep(20 * time.Millisecond)
			c.Ask([]byte("ping"))
			_, err := c.Read(make([]byte, 8))
			var oe *net.OpError
			if (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) && errors.As(err, &oe) {
				return "reset-or-pipe op=" + oe.Op
			}
			return describe(0, err)
		}},
		{"deadline-past-sends-nothing", "[timeout deadline op=read net=tcp] peer=x", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			_ = c.SetReadDeadline(time.Now().Add(-time.Second))
			c.Ask([]byte("ping"))
			out := describe(c.Read(make([]byte, 8)))
			// The ask is dropped with the failed read: a plain write
			// follows, and the peer sees only it.
			_ = c.SetReadDeadline(time.Time{})
			_, _ = c.Write([]byte("x"))
			_ = c.CloseWrite()
			got, _ := io.ReadAll(peer)
			return out + " peer=" + string(got)
		}},
		{"no-answer-times-out", "[timeout deadline op=read net=tcp] peer=ping", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
			c.Ask([]byte("ping"))
			out := describe(c.Read(make([]byte, 8)))
			buf := make([]byte, 4)
			n, _ := io.ReadFull(peer, buf)
			return out + " peer=" + string(buf[:n])
		}},
		{"peer-closes", "[eof] peer=ping", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			got := make(chan string, 1)
			go func() {
				buf := make([]byte, 4)
				n, _ := io.ReadFull(peer, buf)
				got <- string(buf[:n])
				peer.Close()
			}()
			c.Ask([]byte("ping"))
			return describe(c.Read(make([]byte, 8))) + " peer=" + <-got
		}},
		{"full-socket", "n=4 ok done same", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			// Far more than the socket buffers take: the ask stops at
			// EAGAIN, the rest is written as Write would, then read.
			data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
			sum := make(chan [32]byte, 1)
			go func() {
				time.Sleep(20 * time.Millisecond)
				h := sha256.New()
				_, _ = io.CopyN(h, peer, int64(len(data)))
				var s [32]byte
				copy(s[:], h.Sum(nil))
				sum <- s
				_, _ = peer.Write([]byte("done"))
			}()
			c.Ask(data)
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			out := describe(n, err) + " " + string(buf[:n])
			if <-sum == sha256.Sum256(data) {
				return out + " same"
			}
			return out + " differs"
		}},
		{"idle-answer", "n=4 ok pong peer=ping", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			got := answers(peer, 4, "pong")
			c.AskIdle([]byte("ping"))
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			return describe(n, err) + " " + string(buf[:n]) + " peer=" + <-got
		}},
		{"idle-stray-bytes-send-nothing", "not-idle op=write; then n=5 ok stray peer=", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			// Bytes the peer sent unasked stay in the socket, unread, and
			// the question is not sent.
			_, _ = peer.Write([]byte("stray"))
			time.Sleep(20 * time.Millisecond)
			c.AskIdle([]byte("ping"))
			_, err := c.Read(make([]byte, 8))
			var oe *net.OpError
			out := describe(0, err)
			if errors.Is(err, ErrNotIdle) && errors.As(err, &oe) {
				out = "not-idle op=" + oe.Op
			}
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			_ = c.CloseWrite()
			_ = peer.SetReadDeadline(time.Now().Add(2 * time.Second))
			sent, _ := io.ReadAll(peer)
			return out + "; then " + describe(n, err) + " " + string(buf[:n]) + " peer=" + string(sent)
		}},
		{"idle-peer-closed", "not-idle", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			peer.Close()
			time.Sleep(20 * time.Millisecond)
			c.AskIdle([]byte("ping"))
			_, err := c.Read(make([]byte, 8))
			if errors.Is(err, ErrNotIdle) {
				return "not-idle"
			}
			return describe(0, err)
		}},
		{"reply-answer-then-request", "n=4 ok next peer=answer", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			got := answers(peer, 6, "next")
			reply(c, []byte("answer"))
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			return describe(n, err) + " " + string(buf[:n]) + " peer=" + <-got
		}},
		{"reply-deadline-past-still-answers", "[timeout deadline op=read net=tcp] peer=answer", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			// The read cannot start (the drain sets a deadline in the
			// past to wake idle connections), but the answer goes out.
			_ = c.SetReadDeadline(time.Now().Add(-time.Second))
			reply(c, []byte("answer"))
			out := describe(c.Read(make([]byte, 8)))
			_ = c.CloseWrite()
			got, _ := io.ReadAll(peer)
			return out + " peer=" + string(got)
		}},
		{"reply-closed-peer", "reset-or-pipe op=write", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			_ = peer.SetLinger(0)
			peer.Close()
			time.Sleep(20 * time.Millisecond)
			reply(c, []byte("answer"))
			_, err := c.Read(make([]byte, 8))
			var oe *net.OpError
			if (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) && errors.As(err, &oe) {
				return "reset-or-pipe op=" + oe.Op
			}
			return describe(0, err)
		}},
		{"hold-then-read-sends-kept", "n=4 ok next peer=answer", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			got := answers(peer, 6, "next")
			c.Hold(make([]byte, 0, 16))
			_, _ = c.Write([]byte("ans"))
			_, _ = c.Write([]byte("wer"))
			c.Unhold()
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			if c.Release() != nil {
				return "release failed"
			}
			return describe(n, err) + " " + string(buf[:n]) + " peer=" + <-got
		}},
		{"hold-overflow-and-later-writes-keep-order", "peer=abcdefghij-xyz", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			c.Hold(make([]byte, 0, 4))
			_, _ = c.Write([]byte("abc"))
			_, _ = c.Write([]byte("defghij")) // does not fit: ends the hold, after abc
			_, _ = c.Write([]byte("-"))
			c.Unhold()
			c.Hold(make([]byte, 0, 4))
			_, _ = c.Write([]byte("xy"))
			c.Unhold()
			_, _ = c.Write([]byte("z")) // kept bytes go first
			_ = c.CloseWrite()
			got, _ := io.ReadAll(peer)
			return "peer=" + string(got)
		}},
		{"hold-release", "peer=kept", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			c.Hold(make([]byte, 0, 8))
			_, _ = c.Write([]byte("kept"))
			c.Unhold()
			if err := c.Release(); err != nil {
				return err.Error()
			}
			_ = c.CloseWrite()
			got, _ := io.ReadAll(peer)
			return "peer=" + string(got)
		}},
		// The socket is full when the Read starts (a client that reads
		// late): what it does not take goes as Write's would, in order,
		// before the Read waits; under a write deadline that passes
		// (the edge's stall bound), the Read fails as a write.
		{"reply-full-socket", "n=4 ok next peer=in-order", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			before := fill(t, c)
			answer := []byte(strings.Repeat("answer.", 600))
			got := make(chan string, 1)
			go func() {
				time.Sleep(50 * time.Millisecond) // the Read has begun
				got <- readExpect(peer, before, answer)
				_, _ = peer.Write([]byte("next"))
			}()
			reply(c, answer)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			return describe(n, err) + " " + string(buf[:n]) + " peer=" + <-got
		}},
		{"reply-full-socket-deadline-past", "[timeout deadline op=read net=tcp] peer=in-order", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			before := fill(t, c)
			answer := []byte(strings.Repeat("answer.", 600))
			got := make(chan string, 1)
			go func() {
				time.Sleep(50 * time.Millisecond)
				got <- readExpect(peer, before, answer)
			}()
			_ = c.SetReadDeadline(time.Now().Add(-time.Second))
			reply(c, answer)
			out := describe(c.Read(make([]byte, 8)))
			return out + " peer=" + <-got
		}},
		{"reply-full-socket-stalls", "[timeout deadline op=write net=tcp]", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			fill(t, c)
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			reply(c, []byte(strings.Repeat("answer.", 600)))
			return describe(c.Read(make([]byte, 8)))
		}},
		{"empty-ask-reads-first", "n=3 ok abc", func(t *testing.T, c *Conn, peer *net.TCPConn) string {
			// Nothing to send: the read must try before it waits, or
			// bytes already there would wait for the next edge.
			_, _ = peer.Write([]byte("abc"))
			time.Sleep(20 * time.Millisecond)
			c.Ask([]byte{})
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 8)
			n, err := c.Read(buf)
			return describe(n, err) + " " + string(buf[:n])
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := pair(t, Wrap)
			if got := tc.run(t, c.(*Conn), peer); got != tc.want {
				t.Errorf("%s, want %s", got, tc.want)
			}
		})
	}
}

// TestAskSavesARead: an exchange sent with Ask makes one read system call,
// where a write followed by a read makes two when the answer is not there
// yet: the read finds nothing (EAGAIN) before it waits. The peer answers
// after a pause, so the answer is never there yet, and only the client's
// own reads are counted: its goroutine is locked to its thread, whose
// count it reads.
func TestAskSavesARead(t *testing.T) {
	const rounds = 100
	count := func(ask bool) int {
		c, peer := pair(t, Wrap)
		go func() {
			buf := make([]byte, 4)
			for {
				if _, err := io.ReadFull(peer, buf); err != nil {
					return
				}
				time.Sleep(time.Millisecond)
				if _, err := peer.Write(buf); err != nil {
					return
				}
			}
		}()
		msg := []byte("ping")
		buf := make([]byte, 4)
		for range rounds {
			if ask {
				c.(*Conn).Ask(msg)
			} else if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatal(err)
			}
		}
		return c.(*Conn).calls
	}
	plain, ask := count(false), count(true)
	t.Logf("the client's read calls over %d exchanges: write+read %d, ask %d", rounds, plain, ask)
	if ask > rounds {
		t.Errorf("ask made %d read calls over %d exchanges: want one each", ask, rounds)
	}
	if plain < ask+rounds/2 {
		t.Errorf("write+read made %d read calls, ask %d: want at least %d more", plain, ask, rounds/2)
	}
}

// BenchmarkSocketCalls is why a Conn receives and sends with recvfrom and
// sendto: the same 1 KiB over one loopback connection, sent and then
// received on one thread, by each pair of system calls. read and write
// reach the same socket code through the file layer first.
func BenchmarkSocketCalls(b *testing.B) {
	for _, tc := range []struct {
		name        string
		send, recv  uintptr
		sendFlags   uintptr
		sixArgument bool
	}{
		{"read-write", syscall.SYS_WRITE, syscall.SYS_READ, 0, false},
		{"recvfrom-sendto", unix.SYS_SENDTO, unix.SYS_RECVFROM, syscall.MSG_NOSIGNAL, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, peer := pair(b, func(c net.Conn) net.Conn { return c })
			fd := func(c syscall.Conn) uintptr {
				var fd uintptr
				rc, err := c.SyscallConn()
				if err != nil {
					b.Fatal(err)
				}
				_ = rc.Control(func(f uintptr) { fd = f })
				return fd
			}
			// The descriptors stay open: c and peer are closed by pair's
			// cleanup, after the loop.
			out, in := fd(c.(*net.TCPConn)), fd(peer)
			msg, buf := make([]byte, 1024), make([]byte, 4096)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for b.Loop() {
				var e syscall.Errno
				if tc.sixArgument {
					_, _, e = syscall.RawSyscall6(tc.send, out, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)), tc.sendFlags, 0, 0)
				} else {
					_, _, e = syscall.RawSyscall(tc.send, out, uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
				}
				if e != 0 {
					b.Fatal(e)
				}
				got := 0
				for got < len(msg) {
					var n uintptr
					if tc.sixArgument {
						n, _, e = syscall.RawSyscall6(tc.recv, in, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
					} else {
						n, _, e = syscall.RawSyscall(tc.recv, in, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
					}
					switch e {
					case 0:
						got += int(n)
					case syscall.EAGAIN:
					default:
						b.Fatal(e)
					}
				}
			}
		})
	}
}

// BenchmarkEmptyCalls is what a system call that does nothing costs on
// the machine: the EAGAIN read that began every wait for a client's next
// request (until Hold), the pool's peek (AskIdle), and getpid for
// reference. On a paravirtual guest this is far from free.
func BenchmarkEmptyCalls(b *testing.B) {
	c, peer := pair(b, func(c net.Conn) net.Conn { return c })
	_ = c
	var fd uintptr
	rc, err := peer.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	_ = rc.Control(func(f uintptr) { fd = f })
	buf := make([]byte, 4096)
	for _, tc := range []struct {
		name string
		call func() syscall.Errno
	}{
		{"getpid", func() syscall.Errno { _, _, e := syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0); return e }},
		{"recvfrom-eagain", func() syscall.Errno {
			_, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), syscall.MSG_DONTWAIT, 0, 0)
			return e
		}},
		{"peek-eagain", func() syscall.Errno { return peek(fd) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for b.Loop() {
				if e := tc.call(); e != 0 && e != syscall.EAGAIN {
					b.Fatal(e)
				}
			}
		})
	}
}

// fill writes to c until its socket and its peer's take no more (the peer
// reads nothing): until a write makes no progress for 50 ms. It returns
// how much went.
func fill(t *testing.T, c *Conn) int {
	t.Helper()
	_ = c.SetWriteBuffer(16 << 10)
	total := 0
	buf := make([]byte, 1<<20)
	for range 200 {
		_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := c.Write(buf)
		total += n
		if !errors.Is(err, os.ErrDeadlineExceeded) && err != nil {
			t.Fatalf("filling: %v", err)
		}
		if n == 0 {
			_ = c.SetWriteDeadline(time.Time{})
			return total
		}
	}
	t.Fatalf("filling: the socket still takes bytes after %d", total)
	return 0
}

// readExpect reads skip bytes (zeros, from fill) and then want from r, and
// says whether they came so.
func readExpect(r io.Reader, skip int, want []byte) string {
	b := make([]byte, skip+len(want))
	if n, err := io.ReadFull(r, b); err != nil {
		return fmt.Sprintf("%d bytes: %v", n, err)
	}
	if !bytes.Equal(b[:skip], make([]byte, skip)) || !bytes.Equal(b[skip:], want) {
		return "out of order"
	}
	return "in-order"
}
