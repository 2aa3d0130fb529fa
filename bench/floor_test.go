//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestFloors runs each floor in front of a real backend and holds it to
// what the harness counts on: requests reach the backend unchanged, the
// answers come back whole on kept connections, and what the floors cannot
// carry ends the connection rather than being passed on half-read.
func TestFloors(t *testing.T) {
	var seen, marks atomic.Value
	var conns atomic.Int64
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("X-Probe"))
		marks.Store(r.Header.Get("X-Gatehouse-App-Id") + " " + r.Header.Get("X-Forwarded-For") + " " + r.Header.Get("X-Gatehouse-Cluster"))
		if r.URL.Path == "/chunked" {
			w.Write([]byte("a"))
			w.(http.Flusher).Flush() // no Content-Length: the floors cannot carry it
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write(small)
	}))
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	backend.Start()
	defer backend.Close()

	for _, mode := range []string{"go", "epoll", "lane", "bytes"} {
		t.Run(mode, func(t *testing.T) {
			addr, err := freeAddr()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- floorModes[mode](ctx, addr, backend.Listener.Addr().String()) }()
			defer func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("floor ended with %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Error("floor did not stop when its context ended")
				}
			}()
			var c net.Conn
			for range 100 {
				if c, err = net.Dial("tcp", addr); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second)) // a floor that loses a request fails, not hangs
			before := conns.Load()
			br := bufio.NewReader(c)
			for i := range 5 {
				fmt.Fprintf(c, "GET /x?i=%d HTTP/1.1\r\nHost: %s\r\nX-Probe: p%d\r\n\r\n", i, appHost, i)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != 200 || string(body) != string(small) {
					t.Fatalf("request %d: status %d, %d bytes, %v", i, resp.StatusCode, len(body), err)
				}
				if got, want := seen.Load(), fmt.Sprintf("GET /x?i=%d p%d", i, i); got != want {
					t.Fatalf("backend saw %q, want %q", got, want)
				}
				if mode == "bytes" { // gatehouse's fields, both ways
					if got := marks.Load(); got != "app 127.0.0.1 bench" {
						t.Fatalf("backend saw context fields %q, want app, the client's address and the cluster", got)
					}
					if resp.Header.Get("X-Ratelimit-Remaining") != fmt.Sprint(budget-1-i) || resp.Header.Get("Ratelimit-Policy") != fmt.Sprintf(`"app";q=%d;w=60`, budget) ||
						resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Gatehouse-Cluster") != "bench" || resp.Header.Get("Content-Type") != "text/plain" {
						t.Fatalf("request %d: answer's fields %v", i, resp.Header)
					}
				}
			}
			// Two requests in one write (pipelined) get two answers.
			fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: %s\r\n\r\nGET /b HTTP/1.1\r\nHost: %s\r\n\r\n", appHost, appHost)
			for _, path := range []string{"/a", "/b"} {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("pipelined %s: %v", path, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if len(body) != len(small) {
					t.Fatalf("pipelined %s: %d bytes", path, len(body))
				}
			}
			if got := seen.Load(); got != "GET /b " {
				t.Fatalf("backend last saw %q, want the second pipelined request", got)
			}
			if n := conns.Load() - before; n > 1 {
				t.Errorf("5 requests on one client connection took %d backend connections, want 1", n)
			}

			if mode == "lane" {
				return // gatehouse's own lane and proxy carry what the bare floors refuse
			}
			// What the floors cannot carry ends the client's connection.
			for _, req := range []string{
				"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
				"GET /chunked HTTP/1.1\r\nHost: a\r\n\r\n",
				"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 9<<10) + "\r\n\r\n",
				"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 8<<10),
			} {
				d, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				d.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(d, req)
				b, err := io.ReadAll(d)
				d.Close()
				// Closing with the oversized head unread resets the connection.
				if (err != nil && !errors.Is(err, syscall.ECONNRESET)) || len(b) != 0 {
					t.Errorf("%.20q: read %q, %v; want the connection closed with nothing sent", req, b, err)
				}
			}
		})
	}
}

func TestFloorEpollNeedsPort(t *testing.T) {
	err := floorEpoll(context.Background(), "127.0.0.1:0", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "needs -listen with a port") {
		t.Fatalf("floorEpoll on port 0: %v", err)
	}
}

// TestReportFloors: a floor has a row where it was measured (the plaintext
// L7 table) and none in the phases it never takes part in, while a proxy
// that missed a phase still shows "not measured" there.
func TestReportFloors(t *testing.T) {
	cfg, err := parseFlags([]string{"-targets", "nginx,haproxy,floor-go"})
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg, t.TempDir())
	p := &proc{}
	r.targets = []*target{{name: "nginx", proc: p}, {name: "haproxy", proc: p}, {name: "floor-go", proc: p, floor: true}}
	run := wrkResult{requests: 1000, rps: 100, cpu: 0.03}
	for _, n := range []string{"nginx", "haproxy", "floor-go"} {
		r.l7[n] = []wrkResult{run}
	}
	r.l7tls["nginx"] = []wrkResult{run}
	r.finish()
	md := r.markdown()
	if !strings.Contains(md, "| floor-go | 100 |") {
		t.Errorf("no floor-go row in the L7 table:\n%s", md)
	}
	if strings.Contains(md, "floor-go | not measured") || strings.Contains(md, "floor-go | | not measured") {
		t.Errorf("floor-go listed in a phase it never runs:\n%s", md)
	}
	if !strings.Contains(md, "| haproxy | not measured |") {
		t.Errorf("a proxy that missed L7 over TLS is not reported as not measured:\n%s", md)
	}
}
