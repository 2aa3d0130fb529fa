package gateway

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestGuardPipelinedUpgradeKeepsEarlyBytes: a WebSocket-style upgrade, alone
// or pipelined behind a plain request, with
// the client's first bytes of the new protocol right
// behind its head. The host must receive every byte after its 101.
func TestGuardPipelinedUpgradeKeepsEarlyBytes(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan string, 4)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			time.Sleep(100 * time.Millisecond)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			got <- "hijack: " + err.Error()
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var sb strings.Builder
		buf := make([]byte, 64)
		for sb.Len() < len("HELLO\nWORLD") {
			n, err := brw.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- sb.String()
	}))
	addr := guardedGateway(t, e)
	const h = "Host: hello.apps.test\r\n"
	const ws = "GET /ws HTTP/1.1\r\n" + h + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nHELLO\nWORLD"
	for _, tc := range []struct{ name, first string }{
		{"alone", ""},
		{"pipelined", "GET /a HTTP/1.1\r\n" + h + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, tc.first+ws)
			select {
			case s := <-got:
				if s != "HELLO\nWORLD" {
					t.Fatalf("host got %q after its 101, want %q", s, "HELLO\nWORLD")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no upgrade reached the host")
			}
		})
	}
}

// tapListener reports on reached once its connections have read at least
// want bytes in all: then the guard has them, whichever of net/http's
// reads asked.
type tapListener struct {
	net.Listener
	want    int
	reached chan struct{}
}

func (l tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, l: l}, nil
}

type tapConn struct {
	net.Conn
	l    tapListener
	read int
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.read < c.l.want && c.read+n >= c.l.want {
		close(c.l.reached)
	}
	c.read += n
	return n, err
}

// TestGuardPipelinedUpgradeKeepsFrameBytes: a WebSocket upgrade sent while
// the answer to the request before it is still being made, with the
// client's first frame right behind its head. A frame begins with a byte
// no request line begins with (0x81); it is the upgrade's, not a next
// request's, once net/http has finished the answer before and is yet to
// read the upgrade the guard already passed. Before the fix the guard
// refused it then, as if it began the next request, and the upgrade that
// followed lost its connection (errRefusedThenHijacked): the host got no
// frame.
func TestGuardPipelinedUpgradeKeepsFrameBytes(t *testing.T) {
	// RFC 6455 §5.7: a masked text frame "Hello".
	const frame = "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"
	e := newEnv(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	got := make(chan string, 1)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			close(started)
			<-release
			_, _ = io.WriteString(w, "a")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			got <- "hijack: " + err.Error()
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, len(frame))
		n, _ := io.ReadFull(brw, b)
		got <- string(b[:n])
	}))
	const (
		a  = "GET /a HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n"
		ws = "GET /ws HTTP/1.1\r\nHost: hello.apps.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	)
	reached := make(chan struct{})
	s := httptest.NewUnstartedServer(asEdge(e.gw))
	s.Listener = GuardListener(tapListener{s.Listener, len(a) + len(ws), reached})
	GuardServer(s.Config)
	s.Start()
	t.Cleanup(s.Close)

	c, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, a); err != nil {
		t.Fatal(err)
	}
	// Sent while /a is answered: read by net/http's background read, which
	// ends before net/http finishes the answer to /a.
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("/a never reached the host")
	}
	if _, err := io.WriteString(c, ws+frame); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never read the upgrade")
	}
	close(release)
	select {
	case s := <-got:
		if s != frame {
			t.Fatalf("host got %q after its 101, want the frame %q", s, frame)
		}
	case <-time.After(10 * time.Second):
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		b, _ := io.ReadAll(c)
		t.Fatalf("no upgrade reached the host; the client read %q", b)
	}
}
