package edge

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSlowHandlerPromptBody: the body bound is armed as the handler
// starts, but a handler that works longer than IdleTimeout before it
// touches a body the client sent at once (a proxy dialling its host,
// a queue) is not failed for it, nor does it lose its connection: its
// read gets the whole body, or net/http's own read of a body left unread
// does, and the next request on the connection is answered. Over every
// listener net/http serves HTTP/1 on, a body net/http holds already (a
// few bytes) and one still in the socket (past net/http's 4 KiB buffer).
func TestSlowHandlerPromptBody(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	const idle = 500 * time.Millisecond
	const work = 3 * idle // the handler's, before it touches the body
	listeners := []struct {
		name string
		dial func(t *testing.T, e *running) net.Conn
	}{
		{"management", func(t *testing.T, e *running) net.Conn { return dialPlain(t, e.mgmt) }},
		{"http", func(t *testing.T, e *running) net.Conn { return dialPlain(t, e.http) }},
		{"https", func(t *testing.T, e *running) net.Conn {
			c, err := dialTLS(t, e.https, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, "next")
			return
		}
		time.Sleep(work)
		switch r.URL.Path {
		case "/unread": // answered as a slow auth check would
			w.WriteHeader(http.StatusUnauthorized)
		case "/closed": // closed unread, as a transport whose host answered
			r.Body.Close()
			w.WriteHeader(http.StatusUnauthorized)
		default:
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			fmt.Fprintf(w, "%d", len(b))
		}
	})
	for _, l := range listeners {
		for _, size := range []int{10, 64 << 10} {
			for _, tc := range []struct {
				path   string
				status int
				body   string
			}{
				{"/read", http.StatusOK, strconv.Itoa(size)},
				{"/unread", http.StatusUnauthorized, ""},
				{"/closed", http.StatusUnauthorized, ""},
			} {
				t.Run(fmt.Sprintf("%s/%d bytes%s", l.name, size, tc.path), func(t *testing.T) {
					t.Parallel()
					e := start(t, Options{HTTPMode: ModeServe, Handler: h, Management: h,
						DisableLane: true, IdleTimeout: idle, DrainTimeout: idle})
					c := l.dial(t, e)
					defer c.Close()
					msg := "PUT " + tc.path + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n" +
						strings.Repeat("x", size) + "GET /next HTTP/1.1\r\nHost: localhost\r\n\r\n"
					go io.WriteString(c, msg) // the socket may not take it all before the handler reads
					_ = c.SetReadDeadline(time.Now().Add(20 * work))
					br := bufio.NewReader(c)
					for _, want := range []struct {
						status int
						body   string
					}{{tc.status, tc.body}, {http.StatusOK, "next"}} {
						res, err := http.ReadResponse(br, nil)
						if err != nil {
							t.Fatalf("want %d on the connection: %v", want.status, err)
						}
						b, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if res.StatusCode != want.status || string(b) != want.body || res.Close {
							t.Fatalf("answered %d %q (close %v), want %d %q and the connection kept", res.StatusCode, b, res.Close, want.status, want.body)
						}
					}
				})
			}
		}
	}
}
