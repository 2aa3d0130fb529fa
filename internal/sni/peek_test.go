package sni

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestPeekThenHandshake: the hello arrives in many TCP writes; Peek finds
// the name and the replaying Conn still completes a real TLS handshake.
func TestPeekThenHandshake(t *testing.T) {
	ln := listen(t)
	cert, _ := testutil.SelfSigned(t, "app.example.com")
	type result struct {
		h   *Hello
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		h, pc, err := Peek(c, 5*time.Second)
		if err != nil {
			res <- result{err: err}
			return
		}
		srv := tls.Server(pc, &tls.Config{Certificates: []tls.Certificate{cert}})
		err = srv.Handshake()
		if err == nil {
			_, err = srv.Write([]byte("hi"))
		}
		res <- result{h, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool.AddCert(leaf)
	tc := tls.Client(&chunkWriter{Conn: c, n: 13}, &tls.Config{ServerName: "app.example.com", RootCAs: pool})
	buf := make([]byte, 2)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if _, err := tc.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q %v", buf, err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.h.ServerName != "app.example.com" {
		t.Fatalf("server name %q", r.h.ServerName)
	}
}

// TestPeekReplaysAll: bytes the client sent with its hello (one write, so
// Peek's read takes them too) come back from the Conn after the hello, in
// order, before anything sent later.
func TestPeekReplaysAll(t *testing.T) {
	ln := listen(t)
	hello := clientHello(t, &tls.Config{ServerName: "app.example.com"})
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		h, pc, err := Peek(c, 5*time.Second)
		if err != nil || h.ServerName != "app.example.com" {
			t.Errorf("peek: %v %v", h, err)
			got <- nil
			return
		}
		b, _ := io.ReadAll(pc)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	first := append(hello[:len(hello):len(hello)], "with the hello"...)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let Peek take the first write alone
	if _, err := c.Write([]byte(", then later")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	want := string(first) + ", then later"
	if b := <-got; string(b) != want {
		t.Fatalf("replayed %d bytes, want %d (the hello, what came with it, then the rest)", len(b), len(want))
	}
	c.Close()
}

// chunkWriter splits every write into n-byte TCP writes.
type chunkWriter struct {
	net.Conn
	n int
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		k := min(w.n, len(p))
		m, err := w.Conn.Write(p[:k])
		total += m
		if err != nil {
			return total, err
		}
		p = p[k:]
	}
	return total, nil
}

// TestPeekDeadline: a client that sends half a hello and stalls is cut off
// by the read deadline, not waited for.
func TestPeekDeadline(t *testing.T) {
	ln := listen(t)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw := clientHello(t, &tls.Config{ServerName: "a.example"})
	if _, err := c.Write(raw[:20]); err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, pc, err := Peek(s, 50*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) || pc != nil {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}
