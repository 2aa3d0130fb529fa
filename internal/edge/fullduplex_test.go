package edge

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFullDuplexEarlyAnswerKeepsTheConnection: a handler in full duplex
// (http.ResponseController.EnableFullDuplex, as the proxy is for an
// HTTP/1 upload) that answers before the body came whole and returns
// without reading it leaves the connection to carry the client's next
// request, which net/http serves: the rest of the body, sent as the
// answer comes, is read and dropped as the handler returns. Left to
// net/http after the handler, the rest was read after net/http had
// stopped its watch for the client leaving, and the next request was
// lost (golang/go#68560) or, once the rest was closed unread, the rest
// itself read as requests. A rest that never comes still ends the
// connection after the answer.
func TestFullDuplexEarlyAnswerKeepsTheConnection(t *testing.T) {
	t.Parallel()
	const idle = time.Second
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, "next")
			return
		}
		_ = http.NewResponseController(w).EnableFullDuplex()
		switch r.URL.Path {
		case "/closed":
			r.Body.Close() // as a proxy's transport may, done with it
		case "/late":
			// A read after the Close (a transport's goroutine, late):
			// the body is not broken, and the connection is kept.
			r.Body.Close()
			_, _ = r.Body.Read(make([]byte, 1))
		}
		io.WriteString(w, "early")
	})
	part := strings.Repeat("u", 64<<10)
	for _, tc := range []struct {
		name    string
		lane    bool
		chunked bool
		path    string
		stall   bool
	}{
		{"net/http, a length", false, false, "/early", false},
		{"net/http, a length, closed", false, false, "/closed", false},
		{"net/http, a length, read after closed", false, false, "/late", false},
		{"net/http, chunked", false, true, "/early", false},
		{"lane, a length", true, false, "/early", false},
		{"lane, a length, the rest never sent", true, false, "/early", true},
		{"lane, chunked", true, true, "/early", false},
		{"lane, chunked, closed", true, true, "/closed", false},
		{"net/http, a length, the rest never sent", false, false, "/early", true},
		{"net/http, chunked, the rest never sent", false, true, "/early", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, Options{HTTPMode: ModeServe, Handler: h, DisableLane: !tc.lane, IdleTimeout: idle, DrainTimeout: idle})
			c := dialPlain(t, e.http)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: app.%s\r\nContent-Length: %d\r\n\r\n", tc.path, zone, 2*len(part))
			frame, end := part, ""
			if tc.chunked {
				head = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: app.%s\r\nTransfer-Encoding: chunked\r\n\r\n", tc.path, zone)
				frame, end = fmt.Sprintf("%x\r\n%s\r\n", len(part), part), "0\r\n\r\n"
			}
			if _, err := io.WriteString(c, head+frame); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			if !tc.stall {
				// The rest and the next request, as the answer comes.
				go func() {
					time.Sleep(idle / 5)
					_, _ = io.WriteString(c, frame+end+"GET /next HTTP/1.1\r\nHost: app."+zone+"\r\n\r\n")
				}()
			}
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to the upload: %v", err)
			}
			b, err := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || string(b) != "early" || err != nil {
				t.Fatalf("the upload: %d %q, %v; want 200 early", res.StatusCode, b, err)
			}
			if tc.stall {
				if _, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("after an answer to an upload whose rest never came: %v; want the connection closed", err)
				}
				return
			}
			res, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to the next request on the connection: %v", err)
			}
			b, err = io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || string(b) != "next" || err != nil {
				t.Fatalf("the next request: %d %q, %v; want 200 next", res.StatusCode, b, err)
			}
		})
	}
}

// TestFullDuplexStalledRestIsNoRequest: after a full-duplex handler's
// early answer, a client that stalls its upload past the bound and then
// sends the rest, request heads in it, and a request of its own gets
// none of them answered: where its next request starts is unknown, so
// the connection closes after the answer. net/http decides to close as
// the head goes out, which for a full-duplex handler's it does not:
// left open, the rest of the body was read as requests (smuggling), and
// a client that never sent it only met the idle timeout.
func TestFullDuplexStalledRestIsNoRequest(t *testing.T) {
	t.Parallel()
	const idle = 500 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, "answered "+r.URL.Path)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		io.WriteString(w, "early")
		_ = rc.Flush()
	})
	inner := strings.Repeat("GET /smuggled HTTP/1.1\r\nHost: app."+zone+"\r\n\r\n", 20)
	part := strings.Repeat("u", 1000)
	for _, tc := range []struct {
		name          string
		lane, chunked bool
	}{
		{"net/http, a length", false, false},
		{"net/http, chunked", false, true},
		{"lane, a length", true, false},
		{"lane, chunked", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, Options{HTTPMode: ModeServe, Handler: h, DisableLane: !tc.lane, IdleTimeout: idle, DrainTimeout: idle})
			c := dialPlain(t, e.http)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			head := fmt.Sprintf("POST /up HTTP/1.1\r\nHost: app.%s\r\nContent-Length: %d\r\n\r\n%s", zone, len(part)+len(inner), part)
			rest := inner
			if tc.chunked {
				head = fmt.Sprintf("POST /up HTTP/1.1\r\nHost: app.%s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", zone, len(part), part)
				rest = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(inner), inner)
			}
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(3 * idle / 2) // past the bound
				_, _ = io.WriteString(c, rest+"GET /next HTTP/1.1\r\nHost: app."+zone+"\r\n\r\n")
			}()
			br := bufio.NewReader(c)
			var got []string
			for {
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				b, _ := io.ReadAll(res.Body)
				got = append(got, fmt.Sprintf("%d %s", res.StatusCode, b))
			}
			if len(got) != 1 || got[0] != "200 early" {
				t.Fatalf("answers on a connection whose upload stalled after an early answer: %q; want only 200 early", got)
			}
		})
	}
}
