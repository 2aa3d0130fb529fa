package h2

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestConnectionErrorBehindAStuckWrite: a connection error's GOAWAY that
// waits for a write stuck on a client that reads nothing (a large
// response, the socket full) holds back nothing but itself. Another
// stream's handler answering Connection: close goes on: the connection
// already goes away. fail waited for the write lock holding gmu, which
// that answer (goAwayGracefully), a drain's GOAWAY and the grace's end
// take: the handler stayed in WriteHeader for as long as the client
// read nothing.
func TestConnectionErrorBehindAStuckWrite(t *testing.T) {
	entered, answer, answered := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			buf := make([]byte, 1<<20)
			for {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		case "/close":
			entered <- struct{}{}
			<-answer
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusNoContent)
			close(answered)
		}
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	rc.until("the server's SETTINGS ACK", func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		return ok && sf.IsAck()
	})
	if err := rc.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	rc.headers(1, true, reqFields("GET", "/big")...)
	waitGoroutine(t, "(*responseWriter).send", "[IO wait") // it holds the write lock
	rc.headers(3, true, reqFields("GET", "/close")...)
	waitEntered(t, entered)
	rc.headers(4, true, reqFields("GET", "/")...) // an even id: a connection error
	waitGoroutine(t, "(*conn).fail", "[sync.Mutex.Lock")
	close(answer)
	waitAnswered(t, answered)
}

func waitAnswered(t *testing.T, answered <-chan struct{}) {
	t.Helper()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("a handler answering Connection: close never got out of WriteHeader: it waited behind a write stuck on the client")
	}
}

// TestConnectionErrorGoAwayAndAGracefulOne: a handler's Connection:
// close (GOAWAY 2^31-1 and a PING) and a connection error (GOAWAY
// PROTOCOL_ERROR naming the last stream) that meet while a write holds
// the write lock come out in the order they were decided, the connection
// error's last: a GOAWAY 2^31-1 after it would name a higher stream than
// an earlier GOAWAY did (RFC 9113 §6.8), and nothing is written after a
// connection error's GOAWAY. Decided after the connection error, the
// graceful GOAWAY is not sent at all. The write lock's holder writes the
// queue (unlockWrite); fail writes its GOAWAY behind what was queued
// before it and drops what is queued after.
func TestConnectionErrorGoAwayAndAGracefulOne(t *testing.T) {
	for _, tt := range []struct {
		name       string
		closeFirst bool   // the handler's Connection: close before the connection error
		want       string // the GOAWAYs, in order
	}{
		{"Connection: close first", true, "2147483647 NO_ERROR, 3 PROTOCOL_ERROR"},
		{"connection error first", false, "3 PROTOCOL_ERROR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			entered, answer, answered := make(chan struct{}, 2), make(chan struct{}), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				if r.URL.Path == "/hold" {
					_, _ = io.WriteString(w, "held")
					w.(http.Flusher).Flush() // waits for the client, the write lock held
					return
				}
				<-answer
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusNoContent)
				close(answered)
			})
			rc, sc := serveStuck(t, h)
			rc.headers(1, true, reqFields("GET", "/close")...)
			waitEntered(t, entered)
			sc.stick()
			rc.headers(3, true, reqFields("GET", "/hold")...)
			waitEntered(t, entered)
			select {
			case <-sc.entered: // the write waits for the client, the lock held
			case <-time.After(10 * time.Second):
				t.Fatal("the handler wrote nothing")
			}
			if tt.closeFirst {
				close(answer)
				waitAnswered(t, answered)
			}
			rc.headers(4, true, reqFields("GET", "/")...) // an even id: a connection error
			waitGoroutine(t, "(*conn).fail", "[sync.Mutex.Lock")
			if !tt.closeFirst {
				close(answer)
				waitAnswered(t, answered)
			}
			sc.free()

			var goaways []string
			_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				f, err := rc.fr.ReadFrame()
				if err != nil {
					if isTimeout(err) {
						t.Fatal("the connection was not closed")
					}
					break
				}
				if len(goaways) > 0 && strings.Contains(goaways[len(goaways)-1], "PROTOCOL") {
					t.Errorf("after the connection error's GOAWAY, %v", f)
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					goaways = append(goaways, fmt.Sprint(g.LastStreamID, " ", g.ErrCode))
				}
				if len(goaways) > 0 && strings.Contains(goaways[len(goaways)-1], "PROTOCOL") {
					_ = rc.c.(*net.TCPConn).CloseWrite() // the server's linger ends at once
				}
			}
			if got := strings.Join(goaways, ", "); got != tt.want {
				t.Errorf("GOAWAYs %s; want %s", got, tt.want)
			}
		})
	}
}
