package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// lastAnswer reads every answer in out, which must end with the closed
// connection's last: those before it must be 200s. It returns the last
// one and its body.
func lastAnswer(t *testing.T, out string) (*http.Response, []byte) {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(out))
	for n := 0; ; n++ {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v in %q", n, err, out)
		}
		body, _ := io.ReadAll(res.Body)
		if _, err := br.Peek(1); err != nil {
			return res, body
		}
		if res.StatusCode != 200 {
			t.Fatalf("answer %d before the last: %q", n, out)
		}
	}
}

// wantConnProblem checks that res is a problem+json answer with status and
// detail that closes the connection.
func wantConnProblem(t *testing.T, res *http.Response, body []byte, status int, detail string) {
	t.Helper()
	var p problem.Problem
	if err := json.Unmarshal(body, &p); err != nil || res.StatusCode != status || p.Status != status ||
		p.Title != http.StatusText(status) || p.Type != "about:blank" || p.Detail != detail {
		t.Fatalf("got %d %s (%v), want a %d problem %q", res.StatusCode, body, err, status, detail)
	}
	if res.Header.Get("Content-Type") != problem.ContentType || res.Header.Get("X-Content-Type-Options") != "nosniff" || !res.Close {
		t.Fatalf("header %v, want problem+json, nosniff and Connection: close", res.Header)
	}
	if res.ContentLength != int64(len(body)) {
		t.Fatalf("Content-Length %d for %d bytes", res.ContentLength, len(body))
	}
	wantDate(t, res)
}

// wantDate checks that res carries a Date a client can parse, as every
// answer of a server with a clock must (RFC 9110 §6.6.1).
func wantDate(t *testing.T, res *http.Response) {
	t.Helper()
	d, err := http.ParseTime(res.Header.Get("Date"))
	if err != nil || time.Since(d).Abs() > time.Minute {
		t.Fatalf("Date %q (%v), want the time now", res.Header.Get("Date"), err)
	}
}

// TestGuardAnswersServerErrorsAsProblems: a head net/http refuses itself,
// before any handler, gets net/http's status as a problem+json naming
// net/http's reason (DESIGN §2), not its text/plain answer, and the
// connection is closed after it; an honest request before it on the
// connection is answered first.
func TestGuardAnswersServerErrorsAsProblems(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
	}))
	addr := guardedGateway(t, e, func(s *http.Server) { s.MaxHeaderBytes = 4 << 10 })
	const (
		h           = "Host: hello.apps.test\r\n"
		malformed   = "the request head is malformed"
		expectation = "the Expect field names an expectation other than 100-continue"
	)
	tests := []struct {
		name, raw string
		status    int
		detail    string
	}{
		{"malformed Host", "GET /a HTTP/1.1\r\nHost: hello apps\r\n\r\n", 400, "malformed Host header"},
		{"no Host", "GET /a HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"invalid byte in a name", "GET /a HTTP/1.1\r\n" + h + "X(A: 1\r\n\r\n", 400, malformed},
		{"control byte in a value", "GET /a HTTP/1.1\r\n" + h + "X-A: a\x01b\r\n\r\n", 400, malformed},
		{"line without a colon", "GET /a HTTP/1.1\r\n" + h + "NoColon\r\n\r\n", 400, malformed},
		{"folded first line", "GET /a HTTP/1.1\r\n X-A: a\r\n" + h + "\r\n", 400, malformed},
		{"two Hosts", "GET /a HTTP/1.1\r\n" + h + "Host: other.apps.test\r\n\r\n", 400, malformed},
		{"request line without a version", "GET /a\r\n" + h + "\r\n", 400, malformed},
		{"HTTP/2.0 request line", "GET /a HTTP/2.0\r\n" + h + "\r\n", 505, "unsupported protocol version"},
		{"unknown expectation", "GET /a HTTP/1.1\r\n" + h + "Expect: foo\r\n\r\n", 417, expectation},
		{"unknown expectation on HTTP/1.0", "POST /a HTTP/1.0\r\n" + h + "Expect: bar\r\nContent-Length: 1\r\n\r\nx", 417, expectation},
		{"unknown expectation after an honest request", "GET /first HTTP/1.1\r\n" + h + "\r\nGET /a HTTP/1.1\r\n" + h + "Expect: foo\r\n\r\n", 417, expectation},
		{"head over the limit", "GET /a HTTP/1.1\r\n" + h + "X-Big: " + strings.Repeat("b", 10<<10) + "\r\n\r\n", 431, "the request head is over the listener's limit"},
		{"request line over the limit", "GET /" + strings.Repeat("a", 10<<10) + " HTTP/1.1\r\n" + h + "\r\n", 431, "the request head is over the listener's limit"},
		{"after an honest request", "GET /first HTTP/1.1\r\n" + h + "\r\nGET /a HTTP/1.1\r\nHost: hello apps\r\n\r\n", 400, "malformed Host header"},
		// net/http fails on the first head, so its reason is the answer,
		// not the guard's refusal of the head after it.
		{"before a refused head", "GET /a HTTP/1.1\r\nHost: hello apps\r\n\r\nPOST /b HTTP/1.1\r\n" + h + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "malformed Host header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, closed := rawTo(t, addr, tt.raw)
			if !closed {
				t.Fatalf("connection not closed: %q", out)
			}
			res, body := lastAnswer(t, out)
			wantConnProblem(t, res, body, tt.status, tt.detail)
		})
	}
}

// TestGuardLeavesHandlersAnswersAlone: a host's body made of the very
// bytes net/http answers a bad head with, written on its own after the
// head went out, reaches the client as it is, also while the guard has
// refused the head after it on the connection; then comes the refusal.
func TestGuardLeavesHandlersAnswersAlone(t *testing.T) {
	e := newEnv(t, nil)
	const (
		plain   = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
		reason  = "HTTP/1.1 400 Bad Request: invalid header name\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: invalid header name"
		refused = "POST /b HTTP/1.1\r\nHost: hello.apps.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	)
	bodies := map[string]string{"/plain": plain, "/reason": reason}
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := bodies[r.URL.Path]
		// An event stream's head is flushed at once, and so is each
		// piece of its body: the body is one write of its own.
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, body)
	}))
	addr := guardedGateway(t, e)
	for path, want := range bodies {
		for _, then := range []string{"", refused} {
			req := "GET " + path + " HTTP/1.1\r\nHost: hello.apps.test\r\n"
			if then == "" {
				req += "Connection: close\r\n"
			}
			out, _ := rawTo(t, addr, req+"\r\n"+then)
			br := bufio.NewReader(strings.NewReader(out))
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v in %q", path, err, out)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || string(b) != want {
				t.Fatalf("%s, then %q: the host's answer changed: %q", path, then, out)
			}
			if then == "" {
				continue
			}
			res, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: the refusal: %v in %q", path, err, out)
			}
			b, _ = io.ReadAll(res.Body)
			wantConnProblem(t, res, b, 400, "both Content-Length and Transfer-Encoding")
		}
	}
}

// TestExpectationFailed: net/http's 417 exactly as it writes it is
// recognised, and nothing that differs from it.
func TestExpectationFailed(t *testing.T) {
	const date = "Wed, 02 Dec 2026 08:52:59 GMT"
	tests := []struct {
		name, p string
		want    bool
	}{
		{"HTTP/1.1", "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: " + date + "\r\nContent-Length: 0\r\n\r\n", true},
		{"HTTP/1.0", "HTTP/1.0 417 Expectation Failed\r\nConnection: close\r\nDate: " + date + "\r\nContent-Length: 0\r\n\r\n", true},
		{"a body", "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: " + date + "\r\nContent-Length: 0\r\n\r\nx", false},
		{"other fields", "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: " + date + "\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n", false},
		{"short date", "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: today\r\nContent-Length: 0\r\n\r\n", false},
		{"a handler's 417", "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\nDate: " + date + "\r\n\r\n", false},
		{"HTTP/2.0", "HTTP/2.0 417 Expectation Failed\r\nConnection: close\r\nDate: " + date + "\r\nContent-Length: 0\r\n\r\n", false},
	}
	for _, tt := range tests {
		if got := expectationFailed([]byte(tt.p)); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestParseServerError: net/http's error answers exactly as it writes
// them are recognised, and nothing that differs from them by a byte.
func TestParseServerError(t *testing.T) {
	const eh = serverErrorHeaders
	tests := []struct {
		name, p string
		status  int
		detail  string
	}{
		{"reason", "HTTP/1.1 400 Bad Request: malformed Host header" + eh + "400 Bad Request: malformed Host header", 400, "malformed Host header"},
		{"505", "HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version" + eh + "505 HTTP Version Not Supported: unsupported protocol version", 505, "unsupported protocol version"},
		{"bare 400", "HTTP/1.1 400 Bad Request" + eh + "400 Bad Request", 400, "the request head is malformed"},
		{"431", "HTTP/1.1 431 Request Header Fields Too Large" + eh + "431 Request Header Fields Too Large", 431, "the request head is over the listener's limit"},
		{"501", "HTTP/1.1 501 Not Implemented" + eh + "Unsupported transfer encoding", 501, "unsupported transfer encoding"},
		{"a byte more", "HTTP/1.1 400 Bad Request" + eh + "400 Bad Request\n", 0, ""},
		{"a byte less", "HTTP/1.1 400 Bad Request" + eh + "400 Bad Reques", 0, ""},
		{"body differs from the line", "HTTP/1.1 400 Bad Request: a" + eh + "400 Bad Request: b", 0, ""},
		{"other fields", "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n400 Bad Request", 0, ""},
		{"other status text", "HTTP/1.1 400 Bad request" + eh + "400 Bad request", 0, ""},
		{"bare status net/http never writes", "HTTP/1.1 403 Forbidden" + eh + "403 Forbidden", 0, ""},
		{"not an error", "HTTP/1.1 200 OK: fine" + eh + "200 OK: fine", 0, ""},
		{"HTTP/1.0", "HTTP/1.0 400 Bad Request: x" + eh + "400 Bad Request: x", 0, ""},
		{"empty reason", "HTTP/1.1 400 Bad Request: " + eh + "400 Bad Request: ", 0, ""},
		{"control byte in the reason", "HTTP/1.1 400 Bad Request: a\x01" + eh + "400 Bad Request: a\x01", 0, ""},
		{"no status", "HTTP/1.1 4x0 Bad Request" + eh + "4x0 Bad Request", 0, ""},
		{"a handler's head", "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n\r\nbad", 0, ""},
	}
	for _, tt := range tests {
		status, detail, ok := parseServerError([]byte(tt.p))
		if ok != (tt.status != 0) || status != tt.status || detail != tt.detail {
			t.Errorf("%s: %d %q %v, want %d %q", tt.name, status, detail, ok, tt.status, tt.detail)
		}
	}
}
