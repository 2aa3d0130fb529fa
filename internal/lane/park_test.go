//go:build linux

package lane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/workers"
)

// client is one keep-alive test connection.
type client struct {
	c  net.Conn
	br *bufio.Reader
}

func dialClients(t *testing.T, addr string, n int) []*client {
	t.Helper()
	cs := make([]*client, n)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		cs[i] = &client{c: c, br: bufio.NewReader(c)}
	}
	return cs
}

func (cl *client) roundTrip(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(cl.c, get(path)); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b, _ := io.ReadAll(res.Body); string(b) != "GET "+path {
		t.Fatalf("%s: body %q", path, b)
	}
}

// goroutinesSettle waits until the goroutine count is at most want and
// returns the last count seen.
func goroutinesSettle(want int) int {
	n := runtime.NumGoroutine()
	for end := time.Now().Add(3 * time.Second); n > want && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// TestIdleConnectionsHoldNoGoroutine: kept-alive plaintext connections
// between requests cost no goroutine each (the parker holds them), and
// every one is served again when its next request comes, however many
// wait together.
func TestIdleConnectionsHoldNoGoroutine(t *testing.T) {
	// Not parallel: it counts the process's goroutines, and every
	// parallel test waits until the serial ones are done.
	const n = 200
	th := &testHandler{}
	_, addr, s := servers(t, th, Options{IdleTimeout: 30 * time.Second})
	base := runtime.NumGoroutine()
	cs := dialClients(t, addr, n)
	for round := range 3 {
		for _, cl := range cs {
			cl.roundTrip(t, "/r"+string(rune('0'+round)))
		}
		// After the first request, and after each later one once the warm
		// wait is over, the connection is parked.
		// What may wait besides: the reused goroutines that served the
		// woken ones, a bounded number whatever n is.
		time.Sleep(warmFor + 100*time.Millisecond)
		if want := base + 10 + workers.DefaultMaxIdle; goroutinesSettle(want) > want {
			t.Fatalf("round %d: %d goroutines with %d idle connections (%d before): want no goroutine per connection", round, runtime.NumGoroutine(), n, base)
		}
	}
	// Requests sent all at once, to connections all parked: each wakes.
	for _, cl := range cs {
		if _, err := io.WriteString(cl.c, get("/burst")); err != nil {
			t.Fatal(err)
		}
	}
	for _, cl := range cs {
		res, err := http.ReadResponse(cl.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(res.Body); string(b) != "GET /burst" {
			t.Fatalf("body %q", b)
		}
	}
	if got := th.lane.Load(); got != 4*n {
		t.Fatalf("lane served %d requests, want %d", got, 4*n)
	}
	// Clients that leave while parked: their connections end.
	for _, cl := range cs {
		cl.c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with every client gone: %v", err)
	}
}

// TestResumedOnReusedGoroutine: after its first request a connection is
// served by one reused goroutine, whether its next request comes to the
// fresh goroutine that waits for it (the second, at once), during a warm
// wait (the third), or to the parker (the rest, each after an idle spell):
// not by a fresh goroutine that grows its stack anew.
func TestResumedOnReusedGoroutine(t *testing.T) {
	t.Parallel()
	th := &testHandler{}
	_, addr, s := servers(t, th, Options{IdleTimeout: 30 * time.Second})
	cl := dialClients(t, addr, 1)[0]
	cl.roundTrip(t, "/first")
	cl.roundTrip(t, "/second")
	cl.roundTrip(t, "/third")
	for i := range 3 {
		// Parked again, and the goroutine that served the last request
		// back waiting in its pool: it waits warm for warmFor first, so
		// 500 ms more is the margin a busy machine gets.
		time.Sleep(warmFor + 500*time.Millisecond)
		cl.roundTrip(t, "/r"+string(rune('0'+i)))
	}
	if got := th.lane.Load(); got != 6 {
		t.Fatalf("lane served %d requests, want 6", got)
	}
	if n := s.resumers.Started(); n != 1 {
		t.Fatalf("%d reused goroutines started for one connection's 5 requests after its first, want 1", n)
	}

	// A connection parked straight from the goroutine that waited after
	// its first request: its later requests also take one reused goroutine.
	th2 := &testHandler{}
	_, addr2, s2 := servers(t, th2, Options{IdleTimeout: 30 * time.Second})
	cl2 := dialClients(t, addr2, 1)[0]
	for i := range 3 {
		cl2.roundTrip(t, "/p"+string(rune('0'+i)))
		time.Sleep(warmFor + 500*time.Millisecond) // parked, its goroutine back in the pool
	}
	if got := th2.lane.Load(); got != 3 {
		t.Fatalf("lane served %d requests, want 3", got)
	}
	if n := s2.resumers.Started(); n != 1 {
		t.Fatalf("%d reused goroutines started for two resumes of one connection, want 1", n)
	}
}

// TestParkedConnectionEnds: a parked connection is closed by the idle
// timeout (about on time), by Shutdown (at once) and by Close; and a
// request sent just as the connection parks is not lost.
func TestParkedConnectionEnds(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	cases := []struct {
		name string
		end  func(s *Server) // nil: the idle timeout
		min  time.Duration   // the close comes no sooner after the request
		max  time.Duration   // nor later
	}{
		{"idle-timeout", nil, idle, idle + 2*time.Second}, // a sweep is every idle/4
		{"shutdown", func(s *Server) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}, 0, time.Second},
		{"close", func(s *Server) { s.Close() }, 0, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			th := &testHandler{}
			_, addr, s := servers(t, th, Options{IdleTimeout: idle})
			cl := dialClients(t, addr, 1)[0]
			// Read before the request: the idle wait begins after the
			// answer, so this clock never reads it short however late
			// this goroutine runs.
			start := time.Now()
			cl.roundTrip(t, "/one")
			if tc.end != nil {
				time.Sleep(warmFor + 50*time.Millisecond) // parked by now
				start = time.Now()
				go tc.end(s)
			}
			if _, err := cl.br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Fatalf("read on the parked connection: %v, want EOF", err)
			}
			if d := time.Since(start); d < tc.min || d > tc.max {
				t.Fatalf("closed %v after the request, want %v-%v", d, tc.min, tc.max)
			}
		})
	}
	t.Run("request-as-it-parks", func(t *testing.T) {
		th := &testHandler{}
		_, addr, _ := servers(t, th, Options{IdleTimeout: 10 * time.Second})
		cl := dialClients(t, addr, 1)[0]
		for i := range 200 {
			// The next request follows its response at once: it races
			// the connection's way into the parker.
			cl.roundTrip(t, "/n"+string(rune('a'+i%26)))
		}
	})
}

// BenchmarkIdleConnection reports the memory each idle kept-alive
// connection holds in the process (heap and stacks), served by the lane
// over loopback TCP, after one request each (1,000 of them: 2,000
// descriptors, under any usual limit).
func BenchmarkIdleConnection(b *testing.B) {
	const n = 1000
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	addr := laneListener(b, h)
	inUse := testutil.HeapInUse
	var sum float64
	for range b.N {
		before := inUse()
		conns := make([]net.Conn, n)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				b.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
		}
		time.Sleep(warmFor + 200*time.Millisecond) // past the warm wait: parked
		after := inUse()
		sum += float64(after) - float64(before)
		for _, c := range conns {
			c.Close()
		}
	}
	// Both ends are in this process: the client's side is counted too.
	b.ReportMetric(sum/float64(b.N)/n, "B/conn-pair")
}

// TestParkerStress: clients that request, pause past the warm wait, leave
// and come back, on many connections at once, while the server drains and
// closes: every request that got an answer got the right one, and
// Shutdown and Close return (no connection is lost between the parker and
// its goroutines).
func TestParkerStress(t *testing.T) {
	t.Parallel()
	th := &testHandler{}
	_, addr, s := servers(t, th, Options{IdleTimeout: 400 * time.Millisecond})
	const clients = 40
	stop := make(chan struct{})
	done := make(chan int, clients)
	for i := range clients {
		go func() {
			answered := 0
			defer func() { done <- answered }()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return // the listener is gone
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				for k := range 1 + (i+j)%4 {
					path := "/s" + string(rune('a'+k))
					if _, err := io.WriteString(c, get(path)); err != nil {
						break
					}
					res, err := http.ReadResponse(br, nil)
					if err != nil {
						break // closed by drain or the idle timeout
					}
					b, _ := io.ReadAll(res.Body)
					if string(b) != "GET "+path {
						t.Errorf("body %q for %s", b, path)
					}
					answered++
					switch (i + j + k) % 3 {
					case 0:
						time.Sleep(warmFor + 20*time.Millisecond) // parked in between
					case 1:
						time.Sleep(time.Duration(k) * time.Millisecond)
					}
				}
				c.Close()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	time.Sleep(100 * time.Millisecond)
	close(stop)
	total := 0
	for range clients {
		total += <-done
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if total == 0 {
		t.Fatal("no request was answered")
	}
	t.Logf("%d requests answered", total)
}

// BenchmarkShortConnection: a connection per op that makes two requests,
// the second after the first's response, then closes: the first wait
// between them is where an idle connection is parked. cpu-ns/op is the
// process's CPU (both ends) per connection. The handler writes "ok", with
// a trivial stack or with one of ~16 KiB (a chain and a proxy need more
// than a fresh goroutine starts with).
func BenchmarkShortConnection(b *testing.B) {
	for _, hc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"trivial", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }},
		{"16KiB-stack", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte{'o', 'k' + stackHungry(16)*0}) }},
	} {
		b.Run(hc.name, func(b *testing.B) { shortConnections(b, hc.h) })
	}
}

func shortConnections(b *testing.B, h http.Handler) {
	addr := laneListener(b, h)
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 1024)
	want := len("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n")
	b.ReportAllocs()
	start := processCPU(b)
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		for range 2 {
			if _, err := c.Write(req); err != nil {
				b.Fatal(err)
			}
			if n, err := c.Read(buf); err != nil || n < want {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
		c.Close()
	}
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkResumedRequest: one keep-alive connection whose every request
// comes after it was parked (past the warm wait), to a handler that needs
// ~16 KiB of stack (a chain and a proxy do). cpu-ns/op is the process's
// CPU (both ends) from the request's write to its response's end: the
// parker's wake-up, the goroutine that serves it, its stack.
func BenchmarkResumedRequest(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte{'o', stackHungry(16)})
	})
	addr := laneListener(b, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 1024)
	want := len("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n")
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		time.Sleep(warmFor + 50*time.Millisecond) // parked
		b.StartTimer()
		start := processCPU(b)
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if n, err := c.Read(buf); err != nil || n < want {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		cpu += processCPU(b) - start
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// stackHungry uses about depth KiB of stack.
//
//go:noinline
func stackHungry(depth int) byte {
	var pad [1 << 10]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		return pad[0]
	}
	return stackHungry(depth-1) + pad[depth%len(pad)]
}

// processCPU is the process's user and system time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestParkRefusesWhatItCannotWatch: a socket the epoll set does not take
// (here: modified before it was ever added) is not parked, so its
// goroutine keeps waiting instead of the connection going deaf.
func TestParkRefusesWhatItCannotWatch(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	s, err := New(Options{Handler: h, Handoff: func(c net.Conn) { c.Close() }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, sc := testutil.TCPPair(t)
	cn := &conn{s: s, c: sc, registered: true} // EPOLL_CTL_MOD: ENOENT
	cn.ctx, cn.cancel = context.WithCancel(context.Background())
	if !s.add(cn) {
		t.Fatal("not added")
	}
	cn.acquireBuf()
	if s.parker.park(cn) {
		t.Fatal("parked a socket the epoll set refused")
	}
	if len(s.parker.parked) != 0 || cn.small == nil {
		t.Fatalf("a refused connection changed: %d parked, buffer kept %v", len(s.parker.parked), cn.small != nil)
	}
	cn.registered = false
	if !s.parker.park(cn) {
		t.Fatal("a plain idle socket was not parked")
	}
}

// TestBlankLineAfterPostKeepsConnectionsParked: the CRLF a client may send
// after a POST's body (skipped, as net/http skips it), coming to parked
// connections on its own, wakes them but is no request: they go back to
// the parker, not one goroutine each for the rest of IdleTimeout, and are
// served when their next request comes.
func TestBlankLineAfterPostKeepsConnectionsParked(t *testing.T) {
	// Not parallel: it counts the process's goroutines, and every
	// parallel test waits until the serial ones are done.
	const n = 100
	th := &testHandler{}
	_, addr, _ := servers(t, th, Options{IdleTimeout: 30 * time.Second})
	base := runtime.NumGoroutine()
	cs := dialClients(t, addr, n)
	for _, cl := range cs {
		if _, err := io.WriteString(cl.c, "POST /post HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(cl.br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
	}
	time.Sleep(warmFor + 100*time.Millisecond) // parked
	for _, cl := range cs {
		if _, err := io.WriteString(cl.c, "\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(warmFor + 100*time.Millisecond) // past the warm wait of a goroutine that woke
	if want := base + 10 + workers.DefaultMaxIdle; goroutinesSettle(want) > want {
		t.Fatalf("%d goroutines with %d idle connections sent a CRLF after a POST (%d before): want no goroutine per connection", runtime.NumGoroutine(), n, base)
	}
	for _, cl := range cs {
		cl.roundTrip(t, "/next")
	}
	if got := th.lane.Load(); got != 2*n {
		t.Fatalf("lane served %d requests, want %d", got, 2*n)
	}
}

// parkedSince waits until s's parker holds a connection and returns when
// that connection fell idle.
func parkedSince(t *testing.T, s *Server) time.Time {
	t.Helper()
	p := s.parker
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		for _, cn := range p.parked {
			since := cn.idleSince
			p.mu.Unlock()
			return since
		}
		p.mu.Unlock()
	}
	t.Fatal("the connection was not parked")
	return time.Time{}
}

// TestRequestAtTheIdleEdge: a request that reaches a parked connection
// before IdleTimeout runs out is served, as net/http serves a request
// that came in time, however late the lane gets to read it.
// Here the reused goroutine that resumes the connection runs only after
// the timeout: on a busy machine, a scheduling delay.
func TestRequestAtTheIdleEdge(t *testing.T) {
	t.Parallel()
	const idle = warmFor + 350*time.Millisecond // parked after warmFor
	for attempt := 1; ; attempt++ {
		th := &testHandler{}
		_, addr, s := servers(t, th, Options{IdleTimeout: idle})
		cl := dialClients(t, addr, 1)[0]
		cl.roundTrip(t, "/one")
		since := parkedSince(t, s)
		// resume takes s.mu to start the goroutine that serves the
		// connection: the parker that took the event waits for it.
		s.mu.Lock()
		_, err := io.WriteString(cl.c, get("/edge"))
		woken, left := false, time.Duration(0)
		for err == nil && !woken && time.Since(since) < idle {
			s.parker.mu.Lock()
			woken, left = len(s.parker.parked) == 0, idle-time.Since(since)
			s.parker.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Until(since.Add(idle + 20*time.Millisecond)))
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if !woken {
			// Too slow a machine: the request was not seen before the
			// timeout, so it proves nothing either way.
			if attempt < 5 {
				continue
			}
			t.Fatalf("%d tries: the parker never took a request before IdleTimeout", attempt)
		}
		wantEdgeServed(t, cl, th, fmt.Sprintf("a request that woke the parked connection %v before IdleTimeout", left))
		return
	}
}

// TestRequestAtTheIdleSweep: a request that reaches a parked connection
// before IdleTimeout runs out is served when the parker's sweep falls due
// before the parker has looked at the request: on a busy machine the
// deadline of its wait on the epoll set can fire first (the runtime runs
// due timers before it polls the network), and a sweep that took the
// connection for idle would close it with the request unread.
func TestRequestAtTheIdleSweep(t *testing.T) {
	t.Parallel()
	const idle = warmFor + 350*time.Millisecond // parked after warmFor
	for attempt := 1; ; attempt++ {
		th := &testHandler{}
		_, addr, s := servers(t, th, Options{IdleTimeout: idle})
		cl := dialClients(t, addr, 1)[0]
		cl.roundTrip(t, "/one")
		since := parkedSince(t, s)
		p := s.parker
		p.mu.Lock()
		// Each wait of the loop now ends at once, before it looks at the
		// set, until a sweep sets the next deadline; and no sweep runs
		// before p.mu is let go, once the timeout is over and one is due.
		_ = p.file.SetReadDeadline(aLongTimeAgo)
		locked := time.Now()
		_, err := io.WriteString(cl.c, get("/edge"))
		left := idle - time.Since(since)
		time.Sleep(max(time.Until(since.Add(idle)), time.Until(locked.Add(p.sweepEvery()))) + 20*time.Millisecond)
		p.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if left <= 0 {
			// Too slow a machine: the request came after the timeout, so
			// it proves nothing either way.
			if attempt < 5 {
				continue
			}
			t.Fatalf("%d tries: no request sent before IdleTimeout", attempt)
		}
		wantEdgeServed(t, cl, th, fmt.Sprintf("a request sent to the parked connection %v before IdleTimeout", left))
		return
	}
}

// wantEdgeServed: the request for /edge, what says how it came, was
// answered, and it was the lane's second on the connection.
func wantEdgeServed(t *testing.T, cl *client, th *testHandler, what string) {
	t.Helper()
	res, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		t.Fatalf("%s: %v, want it served", what, err)
	}
	if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK || string(b) != "GET /edge" {
		t.Fatalf("status %d, body %q", res.StatusCode, b)
	}
	if n := th.lane.Load(); n != 2 {
		t.Fatalf("lane served %d requests, want 2", n)
	}
}
