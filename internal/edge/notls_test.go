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
// that is no valid hello gets the fatal alert RFC 8446 names for its
// fault (decode_error for a malformed hello), which TLS clients report as
// such. A client that sends nothing whole (a cut hello), or an alert, is
// only closed.
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
	// The alert is the one RFC 8446 names for each fault (crypto/tls,
	// reading these bytes itself, sends none for a record of another
	// type, and decode_error for the unparsable ServerHello below). An
	// alert record: fatal, then the description.
	alert := func(desc byte) []byte { return []byte{21, 3, 3, 0, 2, 2, desc} }
	decodeError := alert(50)
	unexpectedMessage := alert(10)
	for _, c := range []struct {
		name string
		in   []byte
		want []byte // nil: a bare close
	}{
		// §4: a handshake message out of order.
		{"handshake record that is no hello", []byte{22, 3, 1, 0, 4, 2, 0, 0, 0}, unexpectedMessage},
		{"hello with a bad length", append([]byte{22, 3, 1, 0, 8, 1, 0, 0, 4}, 3, 3, 0, 0), decodeError},
		// §5: a record of a type not expected.
		{"record of another type", []byte{23, 3, 3, 0, 1, 0}, unexpectedMessage},
		// §5.1: zero-length fragments of handshake type MUST NOT be sent.
		{"empty handshake record", []byte{22, 3, 1, 0, 0}, unexpectedMessage},
		// §5.1: longer than 2^14 bytes, record_overflow.
		{"record over 16 KiB", append([]byte{22, 3, 1, 0x40, 0x01}, make([]byte, 1<<14+1)...), alert(22)},
		// An SSL 2.0 hello (RFC 6101 appendix E.2): a version this server
		// does not speak.
		{"SSLv2 hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}, alert(70)},
		// §6.2: after a fatal alert both sides close at once; none is
		// answered with another.
		{"alert record", []byte{21, 3, 1, 0, 2, 2, 40}, nil},
		// §5.1: a record over 2^14 bytes is record_overflow, whatever its
		// type; a record that is no one alert is not a client's alert.
		{"alert record over 16 KiB", append([]byte{21, 3, 1, 0x40, 0x01}, make([]byte, 1<<14+1)...), alert(22)},
		{"alert record of 3 bytes", []byte{21, 3, 1, 0, 3, 2, 40, 0}, unexpectedMessage},
		{"cut hello", []byte{22, 3, 1, 0, 200, 1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil {
				// Our write side closed: a cut hello's read then ends at
				// once, and an alert's answer, if any, would come first.
				conn, err := net.Dial("tcp", e.https)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = conn.Write(c.in)
				_ = conn.(*net.TCPConn).CloseWrite()
				if got, _ := io.ReadAll(conn); len(got) != 0 {
					t.Fatalf("got %v, want a bare close", got)
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
