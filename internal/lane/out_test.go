package lane

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is the connection side of an out: it keeps every write.
type recorder struct {
	writes [][]byte
	fail   error
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

// both writes to an out and keeps what it was given, to compare with
// what reached the connection.
type both struct {
	o  *out
	in *bytes.Buffer
}

func (b both) str(s string) { b.o.WriteString(s); b.in.WriteString(s) }
func (b both) bytes(n int) {
	p := bytes.Repeat([]byte{byte('a' + n%26)}, n)
	b.o.Write(p)
	b.in.Write(p)
}
func (b both) byte(c byte) { b.o.WriteByte(c); b.in.WriteByte(c) }

func newTestOut(w *recorder) *out {
	return newOut(w, &sync.Pool{New: func() any { return new([joinSize]byte) }})
}

// TestOut: what reaches the connection, write by write, for the sizes a
// response head and body come in; the bytes always arrive whole and in
// order.
func TestOut(t *testing.T) {
	t.Parallel()
	head := strings.Repeat("h", 300)
	for _, tc := range []struct {
		name string
		do   func(b both)
		want []int // the length of each write the connection sees, Flush included
	}{
		{"small: held until Flush", func(b both) { b.str(head); b.bytes(1000) }, []int{1300}},
		{"head and 16 KiB: one write", func(b both) { b.str(head); b.bytes(16 << 10) }, []int{300 + 16<<10}},
		{"16 KiB alone: straight through", func(b both) { b.bytes(16 << 10) }, []int{16 << 10}},
		{"head and 40 KiB: a join's worth, then the rest straight", func(b both) { b.str(head); b.bytes(40 << 10) }, []int{joinSize, 300 + 40<<10 - joinSize}},
		{"head and 34 KiB: a join's worth, the rest held", func(b both) { b.str(head); b.bytes(34 << 10) }, []int{joinSize, 300 + 34<<10 - joinSize}},
		{"a long string: in buffer-sized pieces", func(b both) { b.str(head); b.str(strings.Repeat("s", 5000)) }, []int{outSize, 5300 - outSize}},
		{"a byte past the buffer: flushed first", func(b both) { b.bytes(outSize); b.byte('x') }, []int{outSize, 1}},
		{"several writes that fit: one", func(b both) { b.str(head); b.bytes(1000); b.bytes(2000); b.byte('x') }, []int{3301}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			var in bytes.Buffer
			o := newTestOut(&rec)
			tc.do(both{o, &in})
			if err := o.Flush(); err != nil {
				t.Fatal(err)
			}
			var lens []int
			var got []byte
			for _, w := range rec.writes {
				lens = append(lens, len(w))
				got = append(got, w...)
			}
			if !slices.Equal(lens, tc.want) {
				t.Errorf("writes of %v bytes, want %v", lens, tc.want)
			}
			if !bytes.Equal(got, in.Bytes()) {
				t.Errorf("the connection got %d bytes, not the %d written, in order", len(got), in.Len())
			}
			if o.Buffered() != 0 {
				t.Errorf("%d bytes held after Flush", o.Buffered())
			}
		})
	}
}

// TestOutError: the first failed write is every later call's answer, and
// Reset starts clean.
func TestOutError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	rec := &recorder{fail: boom}
	o := newTestOut(rec)
	if _, err := o.WriteString("held"); err != nil {
		t.Fatalf("a held write failed: %v", err)
	}
	if err := o.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v, want the write's error", err)
	}
	if _, err := o.Write([]byte("x")); !errors.Is(err, boom) {
		t.Fatalf("Write after the error = %v", err)
	}
	if err := o.WriteByte('x'); !errors.Is(err, boom) {
		t.Fatalf("WriteByte after the error = %v", err)
	}
	if _, err := o.Write(bytes.Repeat([]byte{'x'}, 10<<10)); !errors.Is(err, boom) {
		t.Fatalf("a big Write after the error = %v", err)
	}
	if _, err := o.WriteString("more"); !errors.Is(err, boom) {
		t.Fatalf("WriteString after the error = %v", err)
	}
	rec.fail = nil
	o.Reset(rec)
	if _, err := o.WriteString("ok"); err != nil || o.Flush() != nil {
		t.Fatal("Reset kept the error")
	}
	if n := len(rec.writes); n != 1 || string(rec.writes[0]) != "ok" {
		t.Fatalf("after Reset the connection got %q: held bytes from before survived", rec.writes)
	}
}

// countConn counts the writes made to a connection.
type countConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestResponseInOneWrite: a response whose body the handler writes in one
// piece leaves in one write with its head, up to joinSize; past that, in
// a joinSize piece and the rest.
func TestResponseInOneWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size   int
		writes int32
	}{{100, 1}, {16 << 10, 1}, {30 << 10, 1}, {64 << 10, 2}} {
		t.Run(strconv.Itoa(tc.size), func(t *testing.T) {
			body := bytes.Repeat([]byte{'z'}, tc.size)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				_, _ = w.Write(body)
			})
			s, err := New(Options{Handler: h, Handoff: func(c net.Conn) { c.Close() }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			client, server := net.Pipe()
			defer client.Close()
			var writes atomic.Int32
			go s.ServeConn(countConn{server, &writes})
			go io.WriteString(client, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
			_ = client.SetDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(client), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("body: %d bytes, %v; want the %d written", len(got), err, len(body))
			}
			if n := writes.Load(); n != tc.writes {
				t.Errorf("%d writes to the connection, want %d", n, tc.writes)
			}
		})
	}
}
