package lane

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// TestFullDuplexLeavesTheBodyToTheHandler: a handler that asked for full
// duplex (http.ResponseController.EnableFullDuplex, as a proxy does that
// sends the upload on as its host answers) reads all of its body after
// its answer's head went out, as under net/http; the lane read the rest
// as the head was written and dropped it, and the handler's next read
// found the body's end. One that reads none of it has the rest dropped
// after it returns, and the connection goes on. (net/http's own server
// closes the connection then, golang/go#68560: not compared here.)
func TestFullDuplexLeavesTheBodyToTheHandler(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, "next")
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex() // as the proxy: none is no reason to fail
		if r.URL.Path == "/noread" {
			io.WriteString(w, "unread")
			return
		}
		n, _ := io.CopyN(io.Discard, r.Body, 1000)
		io.WriteString(w, "head, ")
		_ = rc.Flush()
		m, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d, %v", n+m, err)
	})
	body := strings.Repeat("u", 100<<10)
	post := func(path string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Handler: h, Handoff: func(c net.Conn) { c.Close() }, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.ServeConn(sock.Wrap(c)) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.Close(); wg.Wait() })

	got, _ := roundTrip(t, ln.Addr().String(), post("/read")+post("/noread")+get("/"), []string{"POST", "POST", "GET"})
	want := []string{fmt.Sprintf("head, read %d, <nil>", len(body)), "unread", "next"}
	if len(got) != len(want) {
		t.Fatalf("%d answers on one connection, want %d: %+v", len(got), len(want), got)
	}
	for i, a := range got {
		if a.Status != http.StatusOK || a.Body != want[i] || a.Err != "" {
			t.Errorf("answer %d: %d %q %s; want 200 %q", i, a.Status, a.Body, a.Err, want[i])
		}
	}
}
