package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// recorder of what a host received: each request's method and path.
type seenRequests struct {
	mu   sync.Mutex
	seen []string
}

func (s *seenRequests) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		_, _ = io.WriteString(w, "host answered "+r.Method)
	})
}

func (s *seenRequests) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// answer is one response as the client read it, whatever the protocol.
type answer struct {
	status int
	header http.Header
	body   string
}

// h1Answer writes raw on a new connection to addr (over TLS with ALPN
// http/1.1 when tlsOn) and reads one response.
func h1Answer(t *testing.T, addr string, tlsOn bool, raw string) answer {
	t.Helper()
	c := dialTo(t, addr, tlsOn)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(c, raw) }()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to %.80q: %v", raw, err)
	}
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(b)}
}

// h2Answer sends one HTTP/2 request over TLS to addr with method, body
// (none when empty) and the extra fields (lower-case names), and reads
// its answer frame by frame, as the gateway's own h2 server writes it.
func h2Answer(t *testing.T, addr, method, body string, extra ...[2]string) answer {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "hello." + testZone, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "hello." + testZone}, {":path", "/h2"}}
	if body != "" {
		fields = append(fields, [2]string{"content-length", strconv.Itoa(len(body))})
	}
	fields = append(fields, extra...)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: body == ""}); err != nil {
		t.Fatal(err)
	}
	if body != "" {
		if err := fr.WriteData(1, true, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	a := answer{header: make(http.Header)}
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			a.status, _ = strconv.Atoi(f.Value)
			return
		}
		a.header.Add(f.Name, f.Value)
	})
	for done := false; !done; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("h2 %s: read: %v (status %d body %q)", method, err, a.status, a.body)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			_, _ = dec.Write(f.HeaderBlockFragment())
			done = f.StreamEnded()
		case *http2.DataFrame:
			a.body += string(f.Data())
			done = f.StreamEnded()
		case *http2.RSTStreamFrame:
			t.Fatalf("h2 %s: stream reset: %v", method, f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("h2 %s: GOAWAY %v", method, f.ErrCode)
		}
	}
	return a
}

// wantProblemAnswer checks a is a problem+json with status whose detail
// contains detail, stamped with the cluster like every gateway answer.
func wantProblemAnswer(t *testing.T, what string, a answer, status int, detail string) {
	t.Helper()
	if a.status != status || a.header.Get("Content-Type") != problem.ContentType {
		t.Fatalf("%s: %d %q %q, want a %d problem", what, a.status, a.header.Get("Content-Type"), a.body, status)
	}
	var p problem.Problem
	if err := json.Unmarshal([]byte(a.body), &p); err != nil || p.Status != status || !strings.Contains(p.Detail, detail) {
		t.Fatalf("%s: problem %+v (%v), want status %d and a detail with %q", what, p, err, status, detail)
	}
	if got := a.header.Get("X-Gatehouse-Cluster"); got != "c1" {
		t.Fatalf("%s: X-Gatehouse-Cluster %q", what, got)
	}
}

// waitLogged waits until e's access log holds want lines with method (as
// logged) and status: a line is written once the answer is out, so it
// may come after the client read it.
func waitLogged(t *testing.T, e *env, method string, status, want int) {
	t.Helper()
	n := 0
	testutil.WaitFor(t, 5*time.Second, func() bool {
		n = 0
		for _, l := range strings.Split(e.logs.String(), "\n") {
			var rec struct {
				Msg, Method string
				Status      int
			}
			if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "request" && rec.Method == method && rec.Status == status {
				n++
			}
		}
		return n == want
	}, fmt.Sprintf("%d access log lines for %s %d", want, method, status))
}

// TestTraceRefusedAtTheEdge: TRACE never reaches a host, on HTTP/1.1
// (plaintext, where the lane hands it to net/http behind the guard; and
// over TLS) and on HTTP/2: a host's echo of it would show the client the
// fields the gateway adds (X-Gatehouse-*, forwarded identity, verified
// claims), cross-site tracing's leak. Each gets a 405 problem, whatever
// Max-Forwards says and with a body or none, is counted under method
// TRACE and access-logged; the connection then serves the next request.
func TestTraceRefusedAtTheEdge(t *testing.T) {
	e := newEnv(t, nil)
	var host seenRequests
	e.backend("h1", "hello", host.handler())
	httpAddr, httpsAddr := e.serve(false)
	const head = "TRACE /t HTTP/1.1\r\nHost: hello." + testZone + "\r\n"
	for _, tc := range []struct {
		name string
		tls  bool
		raw  string
	}{
		{"plain", false, head + "\r\n"},
		{"plain with Max-Forwards and a body", false, head + "Max-Forwards: 0\r\nContent-Length: 3\r\n\r\nabc"},
		{"tls", true, head + "Max-Forwards: 5\r\n\r\n"},
	} {
		addr := httpAddr
		if tc.tls {
			addr = httpsAddr
		}
		a := h1Answer(t, addr, tc.tls, tc.raw)
		wantProblemAnswer(t, tc.name, a, http.StatusMethodNotAllowed, "TRACE")
		wantAllow(t, tc.name, a)
	}
	for _, body := range []string{"", "abc"} {
		a := h2Answer(t, httpsAddr, "TRACE", body)
		wantProblemAnswer(t, "h2 with body "+strconv.Quote(body), a, http.StatusMethodNotAllowed, "TRACE")
		wantAllow(t, "h2 with body "+strconv.Quote(body), a)
	}

	// The same connection goes on: the refusal is an answer, not a fault.
	c := dialTo(t, httpAddr, false)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, head+"Content-Length: 2\r\n\r\nhiGET /after HTTP/1.1\r\nHost: hello."+testZone+"\r\n\r\n")
	br := bufio.NewReader(c)
	for i, want := range []int{http.StatusMethodNotAllowed, http.StatusOK} {
		res := readResponse(t, br)
		_, _ = io.Copy(io.Discard, res.Body)
		if res.StatusCode != want {
			t.Fatalf("answer %d on one connection: %d, want %d", i, res.StatusCode, want)
		}
	}

	if got := host.list(); len(got) != 1 || got[0] != "GET /after" {
		t.Fatalf("the host received %q, want only the GET after the refusals", got)
	}
	waitLogged(t, e, "TRACE", http.StatusMethodNotAllowed, 6)
	if n := promtest.ToFloat64(e.gw.Metrics().Requests.WithLabelValues("hello", "4xx", "TRACE")); n != 6 {
		t.Errorf("http_requests_total{app=hello,code=4xx,method=TRACE} = %v, want 6", n)
	}
}

// TestMethodMustBeAnUpperCaseToken: a method with a lower-case letter
// ("get", which a host that routes by a case-folded method serves as GET
// while every layer here keyed on "GET" saw another method), or longer
// than 32 bytes (5,000 of them passed), gets a 400 problem on HTTP/1.1
// and HTTP/2 and never reaches the host; the connection is closed, as
// after any malformed request line. Registered methods, the longest of
// IANA's included, and extension methods in upper case still pass.
func TestMethodMustBeAnUpperCaseToken(t *testing.T) {
	e := newEnv(t, nil)
	var host seenRequests
	e.backend("h1", "hello", host.handler())
	httpAddr, httpsAddr := e.serve(false)
	long := strings.Repeat("G", 5000)
	for _, m := range []string{"get", "Get", "gET", "post", "trace", "PROPfind", "A" + strings.Repeat("B", 32), long} {
		raw := m + " /m HTTP/1.1\r\nHost: hello." + testZone + "\r\n\r\n"
		for _, tlsOn := range []bool{false, true} {
			addr := httpAddr
			if tlsOn {
				addr = httpsAddr
			}
			c := dialTo(t, addr, tlsOn)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() { _, _ = io.WriteString(c, raw) }()
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%.40s (tls %v): %v", m, tlsOn, err)
			}
			b, _ := io.ReadAll(res.Body)
			wantProblemAnswer(t, m[:min(len(m), 40)], answer{res.StatusCode, res.Header, string(b)}, http.StatusBadRequest, "method")
			if !res.Close {
				t.Errorf("%.40s (tls %v): no Connection: close", m, tlsOn)
			}
			if _, err := br.Peek(1); err != io.EOF {
				t.Errorf("%.40s (tls %v): connection not closed after the 400 (%v)", m, tlsOn, err)
			}
			c.Close()
		}
		if len(m) < 100 { // an HTTP/2 header block holds 5,000 bytes too, but one case is enough
			wantProblemAnswer(t, "h2 "+m, h2Answer(t, httpsAddr, m, ""), http.StatusBadRequest, "method")
		}
	}
	if got := host.list(); len(got) != 0 {
		t.Fatalf("the host received %q", got)
	}
	waitLogged(t, e, "get", http.StatusBadRequest, 3) // plain, tls, h2
	// 8 methods over HTTP/1.1, plaintext and TLS, and 7 of them over h2.
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return promtest.ToFloat64(e.gw.Metrics().Requests.WithLabelValues("hello", "4xx", "OTHER")) == 23
	}, "http_requests_total{app=hello,code=4xx,method=OTHER} = 23")

	for _, m := range []string{"GET", "PROPFIND", "VERSION-CONTROL", "UPDATEREDIRECTREF", "M-SEARCH", strings.Repeat("X", 32)} {
		a := h1Answer(t, httpAddr, false, m+" /ok HTTP/1.1\r\nHost: hello."+testZone+"\r\n\r\n")
		if a.status != http.StatusOK || a.body != "host answered "+m {
			t.Fatalf("%s: %d %q, want the host's answer", m, a.status, a.body)
		}
		if a := h2Answer(t, httpsAddr, m, ""); a.status != http.StatusOK || a.body != "host answered "+m {
			t.Fatalf("h2 %s: %d %q, want the host's answer", m, a.status, a.body)
		}
	}
}

// wantAllow: a 405 names the standard methods the gateway passes on (RFC 9110
// §15.5.6 requires an Allow), TRACE not among them.
func wantAllow(t *testing.T, what string, a answer) {
	t.Helper()
	if got := a.header.Get("Allow"); !strings.Contains(got, "GET") || strings.Contains(got, "TRACE") {
		t.Fatalf("%s: Allow %q, want the methods passed on, TRACE not among them", what, got)
	}
}
