package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
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
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr"
)

// serve puts e's gateway behind a real edge, wired as internal/gatehouse
// wires it (the guard on the HTTP/1 connections, the lane unless
// disableLane), and returns the addresses of its http listener (serve
// mode) and its https listener (a self-signed certificate).
func (e *env) serve(disableLane bool) (httpAddr, httpsAddr string) {
	e.t.Helper()
	m, err := tlsmgr.New(tlsmgr.Options{Names: []string{"*." + testZone}})
	if err != nil {
		e.t.Fatal(err)
	}
	o := edge.Options{HTTPAddr: "127.0.0.1:0", HTTPSAddr: "127.0.0.1:0", ManagementAddr: "127.0.0.1:0", HTTPMode: edge.ModeServe,
		TLS: m.TLSConfig(), Handler: e.gw, DisableLane: disableLane, RequestContext: e.gw.RequestContext, RequestDone: e.gw.RequestDone,
		WrapHTTP: GuardListener, WrapTLS: GuardTLSConn, WrapServer: GuardServer}
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
	return ed.Addr("http").String(), ed.Addr("https").String()
}

// dialTo opens a connection to addr, over TLS (HTTP/1.1) when tlsOn.
func dialTo(t testing.TB, addr string, tlsOn bool) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if tlsOn {
		c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "hello." + testZone, NextProtos: []string{"http/1.1"}})
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
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
		addr, _ := e.serve(disableLane)
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

// TestLongRequestLine: a request line over the listener's limit gets the
// 414 problem however long it is (DESIGN §3), where net/http alone answers
// a line longer than it reads (MaxHeaderBytes plus 4 KiB) 431; and one
// that never ends is cut off. Through the lane and net/http alone, as a
// connection's first request and after others on it (the guard passes a
// waited-for request line on as it comes), after a body net/http read.
func TestLongRequestLine(t *testing.T) {
	host := "Host: hello." + testZone + "\r\n"
	line := func(n int) string { return "GET /" + strings.Repeat("a", n) + " HTTP/1.1\r\n" + host + "\r\n" }
	before := []struct {
		name, raw string
		pipelined bool // sent with the long line, not answered before it
	}{
		{"first", "", false},
		{"after a GET", "GET /x HTTP/1.1\r\n" + host + "\r\n", false},
		{"after a POST", "POST /x HTTP/1.1\r\n" + host + "Content-Length: 5\r\n\r\nhello", false},
		{"after a chunked POST", "POST /x HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
		{"pipelined behind a POST", "POST /x HTTP/1.1\r\n" + host + "Content-Length: 5\r\n\r\nhello", true},
	}
	for _, disableLane := range []bool{false, true} {
		e := newEnv(t, nil)
		e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok")
		}))
		httpAddr, httpsAddr := e.serve(disableLane)
		for _, b := range before {
			for _, tc := range []struct{ name, raw string }{
				{"9 KiB", line(9 << 10)},
				{"70 KiB", line(70 << 10)},
				{"1 MiB", line(1 << 20)},
				{"1 MiB, no line end", "GET /" + strings.Repeat("a", 1<<20)},
			} {
				for _, tlsOn := range []bool{false, true} {
					name := fmt.Sprintf("lane off %v, tls %v, %s, %s", disableLane, tlsOn, b.name, tc.name)
					addr := httpAddr
					if tlsOn {
						addr = httpsAddr
					}
					c := dialTo(t, addr, tlsOn)
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					br := bufio.NewReader(c)
					answered := func() {
						res := readResponse(t, br)
						_, _ = io.ReadAll(res.Body)
						if res.StatusCode != 200 {
							t.Fatalf("%s: the request before got %d", name, res.StatusCode)
						}
					}
					raw := tc.raw
					switch {
					case b.pipelined:
						raw = b.raw + raw
					case b.raw != "":
						_, _ = io.WriteString(c, b.raw)
						answered()
					}
					go func() { _, _ = io.WriteString(c, raw) }()
					if b.pipelined {
						answered()
					}
					res, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Errorf("%s: %v", name, err)
						c.Close()
						continue
					}
					body, _ := io.ReadAll(res.Body)
					if res.StatusCode != http.StatusRequestURITooLong || res.Header.Get("Content-Type") != "application/problem+json" ||
						!strings.Contains(string(body), "the request line is over the listener's limit") {
						t.Errorf("%s: %d %s %s", name, res.StatusCode, res.Header.Get("Content-Type"), body)
					}
					if _, err := http.ParseTime(res.Header.Get("Date")); err != nil {
						t.Errorf("%s: Date %q: %v", name, res.Header.Get("Date"), err)
					}
					c.Close()
				}
			}
		}
	}
}

// TestEndlessRequestLineIsCutOff: a client that sends a request line
// without end gets its 414 and the connection closed: the gateway stops
// reading at a bound, so the client's writes fail (not time out, as they
// would if the gateway read on).
func TestEndlessRequestLineIsCutOff(t *testing.T) {
	for _, disableLane := range []bool{false, true} {
		e := newEnv(t, nil)
		httpAddr, httpsAddr := e.serve(disableLane)
		for _, tlsOn := range []bool{false, true} {
			addr := httpAddr
			if tlsOn {
				addr = httpsAddr
			}
			c := dialTo(t, addr, tlsOn)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			wrote := make(chan error, 1)
			go func() {
				chunk := []byte(strings.Repeat("a", 64<<10))
				_, err := io.WriteString(c, "GET /")
				for n := 0; err == nil && n < 1<<30; n += len(chunk) { // bounded: 1 GiB
					_, err = c.Write(chunk)
				}
				wrote <- err
			}()
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("lane off %v, tls %v: %v", disableLane, tlsOn, err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusRequestURITooLong {
				t.Errorf("lane off %v, tls %v: %d, want 414", disableLane, tlsOn, res.StatusCode)
			}
			err = <-wrote
			var ne net.Error
			if err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("lane off %v, tls %v: the client's writes ended with %v, want the connection closed", disableLane, tlsOn, err)
			}
			c.Close()
		}
	}
}
