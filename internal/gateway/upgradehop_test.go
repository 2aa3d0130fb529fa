package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// TestUpgradeAnswerDropsHopByHop: the 101 a host answers an upgrade with
// reaches the client without the host's hop-by-hop fields (RFC 9110
// §7.6.1: Keep-Alive, Proxy-Connection, TE, Trailer, the Proxy-* ones, and
// every field its Connection names), as every other answer and 1xx does:
// they describe the host's connection to the gateway, not the client's.
// Connection: Upgrade and Upgrade stay, the tunnel works, and an
// end-to-end field passes. A 101 whose Connection does not name Upgrade
// is still refused (502): dropping the host's fields does not make one
// up. Through the real edge, lane on and off (an upgrade goes to net/http
// either way).
func TestUpgradeAnswerDropsHopByHop(t *testing.T) {
	const unnamed = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: X-Hop\r\nX-Hop: 1\r\n\r\n"
	const answer = "HTTP/1.1 101 Switching Protocols\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade, X-Hop\r\n" +
		"X-Hop: secret\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Proxy-Authenticate: Basic realm=\"host\"\r\n" +
		"TE: trailers\r\n" +
		"Trailer: X-T\r\n" +
		"X-App: kept\r\n" +
		"\r\n"
	addr := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		a := answer
		if req.URL.Path == "/unnamed" {
			a = unnamed
		}
		if _, err := io.WriteString(c, a); err != nil {
			return
		}
		line, _ := br.ReadString('\n') // the tunnel: echo one line
		_, _ = io.WriteString(c, "echo:"+line)
	})
	for _, disableLane := range []bool{false, true} {
		e := newEnv(t, nil)
		e.addHost("h1", "hello", "http", "http://"+addr)
		addr, _ := e.serve(disableLane)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.apps.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		br := bufio.NewReader(c)
		tp := textproto.NewReader(br)
		status, err := tp.ReadLine()
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := tp.ReadMIMEHeader()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(status, "HTTP/1.1 101 ") {
			t.Fatalf("lane off %v: status line %q", disableLane, status)
		}
		for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer"} {
			if v, ok := hdr[k]; ok {
				t.Errorf("lane off %v: the 101 carries the host's hop-by-hop %s: %q", disableLane, k, v)
			}
		}
		if got := hdr.Values("Connection"); len(got) != 1 || !strings.EqualFold(got[0], "Upgrade") {
			t.Errorf("lane off %v: Connection %q, want [Upgrade]", disableLane, got)
		}
		if got := hdr.Get("Upgrade"); got != "websocket" {
			t.Errorf("lane off %v: Upgrade %q, want websocket", disableLane, got)
		}
		if got := hdr.Get("X-App"); got != "kept" {
			t.Errorf("lane off %v: X-App %q, want kept", disableLane, got)
		}
		_, _ = io.WriteString(c, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo:ping\n" {
			t.Errorf("lane off %v: tunnel read %q, %v", disableLane, line, err)
		}
		c.Close()

		res := e.do("GET", "hello.apps.test", "/unnamed", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, nil)
		wantProblem(t, res, http.StatusBadGateway)
	}
}
