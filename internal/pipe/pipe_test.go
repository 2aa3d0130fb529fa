package pipe

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// connPair returns both ends of a fresh loopback TCP connection.
func connPair(t testing.TB) (*net.TCPConn, *net.TCPConn) { return testutil.TCPPair(t) }

// piped builds client <-> [gateway side: cs | hs] <-> host and runs Join on
// the gateway side in a goroutine whose result arrives on the channel.
func piped(t testing.TB, ctx context.Context, prefix []byte) (client, host *net.TCPConn, done chan joinResult) {
	return pipedIdle(t, ctx, prefix, 0)
}

func pipedIdle(t testing.TB, ctx context.Context, prefix []byte, idle time.Duration) (client, host *net.TCPConn, done chan joinResult) {
	client, cs := connPair(t)
	hs, host := connPair(t)
	done = make(chan joinResult, 1)
	go func() {
		st, err := Join(ctx, cs, hs, prefix, idle)
		done <- joinResult{st, err}
	}()
	return client, host, done
}

type joinResult struct {
	st  Stats
	err error
}

func TestJoinHalfClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	client, host, done := piped(t, context.Background(), []byte("HELLO:"))
	defer client.Close()
	defer host.Close()
	payload := bytes.Repeat([]byte("abcdefgh"), 64<<10)
	go func() {
		// host: read everything until the client's half-close, answer after.
		got, _ := io.ReadAll(host)
		_, _ = host.Write([]byte{byte(len(got) >> 16)})
		_, _ = host.Write(got[:6])
		host.Close()
	}()
	if _, err := client.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := io.ReadAll(client)
	if err != nil {
		t.Fatalf("read after half-close: %v", err)
	}
	if want := append([]byte{byte((len(payload) + 6) >> 16)}, "HELLO:"...); !bytes.Equal(resp, want) {
		t.Fatalf("response %q, want %q (prefix first, then payload, then the answer after EOF)", resp, want)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("join: %v", r.err)
	}
	if r.st.Up != int64(len(payload)+6) || r.st.Down != 7 {
		t.Fatalf("stats %+v", r.st)
	}
}

// TestHostDiesClosesClient: a host that dies mid-pipe (reset or plain
// close) ends the client's side at once, while the client is still idle.
func TestHostDiesClosesClient(t *testing.T) {
	for _, reset := range []bool{true, false} {
		name := map[bool]string{true: "reset", false: "fin"}[reset]
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			client, host, done := piped(t, context.Background(), nil)
			defer client.Close()
			if _, err := client.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(host, buf); err != nil {
				t.Fatal(err)
			}
			if reset {
				_ = host.SetLinger(0)
			}
			host.Close()
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			start := time.Now()
			_, err := client.Read(buf)
			if err == nil || errors.Is(err, errTimeout) || isTimeout(err) {
				t.Fatalf("client read = %v after host death, want EOF or reset", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("client saw the host die after %v", d)
			}
			if reset {
				// The reset tears the whole pipe down.
				<-done
			} else {
				client.Close()
				<-done
			}
		})
	}
}

var errTimeout = errors.New("timeout")

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestJoinContextEnds(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	client, host, done := piped(t, ctx, nil)
	defer client.Close()
	defer host.Close()
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("join err = %v", r.err)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("client still open after ctx end: %v", err)
	}
}

func TestJoinHostUnwritable(t *testing.T) {
	defer goleak.VerifyNone(t)
	client, cs := connPair(t)
	defer client.Close()
	hs, host := connPair(t)
	host.Close()
	hs.Close()
	if _, err := Join(context.Background(), cs, hs, []byte("x"), 0); err == nil {
		t.Fatal("join to a closed host succeeded")
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("client not closed: %v", err)
	}
}

// TestJoinCarriesBothWays: both directions at once, MiBs each way, arrive
// byte for byte and are counted. Between raw TCP conns the payload is
// spliced: the process's read(2) byte count (rchar) grows by what the
// test's own ends read, not twice that as a user-space copy makes it (the
// wrapped case, which also shows that the check can see such a copy).
func TestJoinCarriesBothWays(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io to count read(2) bytes with")
	}
	const size = 4 << 20
	for _, tc := range []struct {
		name    string
		wrap    bool
		spliced bool
	}{
		{"tcp", false, true},
		{"wrapped", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			client, cs := connPair(t)
			hs, host := connPair(t)
			defer client.Close()
			defer host.Close()
			up, down := randomBytes(t, size), randomBytes(t, size)
			before := readChars(t)
			done := make(chan joinResult, 1)
			go func() {
				var c, h net.Conn = cs, hs
				if tc.wrap {
					c, h = plainConn{cs}, plainConn{hs}
				}
				st, err := Join(context.Background(), c, h, nil, 0)
				done <- joinResult{st, err}
			}()
			gotUp, gotDown := make(chan []byte, 1), make(chan []byte, 1)
			exchange := func(c *net.TCPConn, send []byte, got chan<- []byte) {
				go func() {
					_, _ = c.Write(send)
					_ = c.CloseWrite()
				}()
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				b, _ := io.ReadAll(c)
				got <- b
			}
			go exchange(client, up, gotDown)
			go exchange(host, down, gotUp)
			if b := <-gotUp; !bytes.Equal(b, up) {
				t.Errorf("host got %d bytes, not the %d the client sent", len(b), len(up))
			}
			if b := <-gotDown; !bytes.Equal(b, down) {
				t.Errorf("client got %d bytes, not the %d the host sent", len(b), len(down))
			}
			r := <-done
			if r.err != nil || r.st.Up != size || r.st.Down != size {
				t.Fatalf("join = %+v, %v; want %d each way, no error", r.st, r.err, size)
			}
			read := readChars(t) - before
			if tc.spliced && read >= 3*size {
				t.Errorf("read(2) took %d bytes for %d each way: the pipe copied through user space", read, size)
			}
			if !tc.spliced && read < 3*size {
				t.Errorf("read(2) took only %d bytes for %d each way: the check cannot see a user-space copy", read, size)
			}
		})
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// readChars is the process's rchar from /proc/self/io: bytes read by
// read(2) and its kin.
func readChars(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

// TestJoinIdle: a pipe that carries nothing either way for its idle
// timeout is closed, both sides; one that carries bytes in one direction
// only, each gap shorter than the timeout, is kept well past it; and with
// no timeout a silent pipe stays.
func TestJoinIdle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the idle timeout asks the socket (TCP_INFO), Linux only")
	}
	const idle = 300 * time.Millisecond
	t.Run("silent", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		client, host, done := pipedIdle(t, context.Background(), []byte("hello"), idle)
		defer client.Close()
		defer host.Close()
		start := time.Now()
		var r joinResult
		select {
		case r = <-done:
		case <-time.After(10 * idle):
			t.Fatalf("a silent pipe was still open after %v (idle timeout %v)", 10*idle, idle)
		}
		if d := time.Since(start); d < idle*9/10 {
			t.Fatalf("pipe closed after %v, before its idle timeout %v", d, idle)
		}
		if !errors.Is(r.err, ErrIdle) {
			t.Fatalf("join err = %v, want ErrIdle", r.err)
		}
		for name, c := range map[string]*net.TCPConn{"client": client, "host": host} {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 16)
			n, err := c.Read(buf)
			for err == nil && n > 0 { // the host reads the hello first
				n, err = c.Read(buf)
			}
			if err == nil || isTimeout(err) {
				t.Errorf("%s not closed by the idle pipe: %v", name, err)
			}
		}
	})
	for _, dir := range []string{"up", "down"} {
		t.Run("busy "+dir, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			// A longer timeout than the silent case's, so that a test
			// process stalled a few hundred milliseconds between two
			// sends does not look idle.
			const idle = time.Second
			client, host, done := pipedIdle(t, context.Background(), nil, idle)
			defer client.Close()
			defer host.Close()
			src, dst := client, host
			if dir == "down" {
				src, dst = host, client
			}
			got := make(chan int, 1)
			go func() {
				n, _ := io.Copy(io.Discard, dst)
				got <- int(n)
			}()
			// A byte every idle/4 for 2.5 idle periods: never a gap as
			// long as the timeout.
			const sends = 10
			for range sends {
				if _, err := src.Write([]byte{'x'}); err != nil {
					t.Fatalf("write %s: %v", dir, err)
				}
				time.Sleep(idle / 4)
			}
			select {
			case r := <-done:
				t.Fatalf("a pipe busy %s was closed: %v", dir, r.err)
			default:
			}
			src.Close()
			dst.Close()
			if n := <-got; n != sends {
				t.Errorf("%d bytes arrived %s, want %d", n, dir, sends)
			}
			<-done
		})
	}
	t.Run("off", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		client, host, done := pipedIdle(t, context.Background(), nil, 0)
		time.Sleep(3 * idle)
		select {
		case r := <-done:
			t.Fatalf("a pipe without idle timeout was closed: %v", r.err)
		default:
		}
		client.Close()
		host.Close()
		<-done
	})
}

// TestIdlePipeHoldsNoKernelPipe: Go's splice holds a kernel pipe (two
// descriptors) while it waits for bytes, so every idle passthrough pipe
// held six descriptors. A direction quiet for its park gives its kernel
// pipe back; the pipes still carry bytes both ways after.
func TestIdlePipeHoldsNoKernelPipe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parking is for Linux's splice")
	}
	defer goleak.VerifyNone(t)
	const n = 16
	const park = 100 * time.Millisecond
	type pair struct{ client, host *net.TCPConn }
	var pairs []pair
	var dones []chan joinResult
	for range n {
		client, cs := connPair(t)
		hs, host := connPair(t)
		done := make(chan joinResult, 1)
		go func() {
			st, err := join(context.Background(), cs, hs, nil, 0, park)
			done <- joinResult{st, err}
		}()
		pairs = append(pairs, pair{client, host})
		dones = append(dones, done)
	}
	roundTrip := func(p pair) {
		t.Helper()
		buf := make([]byte, 4)
		for _, d := range [][2]*net.TCPConn{{p.client, p.host}, {p.host, p.client}} {
			if _, err := d[0].Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			_ = d[1].SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(d[1], buf); err != nil || string(buf) != "ping" {
				t.Fatalf("through the pipe: %q, %v", buf, err)
			}
		}
	}
	for _, p := range pairs {
		roundTrip(p) // both directions have spliced
	}
	// Parked, the kernel pipes go back to Go's pool, whose entries the
	// collector closes: what stays open is far below 2 per direction.
	var open int
	testutil.WaitFor(t, 10*time.Second, func() bool {
		runtime.GC()
		open = pipeFDs(t)
		return open < n
	}, "idle pipes still hold their kernel pipes")
	for _, p := range pairs {
		roundTrip(p) // a parked direction wakes for its next byte
	}
	for i, p := range pairs {
		p.client.Close()
		p.host.Close()
		<-dones[i]
	}
	t.Logf("%d pipe descriptors open for %d idle pipes (%d without parking)", open, n, 4*n)
}

// pipeFDs counts this process's open descriptors that are pipes.
func pipeFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var c int
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			c++
		}
	}
	return c
}

// TestJoinEndsDuringHello: a host that never reads, with its receive
// window full, leaves the hello's write waiting; the context's end (the
// drain's cut) and the idle bound must still end the pipe and close the
// client.
func TestJoinEndsDuringHello(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Far more than loopback's socket buffers hold, so the write waits.
	hello := make([]byte, 64<<20)
	for _, tc := range []struct {
		name string
		idle time.Duration
		want error
	}{
		{"context", 0, context.Canceled},
		{"idle", time.Second, ErrIdle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client, host, done := pipedIdle(t, ctx, hello, tc.idle)
			defer client.Close()
			defer host.Close() // never reads
			if tc.idle == 0 {
				time.Sleep(100 * time.Millisecond)
				cancel()
			}
			select {
			case r := <-done:
				if !errors.Is(r.err, tc.want) {
					t.Fatalf("join err = %v, want %v", r.err, tc.want)
				}
				if r.st.Up >= int64(len(hello)) {
					t.Fatalf("Up = %d: the whole hello was written to a host that never reads", r.st.Up)
				}
			case <-time.After(10 * time.Second):
				cancel()
				host.Close()
				<-done
				t.Fatal("join still writing the hello 10 s after its end")
			}
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := client.Read(make([]byte, 1)); err == nil || isTimeout(err) {
				t.Fatalf("client still open: %v", err)
			}
		})
	}
}
