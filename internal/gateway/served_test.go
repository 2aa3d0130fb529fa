package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/edge"
)

// serve puts e's gateway behind a real edge, wired as internal/gatehouse
// wires it (the guard on the plaintext listener, the lane unless
// disableLane), and returns the address of its http listener (serve mode).
func (e *env) serve(disableLane bool, edit func(*edge.Options)) string {
	e.t.Helper()
	o := edge.Options{HTTPAddr: "127.0.0.1:0", ManagementAddr: "127.0.0.1:0", HTTPMode: edge.ModeServe,
		Handler: e.gw, DisableLane: disableLane, WrapHTTP: GuardListener, WrapServer: GuardServer, RequestContext: e.gw.RequestContext}
	if edit != nil {
		edit(&o)
	}
	ed, err := edge.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := ed.Listen(); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ed.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return ed.Addr("http").String()
}

// exchangeAt writes raw to addr over a new TCP connection and returns
// everything the server sent until it closed the connection (or 5 s
// passed).
func exchangeAt(t testing.TB, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { _, _ = io.WriteString(c, raw) }()
	b, _ := io.ReadAll(c)
	return string(b)
}

// responses reads every response in raw, 1xx included, and returns their
// status lines and the last one's body.
func responses(t testing.TB, raw string) (lines []string, body string) {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(raw))
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading %q: %v", raw, err)
		}
		lines = append(lines, res.Proto+" "+res.Status)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 200 {
			return lines, string(b)
		}
	}
}

// TestHTTP10GetsNoInterimResponse: an HTTP/1.0 client is never sent a
// 1xx (RFC 9110 §15.2: HTTP/1.0 defined none), and its Expect:
// 100-continue is ignored (§10.1.1), not passed on for the host to answer
// with a 100 that would reach the client; its request still reaches the
// host, body and all, and gets the host's answer. An HTTP/1.1 client
// still gets its 1xx. Through the lane and net/http alone (the lane
// leaves HTTP/1.0 and Expect to net/http's server, but that is the lane's
// choice to make).
func TestHTTP10GetsNoInterimResponse(t *testing.T) {
	for _, disableLane := range []bool{false, true} {
		e := newEnv(t, nil)
		var mu sync.Mutex
		var seen []string // per request the host got: its Expect, then its body
		e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hints" {
				w.Header().Set("Link", "</app.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
			}
			b, _ := io.ReadAll(r.Body) // net/http sends 100 Continue when asked
			mu.Lock()
			seen = append(seen, r.Header.Get("Expect")+"|"+string(b))
			mu.Unlock()
			_, _ = io.WriteString(w, "got "+string(b))
		}))
		addr := e.serve(disableLane, nil)
		host := "Host: hello." + testZone + "\r\n"
		upload := "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello"
		tests := []struct {
			name, raw string
			lines     []string // the status lines the client gets
			hostGot   string   // the Expect the host got, "|", the body it got
		}{
			{"1.0 POST with Expect", "POST /up HTTP/1.0\r\n" + host + upload,
				[]string{"HTTP/1.0 200 OK"}, "|hello"},
			{"1.0 POST with Expect, host sends 103", "POST /hints HTTP/1.0\r\n" + host + upload,
				[]string{"HTTP/1.0 200 OK"}, "|hello"},
			{"1.0 GET, host sends 103", "GET /hints HTTP/1.0\r\n" + host + "\r\n",
				[]string{"HTTP/1.0 200 OK"}, "|"},
			{"1.1 POST with Expect", "POST /up HTTP/1.1\r\n" + host + "Connection: close\r\n" + upload,
				[]string{"HTTP/1.1 100 Continue", "HTTP/1.1 200 OK"}, "100-continue|hello"},
			{"1.1 GET, host sends 103", "GET /hints HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n",
				[]string{"HTTP/1.1 103 Early Hints", "HTTP/1.1 200 OK"}, "|"},
		}
		for _, tt := range tests {
			name := fmt.Sprintf("%s (lane off: %v)", tt.name, disableLane)
			mu.Lock()
			seen = nil
			mu.Unlock()
			lines, body := responses(t, exchangeAt(t, addr, tt.raw))
			// An HTTP/1.1 client may get two 100s, net/http's own (when
			// the proxy reads the body) and the host's (relayed): allowed.
			if lines = slices.Compact(lines); !slices.Equal(lines, tt.lines) {
				t.Errorf("%s: status lines %q, want %q", name, lines, tt.lines)
			}
			_, sent, _ := strings.Cut(tt.hostGot, "|")
			if want := "got " + sent; body != want {
				t.Errorf("%s: body %q, want %q", name, body, want)
			}
			mu.Lock()
			if len(seen) != 1 || seen[0] != tt.hostGot {
				t.Errorf("%s: the host got %q, want [%q]", name, seen, tt.hostGot)
			}
			mu.Unlock()
		}
	}
}
