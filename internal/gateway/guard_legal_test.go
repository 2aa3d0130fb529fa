package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuardPassesLegalSequences: sequences of honest requests on one
// connection, where what follows a request's head is body, blank lines
// net/http skips, or a new protocol's bytes, none of which may be taken
// for a next request's first byte (0x16 and 0x81 would be refused). Each
// step writes its bytes and reads the answers it expects, in order.
func TestGuardPassesLegalSequences(t *testing.T) {
	const frame = "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58" // RFC 6455 §5.7
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/noread":
			_, _ = io.WriteString(w, "noread")
		case "/ws":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, len(frame))
			n, _ := io.ReadFull(brw, b)
			_, _ = c.Write(b[:n]) // echoed
		default:
			b, _ := io.ReadAll(r.Body)
			_, _ = io.WriteString(w, r.URL.Path+" "+strconv.Itoa(len(b)))
		}
	}))
	addr := guardedGateway(t, e)
	const h = "Host: hello.apps.test\r\n"
	get := func(p string) string { return "GET " + p + " HTTP/1.1\r\n" + h + "\r\n" }
	post := func(p, body string) string {
		return "POST " + p + " HTTP/1.1\r\n" + h + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	tls := "\x16\x03\x01\x02\x00"
	type step struct {
		send string
		want []int    // statuses of the answers to read
		body []string // the last answer's body, when given
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"crlf after a post body, pipelined", []step{{send: post("/p", tls) + "\r\n" + get("/g"), want: []int{200, 200}, body: []string{"/g 0"}}}},
		{"four blank bytes after a post, later", []step{
			{send: post("/p", tls), want: []int{200}, body: []string{"/p 5"}},
			{send: "\r\n\r\n" + get("/g"), want: []int{200}, body: []string{"/g 0"}},
		}},
		{"blank bytes one at a time after a post", []step{
			{send: post("/p", "x"), want: []int{200}},
			{send: "\r"}, {send: "\n"}, {send: get("/g"), want: []int{200}, body: []string{"/g 0"}},
		}},
		{"after a 100-continue", []step{
			{send: "POST /p HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n", want: []int{100}},
			{send: tls, want: []int{200}, body: []string{"/p 5"}},
			{send: get("/g"), want: []int{200}, body: []string{"/g 0"}},
		}},
		{"chunked body with trailer", []step{{
			send: "POST /p HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\n" + tls + "\r\n0\r\nX-T: 1\r\n\r\n" + get("/g"),
			want: []int{200, 200}, body: []string{"/g 0"},
		}}},
		{"body left unread", []step{{send: post("/noread", tls+strings.Repeat("\x81", 5000)) + get("/g"), want: []int{200, 200}, body: []string{"/g 0"}}}},
		{"h2c upgrade declined", []step{
			{send: "GET /u HTTP/1.1\r\n" + h + "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", want: []int{200}, body: []string{"/u 0"}},
			{send: get("/g"), want: []int{200}, body: []string{"/g 0"}},
		}},
		{"websocket frame after the 101", []step{
			{send: "GET /ws HTTP/1.1\r\n" + h + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", want: []int{101}},
			{send: frame},
		}},
		{"websocket frame right behind the upgrade", []step{
			{send: get("/g") + "GET /ws HTTP/1.1\r\n" + h + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" + frame, want: []int{200, 101}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			upgraded := false
			for _, s := range tt.steps {
				if _, err := io.WriteString(c, s.send); err != nil {
					t.Fatal(err)
				}
				if upgraded {
					b := make([]byte, len(frame))
					if _, err := io.ReadFull(br, b); err != nil || string(b) != frame {
						t.Fatalf("echo %q, %v; want the frame", b, err)
					}
					continue
				}
				for i, st := range s.want {
					res, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("after %q: %v", s.send, err)
					}
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != st {
						t.Fatalf("after %q: answer %d is %d %q, want %d", s.send, i, res.StatusCode, b, st)
					}
					if i == len(s.want)-1 && len(s.body) > 0 && string(b) != s.body[0] {
						t.Fatalf("after %q: body %q, want %q", s.send, b, s.body[0])
					}
					upgraded = st == http.StatusSwitchingProtocols
				}
			}
			if upgraded && strings.Contains(tt.name, "right behind") {
				b := make([]byte, len(frame))
				if _, err := io.ReadFull(br, b); err != nil || string(b) != frame {
					t.Fatalf("echo %q, %v; want the frame", b, err)
				}
			}
		})
	}
}

// TestGuardPassesConnectTunnels: the gateway answers CONNECT 405 (it has
// no tunnel), and a TLS hello sent behind it then is refused as what it
// is, no request. A server with a CONNECT handler behind the guard (the
// guard wraps any net/http server) tunnels whatever follows its 200, sent
// after the 200 or right behind the CONNECT, alone or pipelined: the
// guard never looks at tunnel bytes.
func TestGuardPassesConnectTunnels(t *testing.T) {
	const hello = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
	const connect = "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n"

	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	out := answerTo(t, guardedGateway(t, e), "", "CONNECT hello.apps.test:443 HTTP/1.1\r\nHost: hello.apps.test:443\r\n\r\n"+hello)
	br := bufio.NewReader(strings.NewReader(out))
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("CONNECT to the gateway: %v %v, want 405 (read %q)", res, err, out)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res, err = http.ReadResponse(br, nil); err != nil {
		t.Fatalf("after the 405: %v (read %q)", err, out)
	}
	body, _ := io.ReadAll(res.Body)
	wantConnProblem(t, res, body, http.StatusBadRequest, "the request does not begin with a method")

	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			_, _ = io.WriteString(w, "ok")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, len(hello))
		n, _ := io.ReadFull(brw, b)
		_, _ = c.Write(b[:n]) // echoed
	}))
	s.Listener = GuardListener(s.Listener)
	GuardServer(s.Config)
	s.Start()
	t.Cleanup(s.Close)
	for _, tc := range []struct {
		name, first, behind, after string
		answers                    int
	}{
		{"after the 200", "", "", hello, 1},
		{"right behind the connect", "", hello, "", 1},
		{"pipelined behind a request", "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", hello, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tc.first+connect+tc.behind); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i := range tc.answers {
				res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil || res.StatusCode != http.StatusOK {
					t.Fatalf("answer %d: %v %v, want 200", i, res, err)
				}
				if i < tc.answers-1 {
					_, _ = io.ReadAll(io.LimitReader(res.Body, 2))
				}
			}
			if _, err := io.WriteString(c, tc.after); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, len(hello))
			if _, err := io.ReadFull(br, b); err != nil || string(b) != hello {
				t.Fatalf("tunnel echoed %q, %v; want the hello", b, err)
			}
		})
	}
}
