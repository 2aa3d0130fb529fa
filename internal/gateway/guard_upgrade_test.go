package gateway

import (
	"io"
	"net"
	"net/http"
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
