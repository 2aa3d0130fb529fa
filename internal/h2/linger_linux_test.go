//go:build linux

package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestConnectionErrorGoAwayOutlivesUnreadFrames: a connection error's
// GOAWAY reaches a client that is still sending when the server gives up
// on it, and that has yet to read what the server sent before (here, the
// flood's PING ACKs, more than its receive buffer holds, so the GOAWAY
// waits behind them in the server's socket). Closed with the client's
// frames unread, the server's socket sends a reset, which drops what it
// has not sent yet: the client read the ACKs and then "connection reset
// by peer", never the reason. Over TCP and under TLS, as the edge serves.
func TestConnectionErrorGoAwayOutlivesUnreadFrames(t *testing.T) {
	t.Parallel()
	cert, pool := testutil.SelfSigned(t, "a.example")
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, tt := range []struct {
		name string
		wrap func(net.Conn) net.Conn
		dial func(d *net.Dialer, addr string) (net.Conn, error)
	}{
		{"tcp", func(c net.Conn) net.Conn { return c }, func(d *net.Dialer, addr string) (net.Conn, error) {
			return d.Dial("tcp", addr)
		}},
		{"tls", func(c net.Conn) net.Conn {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
			_ = tc.Handshake()
			return tc
		}, func(d *net.Dialer, addr string) (net.Conn, error) {
			return tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2"}})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ended := make(chan struct{})
			var once sync.Once
			_, addr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
				return tt.wrap(&endNoted{TCPConn: c.(*net.TCPConn), end: func() { once.Do(func() { close(ended) }) }})
			})
			// The server's ACKs overflow the client's buffer.
			c, err := tt.dial(smallBufDialer(), addr)
			if err != nil {
				t.Fatal(err)
			}
			rc := rawOver(t, c)
			// One write: pingsFree+maxEmptyFrames PINGs and a frame more
			// end the connection; the rest are unread when it ends.
			var burst bytes.Buffer
			bf := http2.NewFramer(&burst, nil)
			for i := range 3000 {
				_ = bf.WritePing(false, [8]byte{byte(i >> 8), byte(i)})
			}
			if _, err := c.Write(burst.Bytes()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the flood did not end the connection")
			}
			acks := 0
			for {
				f, err := rc.next()
				if err != nil {
					t.Fatalf("after %d PING ACKs, no GOAWAY: %v", acks, err)
				}
				switch f := f.(type) {
				case *http2.PingFrame:
					acks++
				case *http2.GoAwayFrame:
					if f.ErrCode != http2.ErrCodeEnhanceYourCalm {
						t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", f.ErrCode)
					}
					return
				}
			}
		})
	}
}

// TestGoingAwayOutlivesClientFrames: a connection that goes away with no
// stream left (told to by Shutdown, or idle) closes once the client has
// had a moment to read the GOAWAY; but a client that is still reading the
// last response then sends what reading it entails (WINDOW_UPDATEs, a
// PING), and data that reaches a closed socket has it send a reset, which
// drops what it has yet to send: the response's tail and the GOAWAY. The
// server ends its side first and reads out the client's frames, so the
// client reads the whole response, then GOAWAY NO_ERROR, then the end.
func TestGoingAwayOutlivesClientFrames(t *testing.T) {
	t.Parallel()
	const size = 32 << 10 // more than the client's receive buffer holds
	for _, tt := range []struct {
		name string
		idle time.Duration
		// goAway has the server go away once the response is written.
		goAway func(s *Server)
	}{
		{"idle", 50 * time.Millisecond, func(*Server) {}},
		{"shutdown", 0, func(s *Server) {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = s.Shutdown(ctx)
			}()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			written := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				defer close(written)
				_, _ = w.Write(make([]byte, size))
			})
			ended := make(chan struct{})
			var once sync.Once
			s, addr := serveWrapped(t, Options{Handler: h, IdleTimeout: tt.idle}, func(c net.Conn) net.Conn {
				return &endNoted{TCPConn: c.(*net.TCPConn), end: func() { once.Do(func() { close(ended) }) }}
			})
			c, err := smallBufDialer().Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			rc := rawOver(t, c, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
			if err := rc.fr.WriteWindowUpdate(0, 1<<20); err != nil {
				t.Fatal(err)
			}
			rc.headers(1, true, reqFields("GET", "/")...)
			<-written
			tt.goAway(s)
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not end")
			}
			// What a client reading the response sends.
			if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
				t.Fatal(err)
			}
			seen := readToClose(t, rc, false)
			if len(seen.body[1]) != size || !seen.ended[1] {
				t.Fatalf("read %d bytes of %d (ended: %v)", len(seen.body[1]), size, seen.ended[1])
			}
			if len(seen.goaways) != 1 || seen.goaways[0].ErrCode != http2.ErrCodeNo {
				t.Fatalf("GOAWAYs %+v, want one NO_ERROR", seen.goaways)
			}
		})
	}
}

// smallBufDialer dials with a 4 KiB receive buffer, set before the
// handshake sizes the window: what the server writes overflows it.
func smallBufDialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
	}}
}

// endNoted is the server's side of a test connection: end is called
// when the server ends its writing (a close or a half-close).
type endNoted struct {
	*net.TCPConn
	end func()
}

func (c *endNoted) Close() error {
	defer c.end()
	return c.TCPConn.Close()
}

func (c *endNoted) CloseWrite() error {
	defer c.end()
	return c.TCPConn.CloseWrite()
}
