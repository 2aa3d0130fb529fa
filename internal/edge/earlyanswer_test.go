package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEarlyAnswerUnsentBodyIsBounded: a request that declares a body
// and sends none, answered without the body being read (412, 401, 404),
// does not hold its connection for ever: net/http reads up to 256 KiB of
// an unread body to reuse the connection, and with no ReadTimeout on the
// server that read waited as long as the client liked (a cheap way to
// hold connections). The answer comes and the connection is closed after
// about IdleTimeout, on the management listener and on every listener
// whose HTTP/1 net/http serves (the lane hands it Expect:
// 100-continue). A client that sends its body at once after the handler
// answered keeps its connection: its next request is answered on it.
func TestEarlyAnswerUnsentBodyIsBounded(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	const idle = time.Second
	// The bound for the failure only: the connection ends about idle
	// after the answer, or never.
	const wait = 20 * idle
	listeners := []struct {
		name string
		lane bool
		dial func(t *testing.T, e *running) net.Conn
	}{
		{"management", false, func(t *testing.T, e *running) net.Conn { return dialPlain(t, e.mgmt) }},
		{"http net/http", false, func(t *testing.T, e *running) net.Conn { return dialPlain(t, e.http) }},
		{"http lane", true, func(t *testing.T, e *running) net.Conn { return dialPlain(t, e.http) }},
		{"https net/http", false, func(t *testing.T, e *running) net.Conn {
			c, err := dialTLS(t, e.https, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	}
	fresh := func(t *testing.T, lane bool) (*running, <-chan struct{}) {
		answered := make(chan struct{}, 1)
		early := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				io.WriteString(w, "next")
				return
			}
			if r.URL.Path == "/closed" {
				r.Body.Close() // unread, as a proxy's transport may
			}
			w.WriteHeader(http.StatusPreconditionFailed) // the body unread
			answered <- struct{}{}
		})
		e := start(t, Options{HTTPMode: ModeServe, Handler: early, Management: early,
			DisableLane: !lane, IdleTimeout: idle, DrainTimeout: idle})
		return e, answered
	}
	const head = "PUT /item HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n"
	for _, l := range listeners {
		for _, tc := range []struct{ name, head string }{
			{"no body sent", head},
			{"Expect: 100-continue, no body sent", head + "Expect: 100-continue\r\n"},
			{"the handler closes the body unread", strings.Replace(head, "/item", "/closed", 1)},
		} {
			if l.lane && !strings.Contains(tc.head, "Expect") {
				continue // the lane bounds its own drain
			}
			t.Run(l.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				e, _ := fresh(t, l.lane)
				c := l.dial(t, e)
				defer c.Close()
				msg := tc.head
				if _, err := io.WriteString(c, msg+"\r\n"); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(wait))
				br := bufio.NewReader(c)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer to a request whose body was not sent: %v", err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusPreconditionFailed || !res.Close {
					t.Errorf("answered %d (close %v), want %d and the connection closed", res.StatusCode, res.Close, http.StatusPreconditionFailed)
				}
				if b, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("after the answer: %q, %v; want the connection closed (EOF)", b, err)
				}
			})
		}
		if l.lane {
			continue
		}
		t.Run(l.name+"/body sent after the answer", func(t *testing.T) {
			t.Parallel()
			e, answered := fresh(t, false)
			c := l.dial(t, e)
			defer c.Close()
			if _, err := io.WriteString(c, head+"\r\n"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-answered:
			case <-time.After(wait):
				t.Fatal("the handler never answered")
			}
			if _, err := io.WriteString(c, strings.Repeat("x", 1000)+"GET /next HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(wait))
			br := bufio.NewReader(c)
			for _, want := range []int{http.StatusPreconditionFailed, http.StatusOK} {
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("want %d on the same connection: %v", want, err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != want || res.Close {
					t.Fatalf("answered %d (close %v), want %d, the connection kept", res.StatusCode, res.Close, want)
				}
			}
		})
	}
}

func dialPlain(t *testing.T, addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
