package sni

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// padded returns a real crypto/tls hello for name grown to a handshake
// body of exactly size bytes by a padding extension (RFC 7685), in records
// of at most 2^14 bytes as crypto/tls cuts a large hello.
func padded(t testing.TB, name string, size int) []byte {
	t.Helper()
	raw := clientHello(t, &tls.Config{ServerName: name})
	var msg []byte
	for r := raw; len(r) > 0; {
		n := int(r[3])<<8 | int(r[4])
		msg = append(msg, r[5:5+n]...)
		r = r[5+n:]
	}
	c := cursor(msg[4:])
	_, _ = c.bytes(2 + 32)
	_, _ = c.vec8()
	_, _ = c.vec16()
	_, _ = c.vec8()
	prefix := msg[4 : len(msg)-len(c)] // the body up to the extensions' length
	exts, _ := c.vec16()
	pad := size - len(prefix) - 2 - len(exts) - 4
	if pad < 0 || len(exts)+4+pad > 0xffff {
		t.Fatalf("a hello body of %d bytes cannot be built", size)
	}
	n := len(exts) + 4 + pad
	body := append(bytes.Clone(prefix), byte(n>>8), byte(n))
	body = append(body, exts...)
	body = append(body, 0, 21, byte(pad>>8), byte(pad))
	body = append(body, make([]byte, pad)...)
	hs := append([]byte{typeClientHello, byte(size >> 16), byte(size >> 8), byte(size)}, body...)
	var out []byte
	for len(hs) > 0 {
		k := min(maxRecordLen, len(hs))
		out = append(out, 22, 3, 1, byte(k>>8), byte(k))
		out = append(out, hs[:k]...)
		hs = hs[k:]
	}
	return out
}

// acceptsHello reports whether crypto/tls, as a server, reads raw as a
// ClientHello (it gets as far as GetConfigForClient).
func acceptsHello(t testing.TB, raw []byte) bool {
	t.Helper()
	cc, sc := net.Pipe()
	got := make(chan bool, 1)
	go func() {
		called := false
		cfg := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			called = true
			return nil, net.ErrClosed
		}}
		_ = tls.Server(sc, cfg).Handshake()
		sc.Close()
		got <- called
	}()
	// crypto/tls may stop reading early, and writes an alert back.
	go func() { _, _ = cc.Write(raw) }()
	go func() { _, _ = io.Copy(io.Discard, cc) }()
	ok := <-got
	cc.Close()
	return ok
}

// TestParseSizeLimitIsCryptoTLS: a hello crypto/tls reads (a handshake
// body of up to 64 KiB, over several records, as a client with large
// post-quantum key shares, many extensions or PSKs sends) Parse reads
// too; one byte more both refuse.
func TestParseSizeLimitIsCryptoTLS(t *testing.T) {
	for _, size := range []int{16 << 10, 16<<10 + 1, 40 << 10, 64 << 10, 64<<10 + 1} {
		raw := padded(t, "big.example", size)
		want := acceptsHello(t, raw)
		h, got, err := Parse(bytes.NewReader(raw))
		if (err == nil) != want {
			t.Errorf("hello body of %d bytes in %d-byte records: Parse err = %v; crypto/tls reads it: %v", size, maxRecordLen, err, want)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("hello body of %d bytes: err = %v, want ErrTooLarge", size, err)
			}
			continue
		}
		if h.ServerName != "big.example" || !bytes.Equal(got, raw) {
			t.Errorf("hello body of %d bytes: name %q, %d bytes back of %d", size, h.ServerName, len(got), len(raw))
		}
	}
}

// manyALPN returns n made-up ALPN protocols of 200 bytes, then "http/1.1":
// a crypto/tls client's way to send a hello of about n×200 bytes.
func manyALPN(n int) []string {
	var out []string
	for i := range n {
		out = append(out, strings.Repeat(string(rune('a'+i%26)), 200))
	}
	return append(out, "http/1.1")
}

// TestPeekLargeHelloThenHandshake: a crypto/tls client whose hello is
// about 40 KiB (three records) is peeked over TCP and the replaying Conn
// completes the handshake: the name, every protocol and the bytes are the
// client's.
func TestPeekLargeHelloThenHandshake(t *testing.T) {
	ln := listen(t)
	cert, pool := testutil.SelfSigned(t, "big.example")
	protos := manyALPN(200)
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
		srv := tls.Server(pc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
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
	tc := tls.Client(c, &tls.Config{ServerName: "big.example", RootCAs: pool, NextProtos: protos})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	hsErr := tc.Handshake()
	r := <-res
	if r.err != nil {
		t.Fatalf("server: %v (client: %v)", r.err, hsErr)
	}
	if hsErr != nil {
		t.Fatalf("client handshake: %v", hsErr)
	}
	buf := make([]byte, 2)
	if _, err := tc.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q %v", buf, err)
	}
	if r.h.ServerName != "big.example" || !equal(r.h.ALPN, protos) {
		t.Fatalf("peeked name %q and %d protocols, want big.example and %d", r.h.ServerName, len(r.h.ALPN), len(protos))
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Fatalf("negotiated %q", p)
	}
}
