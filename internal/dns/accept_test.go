//go:build unix

package dns

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// countingListener counts the calls to its Accept.
type countingListener struct {
	net.Listener
	calls atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	return l.Listener.Accept()
}

// TestTCPAcceptBacksOffWithoutDescriptors: when the process is out of
// file descriptors (the HTTPS listener shares them) and a TCP connection
// waits, accept fails at once with EMFILE, a temporary error. The server
// waits before trying again, growing the wait, as net/http does, rather
// than trying again at once for as long as it lasts, which holds a core;
// and once descriptors are free it accepts and answers the connection.
// It lowers the process's descriptor limit for a moment, so it must never
// run in parallel with another test.
func TestTCPAcceptBacksOffWithoutDescriptors(t *testing.T) {
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	testutil.Serve(t, "serve", func(ctx context.Context) error { return s.Serve(ctx, pc, counted) })

	// Leave the process a few descriptors, take all but one of them,
	// and let the client's connection have that one: the server then
	// has none to accept it with.
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	probe, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(probe.Fd()) + 64
	probe.Close()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot lower the descriptor limit: %v", err)
	}
	var filler []*os.File
	release := func() {
		for _, f := range filler {
			f.Close()
		}
		filler = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("filling descriptors: %v", err)
			}
			break
		}
		filler = append(filler, f)
		if len(filler) > 1000 {
			t.Fatal("descriptor limit not reached")
		}
	}
	filler[len(filler)-1].Close()
	filler = filler[:len(filler)-1]
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
	if err != nil {
		t.Fatalf("dial with one descriptor free: %v", err)
	}
	defer c.Close()

	before := counted.calls.Load()
	time.Sleep(300 * time.Millisecond)
	tries := counted.calls.Load() - before
	release()
	if tries > 20 {
		t.Errorf("accept tried %d times in 300 ms out of descriptors; want a growing wait between tries", tries)
	}

	co := &mdns.Conn{Conn: c}
	co.SetDeadline(time.Now().Add(5 * time.Second))
	q := new(mdns.Msg)
	q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
	if err := co.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	r, err := co.ReadMsg()
	if err != nil || r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("once descriptors are free: %v, %v; want the connection answered", r, err)
	}
}
