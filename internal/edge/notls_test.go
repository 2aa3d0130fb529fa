package edge

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// rawAnswer sends b to addr over a new TCP connection and returns what
// came back before the server closed it (or 5 s passed).
func rawAnswer(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	return got
}

// TestHTTPSListenerRefusesClearly: what is not a ClientHello gets an
// answer a client can show before the close, not just the close: a plain
// HTTP request (http:// to the https port, a common mistake) gets 400
// problem+json saying so, as nginx and net/http answer it; a TLS record
// that is no valid hello gets a fatal decode_error alert (RFC 8446
// §6.2), which TLS clients report as such. A client that sends nothing
// whole (a cut hello) is only closed.
func TestHTTPSListenerRefusesClearly(t *testing.T) {
	e := start(t, Options{})
	for _, form := range []struct{ name, target string }{
		{"origin form", "/"},
		{"absolute form", "http://app." + zone + "/"}, // RFC 9112 §3.2.2: as to a proxy
	} {
		t.Run("plain HTTP, "+form.name, func(t *testing.T) {
			got := string(rawAnswer(t, e.https, []byte("GET "+form.target+" HTTP/1.1\r\nHost: app."+zone+"\r\n\r\n")))
			if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "application/problem+json") ||
				!strings.Contains(got, "https://") || !strings.Contains(got, "Connection: close") {
				t.Fatalf("plain HTTP to the https port got %q", got)
			}
		})
	}
	decodeError := []byte{21, 3, 3, 0, 2, 2, 50} // alert record: fatal, decode_error
	for _, c := range []struct {
		name string
		in   []byte
		want []byte
	}{
		{"handshake record that is no hello", []byte{22, 3, 1, 0, 4, 2, 0, 0, 0}, decodeError},
		{"hello with a bad length", append([]byte{22, 3, 1, 0, 8, 1, 0, 0, 4}, 3, 3, 0, 0), decodeError},
		{"record of another type", []byte{23, 3, 3, 0, 1, 0}, decodeError},
		{"cut hello", []byte{22, 3, 1, 0, 200, 1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil {
				// A client that stops mid-hello: close our write side so
				// the server's read ends.
				conn, err := net.Dial("tcp", e.https)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = conn.Write(c.in)
				_ = conn.(*net.TCPConn).CloseWrite()
				if got, _ := io.ReadAll(conn); len(got) != 0 {
					t.Fatalf("a cut hello got %v, want a bare close", got)
				}
				return
			}
			if got := rawAnswer(t, e.https, c.in); !bytes.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestPlainHTTPWithBodyOnHTTPS: a plain HTTP request with a body sent to
// the https listener (a form posted to http://host:443) gets its 400 and
// then the end of the stream, not a reset: closed with the body unread,
// the socket would answer a reset, which a client still sending reports
// as "connection reset" instead of the 400. The listener ends its side
// first and reads what is left for a short, bounded while, as net/http's
// own close after an error and nginx's lingering close do.
func TestPlainHTTPWithBodyOnHTTPS(t *testing.T) {
	e := start(t, Options{})
	for _, size := range []int{0, 64 << 10} {
		c, err := net.Dial("tcp", e.https)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			_, _ = fmt.Fprintf(c, "POST /form HTTP/1.1\r\nHost: web.%s\r\nContent-Length: %d\r\n\r\n", zone, size)
			_, _ = c.Write(make([]byte, size))
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(got), "HTTP/1.1 400 ") {
			t.Fatalf("body of %d bytes: got %q", size, got)
		}
		if err != nil {
			t.Errorf("body of %d bytes: the 400 came, then %v, want the end of the stream", size, err)
		}
	}
}
