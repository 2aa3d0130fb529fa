//go:build linux

package lane

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// parker holds idle plaintext connections without a goroutine each: their
// sockets sit in an epoll set of its own (one-shot, readable or closed),
// and one goroutine waits on it and starts a connection's goroutine again
// when its next request (or its end) arrives. An idle connection waiting
// on the runtime's netpoller instead holds a parked goroutine (its g, a
// 2 KiB stack) and a read buffer: most of its memory.
//
// The woken goroutine reads first, as any new wait does, so a wake-up for
// nothing (a stale event) costs a read, never a lost request. The idle
// timeout is the parker's: a sweep closes connections idle past it, up to
// a sweep period late, but first looks at the set: a connection whose
// request came before the sweep is served, not closed with it unread.
type parker struct {
	s *Server

	mu      sync.Mutex
	epfd    int      // -1: not started, or failed (connections wait as before)
	file    *os.File // epfd, in the runtime's netpoller: the loop waits there
	parked  map[int32]*conn
	stopped bool
	done    chan struct{} // closed when the loop has ended
}

// rawConner is a connection whose socket the parker can watch.
type rawConner interface {
	SyscallConn() (syscall.RawConn, error)
}

func newParker(s *Server) *parker {
	return &parker{s: s, epfd: -1, parked: map[int32]*conn{}}
}

// start creates the epoll set and the loop's goroutine; under p.mu. The
// set's own descriptor is readable while it has events, so the loop waits
// for it in the runtime's netpoller like any socket: no thread blocks in
// epoll_wait (one that did would keep sysmon busy taking its P back).
func (p *parker) start() bool {
	if p.epfd >= 0 {
		return true
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return false
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return false
	}
	f := os.NewFile(uintptr(epfd), "lane-parker")
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // not in the netpoller
		f.Close()
		return false
	}
	p.epfd, p.file = epfd, f
	p.done = make(chan struct{})
	go p.loop(f, rc, p.done)
	return true
}

// can says cn is a connection the parker could hold: a socket it can
// reach, and not TLS (crypto/tls may hold a record it has read).
func (p *parker) can(cn *conn) bool {
	_, ok := cn.c.(rawConner)
	return ok && cn.tls == nil
}

// park takes cn, idle with nothing read, off its goroutine. It reports
// false when it cannot (TLS, no socket, drain or Close begun): the caller
// waits as before.
func (p *parker) park(cn *conn) bool {
	if cn.n != 0 || cn.x != nil || !p.can(cn) {
		return false
	}
	raw, err := cn.c.(rawConner).SyscallConn()
	if err != nil {
		return false
	}
	p.mu.Lock()
	var stale *conn
	defer func() {
		p.mu.Unlock()
		if stale != nil {
			stale.end()
		}
	}()
	// Checked under p.mu: Shutdown sets draining before it takes p.mu to
	// close what is parked, so nothing parks after that sweep.
	if p.stopped || p.s.draining.Load() || !p.start() {
		return false
	}
	var fd int32 = -1
	var ctlErr error
	err = raw.Control(func(sfd uintptr) {
		fd = int32(sfd)
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: fd}
		op := syscall.EPOLL_CTL_MOD
		if !cn.registered {
			op = syscall.EPOLL_CTL_ADD
		}
		// Registering checks readiness now: bytes that came before it
		// are an event at once, not a lost one.
		ctlErr = syscall.EpollCtl(p.epfd, op, int(sfd), &ev)
	})
	if err != nil || ctlErr != nil || fd < 0 {
		return false // not watched (the epoll watch limit, say): a goroutine waits
	}
	cn.registered = true
	if old := p.parked[fd]; old != nil && old != cn {
		// That socket was closed under the parker (its number is taken
		// again): the connection it held is over.
		delete(p.parked, fd)
		stale = old
	}
	cn.state.Store(stateIdle)
	cn.releaseBuf()
	if cn.watch != nil {
		cn.watch.Stop() // a timer less while idle; the next request makes one
		cn.watch = nil
	}
	p.parked[fd] = cn
	return true
}

// sweepEvery bounds how late an idle timeout closes a parked connection.
func (p *parker) sweepEvery() time.Duration {
	t := p.s.opts.IdleTimeout
	if t <= 0 || t > 4*time.Second {
		return time.Second
	}
	return max(t/4, 10*time.Millisecond)
}

func (p *parker) loop(f *os.File, rc syscall.RawConn, done chan struct{}) {
	defer close(done)
	events := make([]syscall.EpollEvent, 128)
	every := p.sweepEvery()
	next := time.Now().Add(every)
	_ = f.SetReadDeadline(next)
	for {
		n := 0
		err := rc.Read(func(fd uintptr) bool {
			r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
			if e != 0 || r == 0 {
				return false // nothing ready (EINTR alike): wait for the set's readiness
			}
			n = int(r)
			return true
		})
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
		case err != nil:
			return // closed: Close or Shutdown's stop
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		woken := p.take(nil, events[:n])
		var expired []*conn
		if now := time.Now(); !now.Before(next) {
			next = now.Add(every)
			_ = f.SetReadDeadline(next)
			if t := p.s.opts.IdleTimeout; t > 0 {
				var due []int32
				for fd, cn := range p.parked {
					if now.Sub(cn.idleSince) >= t {
						due = append(due, fd)
					}
				}
				if len(due) > 0 {
					// A request that came before now may be in the set
					// unseen: the wait's deadline can end it before it
					// looked (the runtime runs due timers before it polls
					// the network). Its connection is not idle.
					woken = p.look(woken, events)
				}
				for _, fd := range due {
					if cn := p.parked[fd]; cn != nil {
						delete(p.parked, fd)
						expired = append(expired, cn)
					}
				}
			}
		}
		p.mu.Unlock()
		for _, cn := range woken {
			p.s.resume(cn)
		}
		for _, cn := range expired {
			cn.end()
		}
	}
}

// take moves the parked connections that events name to woken; under p.mu.
func (p *parker) take(woken []*conn, events []syscall.EpollEvent) []*conn {
	for _, ev := range events {
		if cn := p.parked[ev.Fd]; cn != nil {
			delete(p.parked, ev.Fd)
			woken = append(woken, cn)
		}
	}
	return woken
}

// look takes what the set has ready now, without waiting; under p.mu. A
// one-shot event comes once until its socket is parked again, which needs
// p.mu: the set runs dry.
func (p *parker) look(woken []*conn, events []syscall.EpollEvent) []*conn {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(p.epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
		if e != 0 || r == 0 {
			return woken
		}
		woken = p.take(woken, events[:r])
		if int(r) < len(events) {
			return woken
		}
	}
}

// closeAll ends every parked connection (drain: they are idle); stop
// ends the loop too.
func (p *parker) closeAll(stop bool) {
	p.mu.Lock()
	if stop {
		p.stopped = true
	}
	cs := make([]*conn, 0, len(p.parked))
	for fd, cn := range p.parked {
		delete(p.parked, fd)
		cs = append(cs, cn)
	}
	f, done := p.file, p.done
	if stop {
		p.epfd, p.file = -1, nil
	}
	p.mu.Unlock()
	if stop && f != nil {
		f.Close() // ends the loop's wait (Close waits for that read to let go)
	}
	for _, cn := range cs {
		cn.end()
	}
	if stop && f != nil {
		<-done
	}
}
