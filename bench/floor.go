//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gatehouse-dev/gatehouse/internal/gcfloor"
	"github.com/gatehouse-dev/gatehouse/internal/lane"
	"github.com/gatehouse-dev/gatehouse/internal/proxy"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// The floors are measured beside gatehouse so the report can say how much
// of gatehouse's L7 cost is Go's, how much its request machinery's and how
// much its chain's: the harness re-executes itself as `bench floor -mode
// go|epoll|lane|bytes ...` (bytes: floorbytes.go). go and epoll are the
// least a Go proxy can do for the L7 test: each reads a request head,
// sends it to the backend unchanged over a connection of its own, reads
// the answer by its Content-Length and sends it back in one write. No
// routing, no header work, no limits: what is left is the runtime and the
// system calls.
//
//   - go: a goroutine per client connection on net.Conn, the way every Go
//     server (gatehouse included) is built.
//   - epoll: one locked thread per core, each with its own epoll set and
//     SO_REUSEPORT listener, reading only what epoll says is readable: the
//     shape of nginx's and HAProxy's event loops, in Go.
//   - lane: gatehouse's own HTTP/1.1 machinery with none of its chain:
//     internal/lane serving each connection into internal/proxy's fast
//     path, with internal/sock's raw system calls and the GC floor as
//     gatehouse runs them, the route a fixed one-app table. Between go and gatehouse it
//     splits the cost of net/http's request types (parsed, header maps,
//     written back) from that of the gateway's layers.
//
// go and epoll serve the L7 test's requests (bodiless, HTTP/1.1, answers
// with a Content-Length up to 64 KiB) and nothing else: a request with a body, a
// head of 8 KiB or more, or an answer without a Content-Length or over 64
// KiB closes the connection.

// floorMax bounds a head or an answer the floors hold.
const floorMax = 64 << 10

type floorFlags struct{ mode, listen, backend string }

func runFloor(args []string) error {
	var f floorFlags
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	fs.StringVar(&f.mode, "mode", "go", "go (goroutine per connection), epoll (an event loop per core), lane (gatehouse's lane and proxy, no chain) or bytes (gatehouse's L7 work on bytes; floorbytes.go)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:0", "listen address")
	fs.StringVar(&f.backend, "backend", "", "backend address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.backend == "" {
		return errors.New("floor: -backend is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run, ok := floorModes[f.mode]
	if !ok {
		return fmt.Errorf("floor: -mode %q: want go, epoll, lane or bytes", f.mode)
	}
	return run(ctx, f.listen, f.backend)
}

var floorModes = map[string]func(ctx context.Context, listen, backend string) error{
	"go":    floorGo,
	"epoll": floorEpoll,
	"lane":  floorLane,
	"bytes": floorBytes,
}

// headEnd returns the length of the head at the start of b, or -1 while
// it is incomplete.
func headEnd(b []byte) int {
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return i + 4
	}
	return -1
}

// contentLength returns the Content-Length of a head, or -1.
func contentLength(head []byte) int {
	for line := range bytes.SplitSeq(head, []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Content-Length")) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n < 0 {
				return -1
			}
			return n
		}
	}
	return -1
}

// answerEnd returns the length of the whole answer at the start of b, 0
// while it is incomplete, -1 when the floors cannot carry it.
func answerEnd(b []byte) int {
	h := headEnd(b)
	if h < 0 {
		if len(b) >= floorMax {
			return -1
		}
		return 0
	}
	n := contentLength(b[:h])
	if n < 0 || h+n > floorMax {
		return -1
	}
	if len(b) < h+n {
		return 0
	}
	return h + n
}

// requestEnd is answerEnd for a request: only bodiless ones.
func requestEnd(b []byte) int {
	h := headEnd(b)
	if h < 0 {
		if len(b) >= 8<<10 {
			return -1
		}
		return 0
	}
	if n := contentLength(b[:h]); n > 0 {
		return -1
	}
	return h
}

func floorGo(ctx context.Context, listen, backend string) error {
	return servePairs(ctx, listen, backend, floorGoServe)
}

// servePairs accepts client connections on listen and, on a goroutine
// each, dials backend and calls serve with both, until ctx ends: then
// every connection is closed, so their goroutines return.
func servePairs(ctx context.Context, listen, backend string, serve func(c, u net.Conn)) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range open {
			c.Close()
		}
	})
	defer stop()
	track := func(c net.Conn, on bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if on && ctx.Err() != nil {
			return false
		}
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
		return true
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if !track(c, true) {
				return
			}
			defer track(c, false)
			u, err := net.Dial("tcp", backend)
			if err != nil {
				return
			}
			defer u.Close()
			if !track(u, true) {
				return
			}
			defer track(u, false)
			serve(c, u)
		}()
	}
}

// floorGoServe relays requests from c to u and answers back until either
// side ends.
func floorGoServe(c, u net.Conn) {
	in := make([]byte, 0, 8<<10)
	out := make([]byte, 0, floorMax)
	for {
		var n int
		if in, n = readUntil(c, in, requestEnd); n < 0 {
			return
		}
		if _, err := u.Write(in[:n]); err != nil {
			return
		}
		in = in[:copy(in, in[n:])]
		var m int
		if out, m = readUntil(u, out, answerEnd); m < 0 {
			return
		}
		if _, err := c.Write(out[:m]); err != nil {
			return
		}
		out = out[:copy(out, out[m:])]
	}
}

// readUntil reads from c into buf, up to its capacity, until end finds a
// whole message at its start, and returns buf and the message's length:
// -1 when end says the floors cannot carry it or c ended first.
func readUntil(c net.Conn, buf []byte, end func([]byte) int) ([]byte, int) {
	n := end(buf)
	for n == 0 {
		k, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if n = end(buf); err != nil && n <= 0 {
			return buf, -1
		}
	}
	return buf, n
}

func floorEpoll(ctx context.Context, listen, backend string) error {
	la, err := net.ResolveTCPAddr("tcp4", listen)
	if err != nil {
		return err
	}
	if la.Port == 0 {
		return errors.New("floor: -mode epoll needs -listen with a port: each loop binds it with SO_REUSEPORT")
	}
	ba, err := net.ResolveTCPAddr("tcp4", backend)
	if err != nil {
		return err
	}
	var loops []*floorLoop
	for range runtime.GOMAXPROCS(0) {
		l, err := newFloorLoop(la, ba)
		if err != nil {
			for _, l := range loops {
				l.close()
			}
			return err
		}
		loops = append(loops, l)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(loops))
	for i, l := range loops {
		stop := context.AfterFunc(ctx, l.wake)
		defer stop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.run(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// floorLoop is one event loop: a listener of its own (SO_REUSEPORT spreads
// new connections over the loops), an epoll set, and its connections.
type floorLoop struct {
	ep, ln, ev int // epoll set, listener, eventfd that ends the loop
	backend    syscall.SockaddrInet4
	conns      map[int]*floorPair
}

// floorPair is a client connection and the backend connection that serves
// it; both descriptors map to it.
type floorPair struct {
	c, u    int
	in, out []byte
}

func sockaddr(a *net.TCPAddr) syscall.SockaddrInet4 {
	var s syscall.SockaddrInet4
	s.Port = a.Port
	copy(s.Addr[:], a.IP.To4())
	return s
}

func newFloorLoop(la, ba *net.TCPAddr) (*floorLoop, error) {
	l := &floorLoop{ep: -1, ln: -1, ev: -1, backend: sockaddr(ba), conns: map[int]*floorPair{}}
	if err := l.open(la); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// open makes the loop's listener, epoll set and eventfd.
func (l *floorLoop) open(la *net.TCPAddr) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	l.ln = fd
	_ = syscall.SetsockoptInt(l.ln, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.SetsockoptInt(l.ln, syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1); err != nil {
		return err
	}
	sa := sockaddr(la)
	if err := syscall.Bind(l.ln, &sa); err != nil {
		return fmt.Errorf("floor: bind %s: %w", la, err)
	}
	if err := syscall.Listen(l.ln, 4096); err != nil {
		return err
	}
	if fd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return err
	}
	l.ep = fd
	r, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if e != 0 {
		return os.NewSyscallError("eventfd2", e)
	}
	l.ev = int(r)
	for _, fd := range []int{l.ln, l.ev} {
		if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
			return err
		}
	}
	return nil
}

// close closes the loop's descriptors and connections.
func (l *floorLoop) close() {
	for fd, p := range l.conns {
		if fd == p.c {
			l.drop(p)
		}
	}
	for _, fd := range []int{l.ln, l.ev, l.ep} {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// wake ends the loop from another goroutine.
func (l *floorLoop) wake() {
	one := [8]byte{1}
	_, _ = syscall.Write(l.ev, one[:])
}

func (l *floorLoop) run(ctx context.Context) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer l.close()
	events := make([]syscall.EpollEvent, 128)
	for ctx.Err() == nil {
		n, err := syscall.EpollWait(l.ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			switch fd {
			case l.ev:
				return nil
			case l.ln:
				l.accept()
			default:
				if p := l.conns[fd]; p != nil {
					if fd == p.c {
						l.fromClient(p)
					} else {
						l.fromBackend(p)
					}
				}
			}
		}
	}
	return nil
}

func (l *floorLoop) accept() {
	for {
		c, _, err := syscall.Accept4(l.ln, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: all taken
		}
		_ = syscall.SetsockoptInt(c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		// A blocking connect: a loopback backend answers at once, and the
		// floor measures requests on kept connections, not set-up.
		u, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			if err = syscall.Connect(u, &l.backend); err == nil {
				err = syscall.SetNonblock(u, true)
			}
			if err != nil {
				syscall.Close(u)
			}
		}
		if err != nil {
			syscall.Close(c)
			continue
		}
		_ = syscall.SetsockoptInt(u, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		p := &floorPair{c: c, u: u, in: make([]byte, 0, 8<<10), out: make([]byte, 0, floorMax)}
		l.conns[c], l.conns[u] = p, p
		for _, fd := range []int{c, u} {
			_ = syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)})
		}
	}
}

func (l *floorLoop) drop(p *floorPair) {
	delete(l.conns, p.c)
	delete(l.conns, p.u)
	syscall.Close(p.c) // closing removes them from the epoll set
	syscall.Close(p.u)
}

// readInto and writeAll make raw system calls, as gatehouse's
// internal/sock does: the descriptors never block, so the runtime need not
// be told, and sysmon never hands the loop's P to another thread.

// readInto reads once from fd into the free part of b.
func readInto(fd int, b []byte) ([]byte, bool) {
	if len(b) == cap(b) {
		return b, false
	}
	q := b[len(b):cap(b)]
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(q))), uintptr(len(q)))
	if e == syscall.EAGAIN {
		return b, true
	}
	if e != 0 || n == 0 {
		return b, false
	}
	return b[:len(b)+int(n)], true
}

// writeAll writes b to a non-blocking socket; the floors' writes fit in
// the socket buffer, so a full buffer only makes it try again.
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e == syscall.EAGAIN || e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// fromClient relays the client's whole requests to the backend.
func (l *floorLoop) fromClient(p *floorPair) { l.relay(p, p.c, p.u, &p.in, requestEnd) }

// fromBackend relays the backend's whole answers to the client.
func (l *floorLoop) fromBackend(p *floorPair) { l.relay(p, p.u, p.c, &p.out, answerEnd) }

// relay reads what is readable on from into buf and writes each whole
// message end finds there to to; anything it cannot carry drops the pair.
func (l *floorLoop) relay(p *floorPair, from, to int, buf *[]byte, end func([]byte) int) {
	var ok bool
	if *buf, ok = readInto(from, *buf); !ok {
		l.drop(p)
		return
	}
	for {
		n := end(*buf)
		if n == 0 {
			return
		}
		if n < 0 || !writeAll(to, (*buf)[:n]) {
			l.drop(p)
			return
		}
		*buf = (*buf)[:copy(*buf, (*buf)[n:])]
	}
}

// floorTable is the route table of the floors that route: app "app" on
// zone "bench.test", one verified plaintext host at backend.
func floorTable(backend string) (*route.Live, error) {
	u, err := url.Parse("http://" + backend)
	if err != nil {
		return nil, err
	}
	live := new(route.Live)
	b := route.NewBuilder(live)
	b.Replace(route.State{
		Zones: []*route.Zone{{Name: "bench.test"}},
		Apps:  []*route.App{{ID: "app", Mode: route.ModeHTTP, Status: route.StatusActive}},
	})
	b.SetHost(&route.Host{ID: "bench-http", Apps: []string{"app"}, Addr: u.Host, Scheme: "http", URL: u, State: route.HostVerified})
	return live, nil
}

// floorLane serves with gatehouse's lane and proxy and nothing between
// them but the route the gateway's route layer would have found: app
// "app" on zone "bench.test", one verified plaintext host at backend. Like
// the other floors it answers only what it can carry: a request the lane
// does not take is refused, never handed to net/http.
func floorLane(ctx context.Context, listen, backend string) error {
	live, err := floorTable(backend)
	if err != nil {
		return err
	}
	// What gatehouse's own set-up adds under the lane: the collector's
	// floor (runtime.gc_floor_mb's default) and raw system calls on the
	// client connections (as internal/edge wraps them).
	defer gcfloor.Start(ctx, 64<<20).Stop()
	p, err := proxy.New(proxy.Options{ClusterID: "bench"})
	if err != nil {
		return err
	}
	defer p.Close()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := live.Load()
		rq := &route.Request{Table: t, Match: t.Lookup(r.Host)}
		p.ServeHTTP(w, r.WithContext(route.WithRequest(r.Context(), rq)))
	})
	s, err := lane.New(lane.Options{Handler: h, Handoff: func(c net.Conn) { c.Close() },
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				s.Close()
				return err
			}
			return s.Close()
		}
		go s.ServeConn(sock.Wrap(c))
	}
}
