package edge

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExpectContinueTrickledBody: with Expect: 100-continue, a handler
// that reads the body after working longer than IdleTimeout sends its
// 100, and a client that then sends its body a byte every IdleTimeout/3
// gets it read whole: the bound is on each gap, not on the request.
func TestExpectContinueTrickledBody(t *testing.T) {
	// Long enough that a gap of idle/3 leaves a scheduler on a shared
	// machine a few hundred milliseconds (a read is re-armed only once
	// less than half the bound is left).
	const idle = 1500 * time.Millisecond
	const n = 6
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * idle)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
			return
		}
		w.Write(b)
	})
	for _, lane := range []bool{false, true} {
		t.Run(map[bool]string{false: "net/http", true: "lane hands over"}[lane], func(t *testing.T) {
			t.Parallel()
			e := start(t, Options{HTTPMode: ModeServe, Handler: h, DisableLane: !lane, IdleTimeout: idle, DrainTimeout: idle})
			c := dialPlain(t, e.http)
			defer c.Close()
			if _, err := io.WriteString(c, "PUT / HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: "+strconv.Itoa(n)+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * idle))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusContinue {
				t.Fatalf("want 100 Continue first: %v, %v", res, err)
			}
			for range n {
				time.Sleep(idle / 3)
				if _, err := io.WriteString(c, "x"); err != nil {
					t.Fatal(err)
				}
			}
			res, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || string(b) != strings.Repeat("x", n) {
				t.Fatalf("answered %d %q, want 200 and the body echoed", res.StatusCode, b)
			}
		})
	}
}

// TestReusedAfterDrainNoStaleBound: a body the handler left unread, sent
// by the client after the answer, is read by net/http within the bound
// and the connection kept; the next request, sent whole past the bound
// armed for the first (but within the keep-alive idle time), is answered:
// it inherits no deadline of the first request's.
func TestReusedAfterDrainNoStaleBound(t *testing.T) {
	const idle = time.Second
	answered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, "next")
			return
		}
		w.WriteHeader(http.StatusPreconditionFailed)
		answered <- struct{}{}
	})
	e := start(t, Options{HTTPMode: ModeServe, Handler: h, DisableLane: true, IdleTimeout: idle, DrainTimeout: idle})
	c := dialPlain(t, e.http)
	defer c.Close()
	t0 := time.Now() // before the bound is armed
	if _, err := io.WriteString(c, "PUT / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-answered:
	case <-time.After(20 * idle):
		t.Fatal("the handler never answered")
	}
	if _, err := io.WriteString(c, strings.Repeat("x", 1000)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * idle))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusPreconditionFailed || res.Close {
		t.Fatalf("answered %d (close %v), want 412 and the connection kept", res.StatusCode, res.Close)
	}
	// The next head comes in two parts, its end after the first request's
	// bound (t0+idle) and before the keep-alive idle time runs out.
	time.Sleep(time.Until(t0.Add(idle * 3 / 4)))
	if _, err := io.WriteString(c, "GET /next HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(t0.Add(idle * 5 / 4)))
	if _, err := io.WriteString(c, "Host: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the next request on the connection: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "next" {
		t.Fatalf("answered %d %q, want 200 \"next\"", res.StatusCode, b)
	}
}

// TestHijackWithUnreadBody: a handler that takes the connection over
// (an Upgrade carrying a body) without reading the body through net/http,
// and returns leaving it to a goroutine of its own, reads the body and
// what follows from the connection however long that goroutine waits
// first: neither the bound armed for the body as the handler started nor
// the one renewed as it returns ends the taken connection.
func TestHijackWithUnreadBody(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	const idle = 500 * time.Millisecond
	taken := make(chan struct{}) // closed as the connection's goroutine ends
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			close(taken)
			return
		}
		io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		go func() {
			defer close(taken)
			defer c.Close()
			time.Sleep(3 * idle)
			p := make([]byte, 10)
			if _, err := io.ReadFull(brw, p); err != nil {
				return
			}
			brw.Write(p)
			brw.Flush()
		}()
		time.Sleep(idle) // past half the bound: returning would renew it
	})
	defer func() { <-taken }() // the client's Close ends the goroutine's read
	e := start(t, Options{HTTPMode: ModeServe, Handler: h, DisableLane: true, IdleTimeout: idle, DrainTimeout: idle})
	c := dialPlain(t, e.http)
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\nContent-Length: 5\r\n\r\nhello"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * idle))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("want 101: %v, %v", res, err)
	}
	// After the bound armed at the handler's start.
	time.Sleep(2 * idle)
	if _, err := io.WriteString(c, "world"); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 10)
	if _, err := io.ReadFull(br, p); err != nil || string(p) != "helloworld" {
		t.Fatalf("the taken connection echoed %q, %v; want %q", p, err, "helloworld")
	}
}
