package pipe

import (
	"context"
	"io"
	"net"
	"testing"
)

const chunk = 1 << 20

// sink accepts one connection and counts what it reads until EOF.
func sink(b *testing.B) (string, chan int64) {
	ln := listen(b)
	n := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			n <- -1
			return
		}
		defer c.Close()
		k, _ := io.Copy(io.Discard, c)
		n <- k
	}()
	return ln.Addr().String(), n
}

// gateway accepts one connection on its own listener, dials target and
// joins the two, the way the https listener does. wrap, when set, hides
// the *net.TCPConn type from io.Copy (the user-space baseline).
func gateway(b *testing.B, target string, wrap bool) (string, chan error) {
	ln := listen(b)
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		h, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			done <- err
			return
		}
		if wrap {
			c, h = plainConn{c}, plainConn{h}
		}
		_, err = Join(context.Background(), c, h, nil, 0)
		done <- err
	}()
	return ln.Addr().String(), done
}

type plainConn struct{ net.Conn }

func (p plainConn) CloseWrite() error { return p.Conn.(*net.TCPConn).CloseWrite() }

func push(b *testing.B, addr string, got chan int64) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, chunk)
	b.SetBytes(chunk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if n := <-got; n != int64(b.N)*chunk {
		b.Fatalf("sink got %d bytes, want %d", n, int64(b.N)*chunk)
	}
	b.StopTimer()
	c.Close()
}

// BenchmarkDirect is the baseline: client straight to the host.
func BenchmarkDirect(b *testing.B) {
	addr, got := sink(b)
	push(b, addr, got)
}

// BenchmarkPipe goes through Join between raw TCP conns (splice).
func BenchmarkPipe(b *testing.B) {
	addr, got := sink(b)
	gw, done := gateway(b, addr, false)
	push(b, gw, got)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPipeUserspace wraps the conns so io.Copy cannot splice: what
// the pipe would cost without zero-copy.
func BenchmarkPipeUserspace(b *testing.B) {
	addr, got := sink(b)
	gw, done := gateway(b, addr, true)
	push(b, gw, got)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
