//go:build linux

package sock

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is a *net.TCPConn whose Read and Write are raw system calls.
// Everything else (deadlines, Close, CloseWrite, addresses) is the
// TCPConn's.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex // one Read at a time owns rp/rn/rerr
	rp     []byte
	rn     int
	rerr   syscall.Errno
	readFn func(fd uintptr) bool
	// calls counts the receives Reads made (EAGAIN included), for tests:
	// the kernel's per-thread I/O counters see read(2), not recvfrom(2).
	calls int

	// ask is written by the next Read before it waits (Ask); askErr is
	// that write's failure, askStuck says the socket took only part.
	// askIdle says the socket must hold nothing before ask is written
	// (AskIdle); askUnsent that it held something, and ask was not sent.
	// askMust says ask goes out even if the Read cannot start (Hold).
	ask       []byte
	askErr    syscall.Errno
	askStuck  bool
	askIdle   bool
	askUnsent bool
	askMust   bool

	wmu     sync.Mutex // one Write at a time owns wp/wn/werr, and hold/kept
	wp      []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool

	// hold says Writes are kept in kept, not written (Hold); kept is the
	// next Read's reply (or Release's, or the next Write's, first).
	hold bool
	kept []byte
	// holding is hold || kept != nil, for Read to skip wmu when nothing
	// is held (every read of a host's connection, most of a client's).
	holding atomic.Bool
}

// Wrap returns c as a Conn when it is a *net.TCPConn, else c unchanged.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !directCalls() {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	sc := &Conn{TCPConn: tc, rc: rc}
	sc.readFn = sc.read
	sc.writeFn = sc.write
	return sc
}

func (c *Conn) read(fd uintptr) bool {
	if c.ask != nil {
		return c.sendAsk(fd)
	}
	for {
		c.calls++
		n, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.rp))), uintptr(len(c.rp)), 0, 0, 0)
		switch e {
		case 0:
			c.rn, c.rerr = int(n), 0
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // the netpoller waits for readiness, then calls again
		}
		c.rn, c.rerr = 0, e
		return true
	}
}

// Ask has p written at the start of the next Read, which then waits for
// the peer's answer without first trying to read it. Use it for a request
// whose answer the peer sends only after reading it (a host's HTTP/1.1
// response, nothing pipelined): a read right after sending finds nothing
// (EAGAIN) almost every time, a system call per exchange for nothing.
//
// Why it has to be the Read that writes: the runtime forgets readiness it
// saw before a read begins, so a read that skipped its first attempt
// could wait forever for an answer that came before it. Written inside
// the read, p goes out after that point, and so does its answer's edge.
//
// p must stay untouched until that Read returns; the caller must not
// Write concurrently. A failed write is the Read's error (Op "write");
// when the socket takes only part of p, the Read writes the rest as
// Write does and then reads as usual.
func (c *Conn) Ask(p []byte) { c.setAsk(p, false, false) }

// AskIdle is Ask for a connection that should be idle: a kept-alive
// connection to a host, taken from a pool. If the socket already holds
// something (bytes the peer sent after its last answer, which would be
// read as the answer to p; or its end of the stream), p is not written
// and the Read fails with ErrNotIdle. The look costs one more system call,
// a peek that finds nothing.
func (c *Conn) AskIdle(p []byte) { c.setAsk(p, true, false) }

// Hold has the Writes that follow, until Unhold, kept in buf (appended,
// up to its capacity) instead of written: they are the reply of the next
// Read, which writes them at its start, as an Ask's request, and then
// waits for the peer without first trying to read. That is for the last
// of an answer to a client: the client sends its next request only once
// it has the answer, so the request's readiness comes after the Read
// began and is not lost. A client that pipelines may have sent it
// before, and the caller must not hold for one (its readiness can be
// lost, and the Read then waits for the next one, or its deadline).
// A layer that writes through the Conn, such as crypto/tls, has its
// records kept the same way.
//
// Unlike an Ask's request, the reply goes out even when the Read cannot
// start (its deadline has passed, the drain woke it): Read writes it as
// Write does before it returns its error; a failed write is the Read's
// error (Op "write"), as for Ask. A Write that would not fit ends the
// hold: it goes out after what was kept, as do Release and any Write
// after Unhold. buf is the Conn's until that Read, Release or Write has
// sent it. It reports true: a Conn always can (a wrapper that cannot
// reports false, and keeps nothing).
func (c *Conn) Hold(buf []byte) bool {
	c.wmu.Lock()
	c.hold, c.kept = true, buf[:0]
	c.holding.Store(true)
	c.wmu.Unlock()
	return true
}

// Unhold ends the hold: what was kept stays kept, for the next Read.
func (c *Conn) Unhold() {
	c.wmu.Lock()
	c.hold = false
	c.holding.Store(c.kept != nil)
	c.wmu.Unlock()
}

// Release writes what Hold kept now, if the next Read has not: a layer
// above may answer a read from what it buffered, without reading the
// Conn. After it, Hold's buffer is the caller's again.
func (c *Conn) Release() error {
	c.wmu.Lock()
	k := c.kept
	c.hold, c.kept = false, nil
	c.holding.Store(false)
	c.wmu.Unlock()
	if len(k) == 0 {
		return nil
	}
	_, err := c.Write(k)
	return err
}

// Pending reports whether the peer has sent something not yet read: a
// byte, its end of the stream, or an error the next Read would return.
// It never waits, and never takes the read side from a Read under way:
// a goroutine that is not reading asks whether it should (an HTTP/2
// handler running on the connection's reading goroutine). It reports
// true when it cannot look, so that the caller reads and finds out.
func (c *Conn) Pending() bool {
	pending := true
	_ = c.rc.Control(func(fd uintptr) { pending = peek(fd) != syscall.EAGAIN })
	return pending
}

// takeKept returns what Hold kept, unless a hold is still on, and
// forgets it.
func (c *Conn) takeKept() []byte {
	if !c.holding.Load() {
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.hold || len(c.kept) == 0 {
		return nil
	}
	k := c.kept
	c.kept = nil
	c.holding.Store(false)
	return k
}

func (c *Conn) setAsk(p []byte, idle, must bool) {
	if len(p) == 0 {
		return // nothing sent: the read must try first
	}
	c.rmu.Lock()
	c.ask, c.askErr, c.askStuck, c.askIdle, c.askUnsent, c.askMust = p, 0, false, idle, false, must
	c.rmu.Unlock()
}

// sendAsk writes c.ask as read's first step. It reports false, so that
// the netpoller waits for readiness, once all of it is written.
func (c *Conn) sendAsk(fd uintptr) bool {
	if c.askIdle {
		c.askIdle = false
		switch e := peek(fd); e {
		case syscall.EAGAIN: // idle, as it should be: ask
		case 0:
			c.askUnsent = true // a byte, or the end of the stream
			return true
		default:
			c.askErr = e // reset by the peer, say
			return true
		}
	}
	n, e := writeAll(fd, c.ask)
	c.ask = c.ask[n:]
	switch e {
	case 0:
		c.ask = nil
		return false
	case syscall.EAGAIN:
		c.askStuck = true
	default:
		c.askErr = e
	}
	return true
}

// Read reads as net.TCPConn's Read does.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	if k := c.takeKept(); k != nil {
		c.setAsk(k, false, true)
	}
	c.rmu.Lock()
	asked := c.ask != nil
	c.rp, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	rest, askErr, stuck, unsent, must := c.ask, c.askErr, c.askStuck, c.askUnsent, c.askMust
	c.rp, c.ask, c.askErr, c.askStuck, c.askIdle, c.askUnsent, c.askMust = nil, nil, 0, false, false, false, false
	c.rmu.Unlock()
	if asked {
		switch {
		case unsent && err == nil:
			return 0, c.opError("write", ErrNotIdle)
		case askErr != 0:
			return 0, c.opError("write", os.NewSyscallError("write", askErr))
		case must && err != nil && len(rest) > 0:
			// The read could not start, or stopped before the answer was
			// all out: the answer goes now, and the read's error after it.
			if _, werr := c.Write(rest); werr != nil {
				return 0, werr
			}
			return 0, c.opError("read", unwrapRaw(err))
		case stuck && err == nil:
			// The socket is full: the rest waits for room as Write's
			// would, and the read starts over with its usual attempt.
			if _, err := c.Write(rest); err != nil {
				return 0, err
			}
			return c.Read(p)
		}
	}
	switch {
	case err != nil:
		return 0, c.opError("read", unwrapRaw(err))
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) write(fd uintptr) bool {
	n, e := writeAll(fd, c.wp[c.wn:])
	c.wn += n
	if e == syscall.EAGAIN {
		return false
	}
	c.werr = e
	return true
}

// peek looks at fd's next byte without taking it or waiting for it:
// EAGAIN when the socket holds nothing, 0 when it holds a byte or the
// peer's end of the stream, else the error.
func peek(fd uintptr) syscall.Errno {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return e
		}
	}
}

// writeAll writes p to fd until all of it is written (errno 0), the
// socket is full (EAGAIN) or the write fails, and says how much went.
func writeAll(fd uintptr, p []byte) (int, syscall.Errno) {
	n := 0
	for n < len(p) {
		q := p[n:]
		k, _, e := syscall.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(q))), uintptr(len(q)), syscall.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			n += int(k)
		case syscall.EINTR:
		default:
			return n, e
		}
	}
	return n, 0
}

// Write writes all of p, as net.TCPConn's Write does.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Write(p)
	}
	c.wmu.Lock()
	if len(c.kept) > 0 || c.hold {
		if c.hold && len(c.kept)+len(p) <= cap(c.kept) {
			c.kept = append(c.kept, p...)
			c.wmu.Unlock()
			return len(p), nil
		}
		// Kept bytes go first, and a Write that does not fit ends the hold.
		k := c.kept
		c.hold, c.kept = false, nil
		c.holding.Store(false)
		if len(k) > 0 {
			if _, err := c.writeLocked(k); err != nil {
				c.wmu.Unlock()
				return 0, err
			}
		}
	}
	n, err := c.writeLocked(p)
	c.wmu.Unlock()
	return n, err
}

// writeLocked writes all of p; under wmu.
func (c *Conn) writeLocked(p []byte) (int, error) {
	c.wp, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wp = nil
	switch {
	case err != nil:
		return n, c.opError("write", unwrapRaw(err))
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// unwrapRaw strips the OpError RawConn puts around its errors ("raw-read"),
// so that the Conn's own OpError carries the cause (a deadline, a close).
func unwrapRaw(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
