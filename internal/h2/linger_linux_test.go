//go:build linux

package h2

import (
	"bytes"
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
			// A small receive buffer, set before the handshake sizes the
			// window: the server's ACKs overflow it.
			d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
				return rc.Control(func(fd uintptr) {
					_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
				})
			}}
			c, err := tt.dial(d, addr)
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
