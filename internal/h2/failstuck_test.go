package h2

import (
	"net/http"
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
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("a handler's Connection: close waited for the connection error's GOAWAY, stuck behind a write")
	}
}
