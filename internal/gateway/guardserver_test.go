package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

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
