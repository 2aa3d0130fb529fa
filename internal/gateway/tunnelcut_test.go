package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// An upgraded connection held in Options.Conns is closed, both sides,
// when its app is taken out of service or the host that answered its 101
// is revoked, with no idle bound set; another app's, on another host,
// carries on.
func TestTunnelCutWhenTakenOutOfService(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(e *env)
	}{
		{"suspended", func(e *env) {
			e.b.PutApp(&route.App{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusSuspended})
		}},
		{"host revoked", func(e *env) {
			h := *e.b.Host("h1")
			h.State, h.Refused = route.HostProvisional, true
			e.b.SetHost(&h)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var conns *route.Conns
			e := newEnv(t, func(o *Options) { conns = route.NewConns(o.Live); o.Conns = conns })
			e.b.PutApp(&route.App{ID: "other", Mode: route.ModeHTTP, Status: route.StatusActive})
			recv, gone := make(chan byte, 8), make(chan struct{})
			e.backend("h1", "hello", tunnelHost(t, false, recv, gone))
			otherRecv, otherGone := make(chan byte, 8), make(chan struct{})
			e.backend("h2", "other", tunnelHost(t, false, otherRecv, otherGone))

			mine := openTunnel(t, e, "hello", recv)
			theirs := openTunnel(t, e, "other", otherRecv)
			if n := conns.Len(); n != 2 {
				t.Fatalf("%d upgraded connections held, want 2", n)
			}
			tc.event(e)
			if cuts := conns.Cut(e.live.Load()); len(cuts) != 1 || cuts[0].N != 1 {
				t.Fatalf("cut %+v, want one connection", cuts)
			}
			_ = mine.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := mine.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("client's side still open 5s after the cut: %v", err)
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("host's side still open 5s after the cut")
			}
			if _, err := theirs.Write([]byte{'c'}); err != nil {
				t.Fatalf("another app's tunnel: %v", err)
			}
			select {
			case <-otherRecv:
			case <-otherGone:
				t.Fatal("another app's tunnel was closed")
			case <-time.After(5 * time.Second):
				t.Fatal("another app's tunnel carries nothing")
			}
			theirs.Close()
			<-otherGone
			testutil.WaitFor(t, 5*time.Second, func() bool { return conns.Len() == 0 }, "still held after both ended")
		})
	}
}

// openTunnel upgrades a connection to app and proves it carries a byte
// to the host.
func openTunnel(t *testing.T, e *env, app string, recv <-chan byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: "+app+"."+testZone+"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if res := readResponse(t, bufio.NewReader(c)); res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%s: status %d, want 101", app, res.StatusCode)
	}
	if _, err := c.Write([]byte{'c'}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-recv:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: byte never reached the host", app)
	}
	return c
}
