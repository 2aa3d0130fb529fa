package gatehouse

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestAccessLogHostileRequests: what a client puts in a request cannot
// forge an access log line, nor put a secret in one. Each request below
// is one JSON line with the fields docs/config.md names: a path decoding
// to CR, LF, a JSON object of its own and an ANSI escape is that line's
// path, escaped; no query, Authorization, Cookie, userinfo, User-Agent or
// X-Forwarded-For value is logged; a 60 KB Host is logged cut to 512
// bytes, its start and then a marker with its length, so the line stays
// a few KB, not the head's size. Over the fast path and over net/http (a method
// the fast path hands off), real connections.
func TestAccessLogHostileRequests(t *testing.T) {
	r, logs := startLogging(t, testConfig(t))
	g := r.g
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { io.WriteString(w, "ok") }))
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(g.Live().Load().Pool("hello")) == 1 }, "host not routable")

	const (
		forged = `/a%0d%0a%7b%22msg%22%3a%22request%22%2c%22status%22%3a200%7d%0a%1b%5b31m`
		clear  = "/a\r\n{\"msg\":\"request\",\"status\":200}\n\x1b[31m"
	)
	secrets := "Authorization: Bearer SECRET-A\r\nCookie: s=SECRET-C\r\nUser-Agent: SECRET-UA\r\nX-Forwarded-For: 192.0.2.1, SECRET-XFF\r\n"
	bigHost := strings.Repeat("a", 60000) + ".test.local"
	bigMarker := "...[truncated from " + strconv.Itoa(len(bigHost)) + " bytes]"
	tests := []struct {
		name         string
		head         string
		method, host string
		path         string
		status       float64
	}{
		{"fast path", "GET " + forged + "?access_token=SECRET-Q HTTP/1.1\r\nHost: hello.test.local\r\n" + secrets,
			"GET", "hello.test.local", clear, 200},
		{"net/http", "PURGE " + forged + "?access_token=SECRET-Q HTTP/1.1\r\nHost: hello.test.local\r\n" + secrets,
			"PURGE", "hello.test.local", clear, 200},
		{"absolute form with userinfo", "GET http://u:SECRET-U@hello.test.local/abs?access_token=SECRET-Q HTTP/1.1\r\nHost: hello.test.local\r\n" + secrets,
			"GET", "hello.test.local", "/abs", 200},
		{"huge Host", "GET /big HTTP/1.1\r\nHost: " + bigHost + "\r\n" + secrets,
			"GET", bigHost[:512-len(bigMarker)] + bigMarker, "/big", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(logs.String())
			c, err := net.DialTimeout("tcp", g.Addrs().HTTP, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tt.head+"Connection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(c); err != nil {
				t.Fatal(err)
			}
			var lines []string
			testutil.WaitFor(t, 5*time.Second, func() bool {
				lines = nil
				for _, l := range strings.Split(strings.TrimSpace(logs.String()[before:]), "\n") {
					if strings.Contains(l, `"msg":"request"`) {
						lines = append(lines, l)
					}
				}
				return len(lines) > 0
			}, "no access log line")
			time.Sleep(50 * time.Millisecond) // a second line, if one were coming
			out := logs.String()[before:]
			testutil.CheckJSONLog(t, out)
			if n := strings.Count(out, `"msg":"request"`); n != 1 {
				t.Fatalf("%d access log lines for one request:\n%.2000s", n, out)
			}
			if strings.Contains(out, "SECRET") {
				t.Fatalf("the log carries a secret:\n%.2000s", out)
			}
			if len(lines[0]) > 4096 {
				t.Errorf("access log line of %d bytes", len(lines[0]))
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"method", "host", "path", "status", "bytes", "duration", "app", "request_id", "client_ip"} {
				if _, ok := line[k]; !ok {
					t.Errorf("no %s in %.500s", k, lines[0])
				}
			}
			if line["method"] != tt.method || line["host"] != tt.host || line["path"] != tt.path || line["status"] != tt.status {
				t.Errorf("logged %v %.40v %q %v, want %s %.40s %q %v", line["method"], line["host"], line["path"], line["status"],
					tt.method, tt.host, tt.path, tt.status)
			}
		})
	}
}
