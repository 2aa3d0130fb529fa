package edge

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestRequestLineLimitBeforeHeaderBlock: a request line over
// MaxRequestLine gets 414 (DESIGN §3) however big the head it starts,
// where net/http parses that head: over MaxHeaderBytes too, it still
// gets 414, not the header block's 431. On the http and https listeners,
// through the lane and net/http alone. (A line longer than net/http
// reads, MaxHeaderBytes plus 4 KiB, is the guard's to answer: see
// gateway's TestLongRequestLine.)
func TestRequestLineLimitBeforeHeaderBlock(t *testing.T) {
	line := func(n int) string { // a request line of n bytes, CRLF not counted
		return "GET /" + strings.Repeat("a", n-len("GET / HTTP/1.1")) + " HTTP/1.1\r\n"
	}
	fields := "Host: w\r\n" + strings.Repeat("X-Big: "+strings.Repeat("b", 1000)+"\r\n", 60) + "\r\n" // 60 KiB
	cases := []struct {
		name string
		req  string
		want int
	}{
		{"line at the limit", line(8<<10) + "Host: w\r\n\r\n", 200},
		{"line over the limit", line(8<<10+1) + "Host: w\r\n\r\n", 414},
		{"line at the limit, head over 64 KiB", line(8<<10) + fields, 431},
		{"line over the limit, head over 64 KiB", line(8<<10+1) + fields, 414},
		{"line over 64 KiB", line(65<<10) + "Host: w\r\n\r\n", 414},
		{"line near net/http's bound", line(67<<10) + "Host: w\r\n\r\n", 414},
	}
	for _, noLane := range []bool{false, true} {
		e := start(t, Options{HTTPMode: ModeServe, DisableLane: noLane})
		for _, tc := range cases {
			if got := rawRequest(t, e.http, tc.req); got != tc.want {
				t.Errorf("lane off %v, http, %s: %d, want %d", noLane, tc.name, got, tc.want)
			}
			if got := tlsRequest(t, e.https, tc.req); got != tc.want {
				t.Errorf("lane off %v, https, %s: %d, want %d", noLane, tc.name, got, tc.want)
			}
		}
	}
}

// TestManagementRequestLineLimit: DESIGN §3's limits hold on every HTTP
// listener, the management one too: a request line over MaxRequestLine
// gets 414 there, before the management routes (or their loopback Host
// check) see it, and a head over MaxHeaderBytes whose line is within it
// gets 431.
func TestManagementRequestLineLimit(t *testing.T) {
	line := func(n int) string {
		return "GET /" + strings.Repeat("a", n-len("GET / HTTP/1.1")) + " HTTP/1.1\r\n"
	}
	fields := "Host: 127.0.0.1\r\n" + strings.Repeat("X-Big: "+strings.Repeat("b", 1000)+"\r\n", 60) + "\r\n" // 60 KiB
	mgmt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "mgmt") })
	e := start(t, Options{Management: mgmt})
	for _, tc := range []struct {
		name string
		req  string
		want int
	}{
		{"line at the limit", line(8<<10) + "Host: 127.0.0.1\r\n\r\n", 200},
		{"line over the limit", line(8<<10+1) + "Host: 127.0.0.1\r\n\r\n", 414},
		{"line over the limit, foreign Host", line(8<<10+1) + "Host: w\r\n\r\n", 414},
		{"line at the limit, head over 64 KiB", line(8<<10) + fields, 431},
		{"line over the limit, head over 64 KiB", line(8<<10+1) + fields, 414},
	} {
		if got := rawRequest(t, e.mgmt, tc.req); got != tc.want {
			t.Errorf("management, %s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
