package gateway

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHostWithBadPort: a Host whose port is not digits (RFC 9110 §7.2:
// port = *DIGIT) is a malformed field, answered 400 with nothing sent to
// the host, not the app its name part names: over HTTP/1.1 raw bytes
// through the lane and through net/http alone, and over HTTP/2. A port of
// digits, an empty one, and IPv6 literals (not names: 404) answer as they
// always did.
func TestHostWithBadPort(t *testing.T) {
	name := "hello." + testZone
	tests := []struct {
		host   string
		status int
		h2     bool // also sent over HTTP/2 (Go's client sends these)
	}{
		{name + ":abc", 400, true},
		{name + ":-1", 400, true},
		{name + ":+80", 400, true},
		{name + ":8a", 400, true},
		{name + ":0x50", 400, true},
		{"HELLO." + testZone + ":abc", 400, true},
		{name + ".:abc", 400, true},
		{"[::1]:abc", 400, true},
		{name + ": 80", 400, false}, // a space: refused by the servers before the chain
		{name + ":80", 200, true},
		{name + ":", 200, true},
		{name + ":99999", 200, true},
		{name, 200, true},
		{"[::1]", 404, true},
		{"[::1]:80", 404, true},
	}
	for _, disableLane := range []bool{false, true} {
		e := newEnv(t, nil)
		var got atomic.Int32
		e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.Add(1)
			_, _ = w.Write([]byte("ok"))
		}))
		httpAddr, httpsAddr := e.serve(disableLane)
		h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: name},
			ForceAttemptHTTP2: true,
		}}
		t.Cleanup(h2.CloseIdleConnections)
		for _, tt := range tests {
			label := fmt.Sprintf("Host %q, lane off %v", tt.host, disableLane)
			check := func(proto string, status int, body string) {
				t.Helper()
				n := got.Swap(0)
				if status != tt.status {
					t.Errorf("%s, %s: status %d, want %d; body %s", label, proto, status, tt.status, body)
				}
				if tt.status == 200 && n != 1 {
					t.Errorf("%s, %s: the host got %d requests, want 1", label, proto, n)
				}
				if tt.status != 200 && n != 0 {
					t.Errorf("%s, %s: the host got %d requests, want none", label, proto, n)
				}
			}
			raw := "GET / HTTP/1.1\r\nHost: " + tt.host + "\r\nConnection: close\r\n\r\n"
			lines, body := responses(t, exchangeAt(t, httpAddr, raw))
			var status int
			if _, err := fmt.Sscanf(lines[len(lines)-1], "HTTP/1.1 %d", &status); err != nil {
				t.Fatalf("%s: status line %q", label, lines)
			}
			check("HTTP/1.1", status, body)
			if !tt.h2 {
				continue
			}
			req, err := http.NewRequest("GET", "https://"+httpsAddr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			res, err := h2.Do(req)
			if err != nil {
				t.Errorf("%s, HTTP/2: %v", label, err)
				continue
			}
			b := readBody(t, res)
			if res.ProtoMajor != 2 {
				t.Fatalf("%s: spoke %s, want HTTP/2", label, res.Proto)
			}
			if tt.status == 400 && !strings.Contains(b, "port") {
				t.Errorf("%s, HTTP/2: body %s does not name the port", label, b)
			}
			check("HTTP/2", res.StatusCode, b)
		}
	}
}
