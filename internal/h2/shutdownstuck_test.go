package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// heldConn is the server's side of a TCP connection whose writes, once
// held, wait until it is closed: a client that reads nothing, every
// buffer between full. Its Close lets a waiting write on to the closed
// socket, which fails it, as a real one's Close does.
type heldConn struct {
	net.Conn
	held     atomic.Bool
	alerts   atomic.Bool   // hold TLS 1.2 alert records only (close_notify)
	waiting  chan struct{} // closed when a held write first waits
	closed   chan struct{}
	waitOnce sync.Once
	once     sync.Once
}

func (c *heldConn) Write(p []byte) (int, error) {
	if c.held.Load() || c.alerts.Load() && len(p) > 0 && p[0] == 21 {
		c.waitOnce.Do(func() { close(c.waiting) })
		<-c.closed
	}
	return c.Conn.Write(p)
}

func (c *heldConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestShutdownBoundedByItsContext: Shutdown returns once its context
// ends, whatever a connection whose client reads nothing holds up, and
// the other connections have their GOAWAY before then; Close then closes
// every connection. Shutdown wrote each GOAWAY in turn on its own
// goroutine: one to a connection whose socket takes no more (its write
// lock free, the write itself stuck) waited there for as long as the
// client did, past the context's end, and held back the GOAWAYs of the
// connections after it. A connection whose handler is stuck writing a
// large response holds its write lock: its GOAWAY is queued for that
// writer, and Shutdown must not wait for it either.
func TestShutdownBoundedByItsContext(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			buf := make([]byte, 1<<20)
			for {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		default:
			w.(http.Flusher).Flush() // the response's HEADERS out, then nothing
			<-r.Context().Done()
		}
	})
	for _, tc := range []struct {
		name string
		// stick leaves the stuck client's connection with a response in
		// flight that it does not read.
		stick func(t *testing.T, rc *rawClient, sc *heldConn)
	}{
		{"socket takes no more", func(t *testing.T, rc *rawClient, sc *heldConn) {
			rc.headers(1, true, reqFields("GET", "/wait")...)
			rc.until("the response's HEADERS", func(f http2.Frame) bool {
				_, ok := f.(*http2.MetaHeadersFrame)
				return ok
			})
			// The handler has let go of the write lock: nothing is
			// written but what Shutdown writes.
			waitGoroutine(t, "TestShutdownBoundedByItsContext.func1", "[chan receive")
			sc.held.Store(true)
		}},
		{"large response unread", func(t *testing.T, rc *rawClient, sc *heldConn) {
			if err := rc.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
				t.Fatal(err)
			}
			rc.headers(1, true, reqFields("GET", "/big")...)
			waitGoroutine(t, "(*responseWriter).send", "[IO wait")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepted := make(chan *heldConn, 2)
			s, addr := serveWrapped(t, Options{Handler: h}, func(c net.Conn) net.Conn {
				hc := &heldConn{Conn: c, waiting: make(chan struct{}), closed: make(chan struct{})}
				accepted <- hc
				return hc
			})
			settled := func(rc *rawClient) *heldConn {
				rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
					sf, ok := f.(*http2.SettingsFrame)
					return ok && sf.IsAck()
				})
				return <-accepted
			}
			healthy := dialRaw(t, addr)
			settled(healthy)
			stuck := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
			sc := settled(stuck)
			tc.stick(t, stuck, sc)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(ctx) }()
			// The healthy connection's GOAWAY comes while Shutdown still
			// waits on the stuck one: its context has not ended.
			healthy.until("the healthy connection's GOAWAY", func(f http2.Frame) bool {
				_, ok := f.(*http2.GoAwayFrame)
				return ok
			})
			if sc.held.Load() {
				select {
				case <-sc.waiting: // its GOAWAY's write waits for the client
				case <-time.After(10 * time.Second):
					t.Fatal("Shutdown wrote nothing to the stuck connection")
				}
			}
			cancel()
			select {
			case err := <-shut:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Shutdown: %v, want its context's error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Shutdown did not return after its context ended")
			}

			closed := make(chan struct{})
			go func() { defer close(closed); _ = s.Close() }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			for name, rc := range map[string]*rawClient{"healthy": healthy, "stuck": stuck} {
				for {
					if _, err := rc.next(); err != nil {
						var ne net.Error
						if errors.As(err, &ne) && ne.Timeout() {
							t.Errorf("the %s connection is still open after Close", name)
						}
						break
					}
				}
			}
		})
	}
}

// TestShutdownEndsALingerStuckOnCloseNotify: a TLS connection that
// lingers after its GOAWAY, its close_notify stuck on a client that reads
// nothing, is closed once Shutdown's context ends, and Shutdown returns.
// Closing the TLS connection wrote close_notify too, which waited behind
// the stuck one (on a real socket up to crypto/tls's 5 s deadline, here
// until the socket closed), with the server's lock held.
func TestShutdownEndsALingerStuckOnCloseNotify(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "a.example")
	accepted := make(chan *heldConn, 1)
	s, addr := serveWrapped(t, Options{Handler: http.NotFoundHandler()}, func(c net.Conn) net.Conn {
		hc := &heldConn{Conn: c, waiting: make(chan struct{}), closed: make(chan struct{})}
		accepted <- hc
		// TLS 1.2: its alerts are records of their own type, which
		// heldConn tells apart.
		tc := tls.Server(hc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MaxVersion: tls.VersionTLS12})
		_ = tc.Handshake()
		return tc
	})
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	rc := rawOver(t, c)
	rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})
	hc := <-accepted
	t.Cleanup(func() { _ = hc.Close() }) // before the server's cleanup, which waits for it
	hc.alerts.Store(true)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	rc.until("the GOAWAY", func(f http2.Frame) bool {
		_, ok := f.(*http2.GoAwayFrame)
		return ok
	})
	select {
	case <-hc.waiting: // idle after its GOAWAY, it lingers: its close_notify waits
	case <-time.After(10 * time.Second):
		t.Fatal("the connection wrote no close_notify")
	}
	cancel()
	select {
	case err := <-shut:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown: %v, want its context's error", err)
		}
	case <-time.After(5 * time.Second):
		_ = hc.Close() // let the server go
		t.Fatal("Shutdown did not return after its context ended")
	}
	select {
	case <-hc.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the lingering connection was not closed as Shutdown's context ended")
	}
}

// TestCloseEndsTLSConnectionsStuckOnCloseNotify: Close closes a TLS
// connection whose client reads nothing (its socket full, no write in
// progress) and returns, whether the connection was still open or
// lingering after a drain's GOAWAY. An open one was closed through the
// TLS connection, whose Close wrote close_notify first: on a real socket
// that waited up to crypto/tls's 5 s for each such connection in turn
// (here, until the socket closed), with the server's lock held.
func TestCloseEndsTLSConnectionsStuckOnCloseNotify(t *testing.T) {
	cert, pool := testutil.SelfSigned(t, "a.example")
	for _, tc := range []struct {
		name  string
		drain bool // Shutdown first: the idle connection lingers after its GOAWAY
	}{
		{"open", false},
		{"lingering", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepted := make(chan *heldConn, 1)
			s, addr := serveWrapped(t, Options{Handler: http.NotFoundHandler()}, func(c net.Conn) net.Conn {
				hc := &heldConn{Conn: c, waiting: make(chan struct{}), closed: make(chan struct{})}
				accepted <- hc
				// TLS 1.2: its alerts are records of their own type,
				// which heldConn tells apart.
				tc := tls.Server(hc, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MaxVersion: tls.VersionTLS12})
				_ = tc.Handshake()
				return tc
			})
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			rc := rawOver(t, c)
			rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
				sf, ok := f.(*http2.SettingsFrame)
				return ok && sf.IsAck()
			})
			hc := <-accepted
			t.Cleanup(func() { _ = hc.Close() }) // before the server's cleanup, which waits for it
			hc.alerts.Store(true)

			if tc.drain {
				ctx, cancel := context.WithCancel(context.Background())
				shut := make(chan error, 1)
				go func() { shut <- s.Shutdown(ctx) }()
				defer func() { cancel(); <-shut }()
				rc.until("the GOAWAY", func(f http2.Frame) bool {
					_, ok := f.(*http2.GoAwayFrame)
					return ok
				})
				select {
				case <-hc.waiting: // it lingers: its close_notify waits
				case <-time.After(10 * time.Second):
					t.Fatal("the connection wrote no close_notify")
				}
			}

			closed := make(chan struct{})
			go func() { defer close(closed); _ = s.Close() }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				_ = hc.Close() // let the server go
				<-closed
				t.Fatal("Close did not return: it waited on the connection's close_notify")
			}
			select {
			case <-hc.closed:
			default:
				t.Fatal("Close returned with the connection open")
			}
		})
	}
}
