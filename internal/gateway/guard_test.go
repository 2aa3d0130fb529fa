package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// guardedGateway serves e's gateway on a second loopback server whose
// listener is wrapped by GuardListener, as the edge does (GuardServer),
// and returns its address. edit, if any, changes the server first.
func guardedGateway(t testing.TB, e *env, edit ...func(*http.Server)) string {
	t.Helper()
	s := httptest.NewUnstartedServer(asEdge(e.gw))
	s.Listener = GuardListener(s.Listener)
	for _, f := range edit {
		f(s.Config)
	}
	GuardServer(s.Config)
	s.Start()
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

func rawTo(t testing.TB, addr string, chunks ...string) (string, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, ch := range chunks {
		if _, err := io.WriteString(c, ch); err != nil {
			break // the server may close as soon as it refuses
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err == nil
}

// TestGuardRefusesDesync: behind the guard, every framing DESIGN §2 step 4
// names gets a 400 problem+json whose detail names what is wrong, with
// Connection: close and a closed connection, and never reaches the host;
// an honest request before it on the connection is answered first.
func TestGuardRefusesDesync(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var seen []string
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.URL.Path+":"+string(b))
		mu.Unlock()
	}))
	addr := guardedGateway(t, e)
	const head = "POST /a HTTP/1.1\r\nHost: hello.apps.test\r\n"
	const first = "POST /first HTTP/1.1\r\nHost: hello.apps.test\r\nTransfer-Encoding: chunked\r\n\r\n"
	const (
		both   = "both Content-Length and Transfer-Encoding"
		coding = "unknown transfer coding"
	)
	tests := []struct{ name, raw, detail string }{
		{"content-length and chunked", head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n", both},
		{"chunked and content-length", head + "Transfer-Encoding: chunked\r\ncontent-length: 0\r\n\r\n0\r\n\r\n", both},
		{"unknown coding", head + "Transfer-Encoding: gzip\r\n\r\n", coding},
		{"coding list", head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", coding},
		{"two te fields", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "more than one Transfer-Encoding field"},
		{"chunked on 1.0", "POST /a HTTP/1.0\r\nHost: hello.apps.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Transfer-Encoding on an HTTP/1.0 request"},
		{"differing content-length", head + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "differing Content-Length values"},
		{"bad content-length", head + "Content-Length: +3\r\n\r\nabc", "invalid Content-Length"},
		{"space before colon", head + "Content-Length : 3\r\n\r\nabc", "whitespace between a header field name and its colon"},
		{"tab before colon", head + "Transfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n", "whitespace between a header field name and its colon"},
		// net/http reads HTTP/1.2 with 1.1's framing: it is no way past.
		{"both framings on HTTP/1.2", "POST /a HTTP/1.2\r\nHost: hello.apps.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", both},
		// net/http joins a folded line; the fields after it are read all
		// the same, so the fold must not end the guard's look.
		{"obs-fold before both framings", head + "Content-Length: 5\r\nX: a\r\n b\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", both},
		{"folded content-length", head + "Content-Length: 5\r\n 0\r\n\r\nabcde", "obsolete line folding of Content-Length or Transfer-Encoding"},
		{"folded transfer-encoding", head + "Transfer-Encoding: chunked\r\n\t, gzip\r\n\r\n0\r\n\r\n", "obsolete line folding of Content-Length or Transfer-Encoding"},
		// Chunk lines net/http reads must not end the guard's look at the
		// connection: the request after them is still checked.
		{"after a chunk size with a trailing blank", first + "5 \r\nhello\r\n0\r\n\r\n" + head + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", both},
		{"after a 16-digit chunk size", first + "0000000000000005\r\nhello\r\n0\r\n\r\n" + head + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", both},
		{"second request refused", "GET /first HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n" + head + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", both},
		// net/http answers OPTIONS * without a handler: the refusal after
		// it is still known as the guard's.
		{"refused after OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n" + head + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", both},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			out, closed := rawTo(t, addr, tt.raw)
			if !closed {
				t.Fatalf("connection not closed: %q", out)
			}
			br := bufio.NewReader(strings.NewReader(out))
			var res *http.Response
			var body []byte
			for n := 0; ; n++ {
				r, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v in %q", n, err, out)
				}
				res = r
				body, _ = io.ReadAll(r.Body)
				if _, err := br.Peek(1); err != nil {
					break // the last answer
				}
				if r.StatusCode != 200 {
					t.Fatalf("answer %d before the refusal: %q", n, out)
				}
			}
			if res.StatusCode != 400 || !res.Close || res.Header.Get("Content-Type") != problem.ContentType { // Close: Connection: close
				t.Fatalf("want a final 400 problem with Connection: close, got %q", out)
			}
			var p problem.Problem
			if err := json.Unmarshal(body, &p); err != nil || p.Status != 400 || p.Title != "Bad Request" || p.Type != "about:blank" || p.Detail != tt.detail {
				t.Fatalf("problem %+v (%v), want detail %q, in %q", p, err, tt.detail, out)
			}
			if res.ContentLength != int64(len(body)) {
				t.Fatalf("Content-Length %d for %d bytes", res.ContentLength, len(body))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, s := range seen {
				if !strings.HasPrefix(s, "/first:") {
					t.Fatalf("host saw %q", seen)
				}
			}
		})
	}
}

// TestGuardTracksDeclinedUpgrades: a request with Upgrade, or a CONNECT,
// that the host answers without switching protocols (no 101, or a 2xx
// to CONNECT that leaves net/http reading requests) leaves the connection
// HTTP, and the guard still checks the requests after it: a desync
// framing behind it gets the refusal and never reaches the host.
func TestGuardTracksDeclinedUpgrades(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var seen []string
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if s := r.Header.Get("X-Status"); s != "" {
			code, _ := strconv.Atoi(s)
			w.WriteHeader(code)
		}
	}))
	addr := guardedGateway(t, e)
	const (
		h       = "Host: hello.apps.test\r\n"
		upgrade = "GET /ws HTTP/1.1\r\n" + h + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		connect = "CONNECT hello.apps.test:80 HTTP/1.1\r\n" + h
		both    = "POST /smuggled HTTP/1.1\r\n" + h + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	)
	tests := []struct {
		name, first, then string
		status            int
		detail            string
	}{
		{"upgrade answered 404", upgrade + "X-Status: 404\r\n\r\n", both, 404, "both Content-Length and Transfer-Encoding"},
		{"upgrade answered 400", upgrade + "X-Status: 400\r\n\r\n", both, 400, "both Content-Length and Transfer-Encoding"},
		{"upgrade answered 200", upgrade + "\r\n", both, 200, "both Content-Length and Transfer-Encoding"},
		{"h2c upgrade answered 200", "GET /h2c HTTP/1.1\r\n" + h + "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", both, 200, "both Content-Length and Transfer-Encoding"},
		{"upgrade with a body answered 404", upgrade + "X-Status: 404\r\nContent-Length: 3\r\n\r\nabc", both, 404, "both Content-Length and Transfer-Encoding"},
		{"upgrade answered 200, then an unknown coding", upgrade + "\r\n", "POST /smuggled HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip\r\n\r\n", 200, "unknown transfer coding"},
		// The gateway answers CONNECT itself (405, hygiene), and the
		// connection goes on: the guard still checks what follows.
		{"CONNECT", connect + "\r\n", both, 405, "both Content-Length and Transfer-Encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			out, closed := rawTo(t, addr, tt.first+tt.then)
			if !closed {
				t.Fatalf("connection not closed: %q", out)
			}
			br := bufio.NewReader(strings.NewReader(out))
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("first answer: %v in %q", err, out)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("first answer %d, want the host's %d: %q", res.StatusCode, tt.status, out)
			}
			wantRefusal(t, br, tt.detail)
			mu.Lock()
			defer mu.Unlock()
			want := 1
			if strings.HasPrefix(tt.first, "CONNECT") {
				want = 0
			}
			if len(seen) != want || (want == 1 && strings.Contains(seen[0], "smuggled")) {
				t.Fatalf("host saw %q, want only the first request (%d)", seen, want)
			}
		})
	}
}

// TestGuardSlowHeadMeetsReadHeaderTimeout: on a keep-alive connection, a
// client that sends its next head one field line every 100 ms is cut at
// the server's ReadHeaderTimeout, as without the guard, not at its
// IdleTimeout; its request never reaches the host. A head sent the same
// way that the guard refuses still gets the refusal.
func TestGuardSlowHeadMeetsReadHeaderTimeout(t *testing.T) {
	e := newEnv(t, nil)
	var slow atomic.Int32
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			slow.Add(1)
		}
	}))
	const rht, idle = 500 * time.Millisecond, 30 * time.Second
	addr := guardedGateway(t, e, func(s *http.Server) { s.ReadHeaderTimeout, s.IdleTimeout = rht, idle })
	const h = "Host: hello.apps.test\r\n"
	// dribble sends a first request and reads its answer, then sends head
	// at once and a field line every 100 ms, the lastAt-th being last, for
	// at most 5 s or until the server closes; it returns how long after
	// head the server closed, and what it answered.
	dribble := func(t *testing.T, head string, lastAt int, last string) (time.Duration, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		_, _ = io.WriteString(c, "GET /first HTTP/1.1\r\n"+h+"\r\n")
		if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("first answer: %v %v", res, err)
		}
		closed := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(br) // ends at the server's close (or the deadline)
			closed <- string(b)
		}()
		start := time.Now()
		_, _ = io.WriteString(c, head)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case out := <-closed:
				return time.Since(start), out
			case <-tick.C:
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("connection still open %v after the head began (ReadHeaderTimeout %v)", time.Since(start), rht)
			}
			line := fmt.Sprintf("X-Slow-%d: %d\r\n", i, i)
			if i == lastAt {
				line = last
			}
			_, _ = io.WriteString(c, line)
		}
	}
	t.Run("cut", func(t *testing.T) {
		took, out := dribble(t, "GET /slow HTTP/1.1\r\n"+h, -1, "")
		if took < rht || took > 3*time.Second {
			t.Fatalf("cut %v after the head began, want about ReadHeaderTimeout (%v)", took, rht)
		}
		if out != "" || slow.Load() != 0 {
			t.Fatalf("answered %q, the host saw %d slow requests", out, slow.Load())
		}
	})
	t.Run("refused", func(t *testing.T) {
		// The fields come 100 ms after the request line, which net/http
		// already has: it gets the refusal's stand-in fields after it.
		_, out := dribble(t, "POST /slow HTTP/1.1\r\n", 0, h+"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		br := bufio.NewReader(strings.NewReader(out))
		wantRefusal(t, br, "both Content-Length and Transfer-Encoding")
		if slow.Load() != 0 {
			t.Fatal("the refused request reached the host")
		}
	})
}

// TestGuardHoldsHeadsUpToMaxHeaderBytes: with MaxHeaderBytes above the
// 64 KiB default, a desync framing after 100 KiB of fields is still
// refused, a 200 KiB honest head is served, and a head over the limit gets
// net/http's 431 as a problem, none reaching the host but the honest one.
func TestGuardHoldsHeadsUpToMaxHeaderBytes(t *testing.T) {
	e := newEnv(t, nil)
	var hits atomic.Int32
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	const limit = 256 << 10
	addr := guardedGateway(t, e, func(s *http.Server) { s.MaxHeaderBytes = limit })
	const h = "Host: hello.apps.test\r\n"
	big := func(n int) string { return "X-Big: " + strings.Repeat("b", n) + "\r\n" }
	tests := []struct {
		name, raw string
		status    int
		detail    string // of the problem; "" for the host's answer
		hits      int32
	}{
		{"both framings after 100 KiB", "POST /a HTTP/1.1\r\n" + h + big(100<<10) + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			400, "both Content-Length and Transfer-Encoding", 0},
		{"honest 200 KiB head", "GET /a HTTP/1.1\r\n" + h + big(200<<10) + "Connection: close\r\n\r\n", 200, "", 1},
		{"over the limit", "GET /a HTTP/1.1\r\n" + h + big(limit+(20<<10)) + "\r\n", 431, "the request head is over the listener's limit", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hits.Load()
			out, closed := rawTo(t, addr, tt.raw)
			if !closed {
				t.Fatalf("connection not closed: %.300q", out)
			}
			res, body := lastAnswer(t, out)
			if tt.detail != "" {
				wantConnProblem(t, res, body, tt.status, tt.detail)
			} else if res.StatusCode != tt.status {
				t.Fatalf("answered %d, want %d", res.StatusCode, tt.status)
			}
			if got := hits.Load() - before; got != tt.hits {
				t.Fatalf("the host saw %d requests, want %d", got, tt.hits)
			}
		})
	}
}

// TestGuardRefusalWaitsForTheAnswerBefore: a refused head that arrives
// while the request before it is still being answered (net/http reads it
// in the background) is answered after that request's whole response, not
// in the middle of it.
func TestGuardRefusalWaitsForTheAnswerBefore(t *testing.T) {
	e := newEnv(t, nil)
	arrived, release := make(chan struct{}), make(chan struct{})
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		_, _ = io.WriteString(w, strings.Repeat("first", 2000)) // more than one write's worth
	}))
	conns := make(chan *guardConn, 1)
	s := httptest.NewUnstartedServer(asEdge(e.gw))
	s.Listener = capturing{s.Listener, conns}
	GuardServer(s.Config)
	s.Start()
	t.Cleanup(s.Close)
	c, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET /first HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n")
	<-arrived
	_, _ = io.WriteString(c, "POST /a HTTP/1.1\r\nHost: hello.apps.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")
	g := <-conns
	testutil.WaitFor(t, 5*time.Second, g.f.refused.Load, "the refused head was not read while the first request was served")
	close(release)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(b) != strings.Repeat("first", 2000) {
		t.Fatalf("first answer %d, %d bytes", res.StatusCode, len(b))
	}
	wantRefusal(t, br, "differing Content-Length values")
}

// TestGuardRefusalKeepsTheAnswerBefore: a refused head that comes in one
// piece with the request before it does not cancel that request, which
// net/http is still answering when its background read reaches the
// refusal; the host answers in full, then comes the refusal.
func TestGuardRefusalKeepsTheAnswerBefore(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A grace for the gateway to give up on the request, which it
		// does at once if it does.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		_, _ = io.WriteString(w, "first")
	}))
	addr := guardedGateway(t, e)
	out, closed := rawTo(t, addr, "GET /first HTTP/1.1\r\nHost: hello.apps.test\r\n\r\n"+
		"POST /a HTTP/1.1\r\nHost: hello.apps.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if !closed {
		t.Fatalf("connection not closed: %q", out)
	}
	br := bufio.NewReader(strings.NewReader(out))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(b) != "first" {
		t.Fatalf("first answer %d %q, want the host's: %q", res.StatusCode, b, out)
	}
	wantRefusal(t, br, "both Content-Length and Transfer-Encoding")
}

// capturing wraps accepted connections with the guard and hands them to
// the test.
type capturing struct {
	net.Listener
	conns chan<- *guardConn
}

func (l capturing) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := GuardConn(c).(*guardConn)
	select {
	case l.conns <- g:
	default:
	}
	return g, nil
}

// TestGuardRefusalAfterServedOptionsStar: on a server that gives "OPTIONS
// *" to its handler (DisableGeneralOptionsHandler, as the edge's servers
// all do), the refusal of a framing after it still names the framing,
// not net/http's reason for the guard's stand-in; the host sees nothing.
func TestGuardRefusalAfterServedOptionsStar(t *testing.T) {
	e := newEnv(t, nil)
	var reached atomic.Int32
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	addr := guardedGateway(t, e, func(s *http.Server) { s.DisableGeneralOptionsHandler = true })
	for _, vers := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(vers, func(t *testing.T) {
			out, closed := rawTo(t, addr, "OPTIONS * "+vers+"\r\nHost: hello.apps.test\r\nConnection: keep-alive\r\n\r\n"+
				"POST /a HTTP/1.1\r\nHost: hello.apps.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
			if !closed {
				t.Fatalf("connection not closed: %q", out)
			}
			br := bufio.NewReader(strings.NewReader(out))
			res := readResponse(t, br)
			_, _ = io.Copy(io.Discard, res.Body)
			if res.StatusCode != 200 || res.Header.Get("Allow") == "" {
				t.Fatalf("OPTIONS * answered %d %v, want the gateway's 200", res.StatusCode, res.Header)
			}
			wantRefusal(t, br, "both Content-Length and Transfer-Encoding")
		})
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the host was reached %d times", n)
	}
}

// wantRefusal reads the guard's 400 problem from br, with the detail, and
// then the connection's end.
func wantRefusal(t *testing.T, br *bufio.Reader, detail string) {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p problem.Problem
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 400 || !res.Close || res.Header.Get("Content-Type") != problem.ContentType ||
		json.Unmarshal(b, &p) != nil || p.Status != 400 || p.Detail != detail {
		t.Fatalf("want a 400 problem %q with Connection: close, got %d %v %s", detail, res.StatusCode, res.Header, b)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed after the refusal: %v", err)
	}
}

// TestGuardPassesHonestTraffic: pipelined requests of every framing,
// written in one piece and byte by byte, all arrive intact.
func TestGuardPassesHonestTraffic(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b)+" "+r.Trailer.Get("X-T"))
	}))
	addr := guardedGateway(t, e)
	const h = "Host: hello.apps.test\r\n"
	stream := "GET /1 HTTP/1.1\r\n" + h + "\r\n" +
		"POST /2 HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\nhello" +
		"\r\n" + // a stray CRLF after a POST body, which net/http tolerates
		"POST /3 HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" +
		"3;ext=1\r\nabc\r\n10\r\n" + strings.Repeat("z", 16) + "\r\n0\r\nX-T: tv\r\n\r\n" +
		"POST /4 HTTP/1.1\r\n" + h + "Transfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n" +
		"PUT /5 HTTP/1.0\r\n" + h + "Content-Length: 2\r\n\r\nok"
	want := []string{"GET /1  ", "POST /2 hello ", "POST /3 abc" + strings.Repeat("z", 16) + " tv", "POST /4  ", "PUT /5 ok "}
	for _, split := range []int{len(stream), 1, 7} {
		var chunks []string
		for s := stream; s != ""; {
			n := min(split, len(s))
			chunks = append(chunks, s[:n])
			s = s[n:]
		}
		out, _ := rawTo(t, addr, chunks...)
		br := bufio.NewReader(strings.NewReader(out))
		for i, w := range want {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("split %d: response %d: %v in %q", split, i, err, out)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || string(b) != w {
				t.Fatalf("split %d: response %d = %d %q, want %q", split, i, res.StatusCode, b, w)
			}
		}
	}
}

// TestGuardedGatewayStreams: WebSocket upgrades and large uploads work
// through the guard.
func TestGuardedGatewayStreams(t *testing.T) {
	e := newEnv(t, nil)
	e.backend("h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "websocket" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(c, brw)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, strings.Repeat("k", int(n/1024)))
	}))
	addr := guardedGateway(t, e)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, chunked := range []bool{false, true} {
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // unknown length: sent chunked
		}
		req, _ := http.NewRequest("POST", "http://"+addr+"/up", rd)
		req.Host = "hello.apps.test"
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || len(b) != 1024 {
			t.Fatalf("chunked=%v: %d, %d bytes", chunked, res.StatusCode, len(b))
		}
	}
	http.DefaultClient.CloseIdleConnections()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// A client may send the new protocol's first bytes right behind the
	// upgrade request, before the 101: the guard holds them as the start
	// of a head until the handler takes the connection over, then hands
	// them on as they came.
	const early = "\x81\x05hello"
	_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.apps.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"+early)
	br := bufio.NewReader(c)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	got := make([]byte, len(early))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != early {
		t.Fatalf("early bytes echoed as %q, %v", got, err)
	}
	// Bytes that look like a refused head pass untouched once upgraded.
	msg := "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	_, _ = io.WriteString(c, msg)
	got = make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q, %v", got, err)
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.b))
	copy(p, r.b[:k])
	r.b = r.b[k:]
	return k, nil
}

// through runs data through a framer, read in pieces of at most n bytes
// into buffers of size m; await: as when net/http waits for a request;
// maxLine: the listener's request-line limit (0: none).
func through(data []byte, n, m int, await bool, maxLine int) []byte {
	f := framer{maxLine: maxLine}
	f.await.Store(await)
	src := &chunkReader{b: data, n: n}
	var out []byte
	p := make([]byte, m)
	for range 1 << 20 {
		k, err := f.read(src, p)
		out = append(out, p[:k]...)
		if err != nil {
			break
		}
	}
	return out
}

// FuzzFramingGuard: whatever the bytes and however they are split, the
// guard either passes them through unchanged or passes a prefix and then
// the refusal (its fields alone after a request line passed while net/http
// awaited a request, or with a line end first after part of a line over
// the limit), and the result does not depend on the split.
func FuzzFramingGuard(f *testing.F) {
	seeds := []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: y\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
		"\r\n\r\nGET / HTTP/1.0\n\n",
		"POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\nabc",
		"GET /" + strings.Repeat("a", 40) + " HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /" + strings.Repeat("a", 40),
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint8(1), uint8(3), false, uint8(0))
		f.Add([]byte(s), uint8(2), uint8(5), true, uint8(0))
		f.Add([]byte(s), uint8(3), uint8(7), false, uint8(20))
		f.Add([]byte(s), uint8(4), uint8(2), true, uint8(30))
	}
	f.Fuzz(func(t *testing.T, data []byte, n, m uint8, await bool, line uint8) {
		maxLine := int(line) % 64 // small, for lines over it to be common
		whole := through(data, len(data)+1, 64<<10, await, maxLine)
		split := through(data, int(n)%17+1, int(m)%13+1, await, maxLine)
		if !bytes.Equal(whole, split) {
			t.Fatalf("split changed the output:\n%q\n%q", whole, split)
		}
		if bytes.Equal(whole, data) {
			return
		}
		// refusedWith: whole is a prefix of data, then standIn.
		refusedWith := func(standIn []byte, afterLine bool) bool {
			prefix, ok := bytes.CutSuffix(whole, standIn)
			return ok && bytes.HasPrefix(data, prefix) && (!afterLine || bytes.HasSuffix(prefix, []byte("\n")))
		}
		if !refusedWith(refusal, false) && !(await && refusedWith(refusalFields, true)) &&
			!(await && maxLine > 0 && refusedWith(refusalLineEnd, false)) {
			t.Fatalf("output is neither the input nor a prefix and the refusal:\n%q\n%q", data, whole)
		}
	})
}

// BenchmarkFramingGuard is the guard's cost on a request it passes: a
// typical browser GET head, read through the framer as net/http reads it.
func BenchmarkFramingGuard(b *testing.B) {
	head := []byte("GET /path?q=1 HTTP/1.1\r\nHost: hello.apps.test\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en\r\nAccept-Encoding: gzip, br\r\n" +
		"Cookie: a=1; b=2\r\nConnection: keep-alive\r\n\r\n")
	var f framer
	src := &chunkReader{n: len(head)}
	p := make([]byte, 4<<10)
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		src.b = head
		if n, err := f.read(src, p); err != nil || n != len(head) {
			b.Fatalf("%d, %v", n, err)
		}
	}
}
