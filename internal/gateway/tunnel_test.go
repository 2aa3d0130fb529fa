package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

const (
	testTunnelIdle = time.Second
	tickEvery      = 300 * time.Millisecond
	ticks          = 7 // ~2 s of traffic, twice the idle bound
)

// tunnelHost answers an upgrade with 101, reads what the client sends
// (each byte on recv) and, with talk, sends a byte every tickEvery, ticks
// times. gone is closed once its side of the tunnel has ended.
func tunnelHost(t *testing.T, talk bool, recv chan<- byte, gone chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("host hijack: %v", err)
			return
		}
		defer close(gone)
		defer c.Close()
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // the test's own bound
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // owned: ends at stop or a failed write, waited for below
			defer close(done)
			for i := 0; talk && i < ticks; i++ {
				select {
				case <-stop:
					return
				case <-time.After(tickEvery):
				}
				if _, err := c.Write([]byte{'h'}); err != nil {
					return
				}
			}
		}()
		var b [1]byte
		for {
			if _, err := brw.Read(b[:]); err != nil {
				break
			}
			recv <- b[0]
		}
		close(stop)
		<-done
	})
}

// TestTunnelIdleTimeout: an upgraded connection (101) that carries no
// byte either way for the tunnel idle timeout is closed on both sides,
// never sooner; one that carries bytes, in either direction alone, stays
// open for as long as they flow, then closes once idle.
func TestTunnelIdleTimeout(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	for _, tc := range []struct {
		name              string
		clientTalks, host bool
	}{
		{"idle", false, false},
		{"client sends", true, false},
		{"host sends", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out the idle bound
			e := newEnv(t, func(o *Options) { o.TunnelIdleTimeout = testTunnelIdle })
			recv, gone := make(chan byte, 2*ticks), make(chan struct{})
			e.backend("h1", "hello", tunnelHost(t, tc.host, recv, gone))
			c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mark := time.Now() // the tunnel's last byte passes after this
			_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.apps.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
				"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			if res := readResponse(t, br); res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d, want 101", res.StatusCode)
			}
			for i := 0; i < ticks && (tc.clientTalks || tc.host); i++ {
				if tc.clientTalks {
					time.Sleep(tickEvery)
					mark = time.Now()
					if _, err := c.Write([]byte{'c'}); err != nil {
						t.Fatalf("write %d: %v", i, err)
					}
					select {
					case <-recv:
					case <-gone:
						t.Fatalf("tunnel closed at byte %d while bytes flowed", i)
					case <-time.After(5 * time.Second):
						t.Fatalf("byte %d never reached the host", i)
					}
				} else if b, err := br.ReadByte(); err != nil || b != 'h' {
					t.Fatalf("host's byte %d: %q, %v (tunnel closed while bytes flowed?)", i, b, err)
				}
			}
			// Now silent: the gateway must close the tunnel.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = br.ReadByte()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the idle tunnel was not closed within 10s")
			} else if err == nil {
				t.Fatal("a byte came down the idle tunnel")
			}
			if d := time.Since(mark); d < testTunnelIdle && !tc.host {
				t.Fatalf("closed %s after the last byte, before the idle timeout %s", d, testTunnelIdle)
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the host's side of the idle tunnel is still open")
			}
		})
	}
}

// TestTunnelIdleTimeoutNegative: a negative bound is refused by New.
func TestTunnelIdleTimeoutNegative(t *testing.T) {
	_, err := New(Options{ClusterID: "c1", Live: newEnv(t, nil).live, TunnelIdleTimeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "TunnelIdleTimeout") {
		t.Fatalf("New: %v, want a TunnelIdleTimeout error", err)
	}
}
