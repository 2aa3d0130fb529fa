package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// lateHost is a raw host whose first connection answers its first request
// with first, written as is ("\x00pause" in it: the bytes after it are
// written 5 ms later), then signals in wrote; every later request on that
// connection gets "stale", every request on a later connection "fresh".
type lateHost struct {
	addr  string
	first string
	conns atomic.Int32
	wrote chan struct{}
	stale atomic.Int32
}

func newLateHost(t *testing.T, first string, conf *tls.Config) *lateHost {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &lateHost{addr: ln.Addr().String(), first: first, wrote: make(chan struct{})}
	if conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	testutil.ServeConns(t, ln, func(c net.Conn) { h.serve(c, h.conns.Add(1) == 1) })
	return h
}

func (h *lateHost) serve(c net.Conn, first bool) {
	br := bufio.NewReader(c)
	for i := 0; ; i++ {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"
		switch {
		case first && i == 0:
			for j, part := range strings.Split(h.first, "\x00pause") {
				if j > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				if _, err := io.WriteString(c, part); err != nil {
					return
				}
			}
			close(h.wrote)
			continue
		case first:
			h.stale.Add(1)
			resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
	}
}

// TestHostUnsolicitedResponse: a second response a host sends after its
// answer, unasked (in the same write, or a few ms later), never reaches
// the next client of that host, on any HTTP/1 path: that client gets
// its own answer from a new connection (or a 502), never the forged one.
func TestHostUnsolicitedResponse(t *testing.T) {
	t.Parallel()
	const forged = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	cert, _ := testutil.SelfSigned(t, "127.0.0.1")
	hostTLS := &tls.Config{Certificates: []tls.Certificate{cert}}
	paths := []framingRoute{
		{"fast path", false, nil},
		{"ReverseProxy", true, nil},
		{"ReverseProxy https", true, hostTLS},
	}
	cases := []struct{ name, first string }{
		{"same write", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + forged},
		{"later write", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00pause" + forged},
		{"chunked, same write", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + forged},
		{"HEAD, same write", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + forged},
		{"204, same write", "HTTP/1.1 204 No Content\r\n\r\n" + forged},
		// Framing net/http's client takes and keeps the connection
		// after: HTTP/1.x past 1.1 is read as 1.1, and a length's leading
		// zeros are no limit.
		{"HTTP/1.2, later write", "HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok\x00pause" + forged},
		{"long length, later write", "HTTP/1.1 200 OK\r\nContent-Length: 00000000000000000002\r\n\r\nok\x00pause" + forged},
	}
	for _, tc := range cases {
		for _, path := range paths {
			for _, method := range []string{"GET", "POST"} {
				t.Run(tc.name+"/"+path.name+"/"+method, func(t *testing.T) {
					t.Parallel()
					for round := 0; round < 10; round++ {
						h := newLateHost(t, tc.first, path.tls)
						p, _ := New(Options{ClusterID: "c1", DisableFastPath: path.disable})
						backend := h.addr
						if path.tls != nil {
							backend = "https://" + backend
						}
						srv := proxyServer(t, p, backend)
						do := func(method string) (int, string) {
							var body io.Reader
							if method == "POST" {
								body = strings.NewReader("x")
							}
							req, _ := http.NewRequest(method, srv.URL+"/", body)
							req.Host = "hello.apps.test"
							res, err := srv.Client().Do(req)
							if err != nil {
								t.Fatalf("%v", err)
							}
							defer res.Body.Close()
							b, _ := io.ReadAll(res.Body)
							return res.StatusCode, string(b)
						}
						m1 := "GET"
						if strings.HasPrefix(tc.name, "HEAD") {
							m1 = "HEAD"
						}
						do(m1)
						select {
						case <-h.wrote:
						case <-time.After(10 * time.Second):
							t.Fatal("the host never wrote its first answer")
						}
						s, b := do(method)
						if b == "forged" || b == "stale" || !(s == 200 && b == "fresh" || s == 502) {
							t.Fatalf("round %d: the next client got %d %q, want 200 \"fresh\" or a 502", round, s, b)
						}
						p.Close()
					}
				})
			}
		}
	}
}

// TestHeadConnEndsAnswers: the h1 transport's connection finds where each
// answer ends, as net/http's client frames it, however the reads split
// the bytes: all of the answer is handed over and nothing after it, and
// the read after fails; an answer whose end it does not know is passed
// on whole.
func TestHeadConnEndsAnswers(t *testing.T) {
	t.Parallel()
	const after = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	tests := []struct {
		name, method, answer string
		followed             bool // false: the end is not known, all passes
	}{
		{"length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", true},
		{"length twice", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length:5\r\n\r\nhello", true},
		{"no body", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", true},
		{"304 with a length", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", true},
		{"1xx first", "GET", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10;ext=1 \r\n0123456789abcdef\r\n0\r\n\r\n", true},
		{"chunked with trailers", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\nX-B: 2\r\n\r\n", true},
		{"HTTP/1.0 kept alive", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", true},
		{"LF line ends", "GET", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", true},
		{"HTTP/1.2", "GET", "HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
		{"HTTP/1.9 chunked", "GET", "HTTP/1.9 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", true},
		{"length with 19 digits", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0000000000000000002\r\n\r\nok", true},
		{"until the close", "GET", "HTTP/1.1 200 OK\r\n\r\nhello", false},
		{"closes", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false},
		{"HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
		{"HTTP/1.0 coding", "GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\nok", false},
		{"upgrade", "GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", false},
		{"a bad chunk line", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 2, 7, len(tt.answer) + len(after)} {
			c := new(headConn)
			c.begin(tt.method)
			c.phase, c.await = phaseHead, false // as the request's write does
			c.arm(c.next)
			in := []byte(tt.answer + after)
			handed := 0
			for len(in) > 0 && !c.refused.Load() {
				n := min(size, len(in))
				cut := c.scan(in[:n])
				if cut < 0 {
					cut = n
				}
				handed += cut
				in = in[n:]
			}
			want := len(tt.answer)
			if !tt.followed {
				want += len(after)
			}
			if handed != want || c.refused.Load() != tt.followed {
				t.Errorf("%s, reads of %d: %d bytes handed over, refused %v; want %d, %v", tt.name, size, handed, c.refused.Load(), want, tt.followed)
			}
			if tt.followed && c.why != errUnsolicited {
				t.Errorf("%s, reads of %d: refused with %v", tt.name, size, c.why)
			}
		}
	}
}

// TestHostKeptAliveAnswersReuse: honest answers of every framing leave
// the connection in the pool, on the ReverseProxy path over http and
// https: each request reaches the host once, all on one connection, and
// each client gets its own answer (following where answers end sends
// nothing again and drops no connection).
func TestHostKeptAliveAnswersReuse(t *testing.T) {
	t.Parallel()
	answers := []struct{ method, resp, body string }{
		{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok"},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", ""},
		{"GET", "HTTP/1.1 204 No Content\r\n\r\n", ""},
		{"GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", ""},
		{"GET", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhints", "hints"},
		{"GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\x00pause\r\n2\r\nde\r\n0\r\nX-Sum: 1\r\n\r\n", "abcde"},
		{"POST", "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npo\x00pausested", "posted"},
		{"GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nold", "old"},
		{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nla\x00pausest", "last"},
	}
	cert, _ := testutil.SelfSigned(t, "127.0.0.1")
	for _, conf := range []*tls.Config{nil, {Certificates: []tls.Certificate{cert}}} {
		// net/http's transport puts a connection back in its pool on a
		// goroutine of its own after the body's end: on a busy machine
		// a request can find the pool empty and dial. That run is no
		// failure (nothing was sent twice) and goes again.
		for attempt := 1; !keptAliveRun(t, conf, answers); attempt++ {
			if attempt == 3 {
				t.Fatalf("tls %v: in %d runs the answers never all went over one connection", conf != nil, attempt)
			}
		}
	}
}

// keptAliveRun is one run of TestHostKeptAliveAnswersReuse: false when
// the answers went over more than one connection, none sent twice.
func keptAliveRun(t *testing.T, conf *tls.Config, answers []struct{ method, resp, body string }) bool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	backend := addr
	if conf != nil {
		ln, backend = tls.NewListener(ln, conf), "https://"+addr
	}
	var conns, reqs atomic.Int32
	testutil.ServeConns(t, ln, func(c net.Conn) {
		conns.Add(1)
		br := bufio.NewReader(c)
		for {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			i := int(reqs.Add(1)) - 1
			if i >= len(answers) {
				return
			}
			for j, part := range strings.Split(answers[i].resp, "\x00pause") {
				if j > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				if _, err := io.WriteString(c, part); err != nil {
					return
				}
			}
		}
	})
	p, _ := New(Options{ClusterID: "c1", DisableFastPath: true})
	defer p.Close()
	srv := proxyServer(t, p, backend)
	for i, a := range answers {
		var body io.Reader
		if a.method == "POST" {
			body = strings.NewReader("x")
		}
		req, _ := http.NewRequest(a.method, srv.URL+"/", body)
		req.Host = "hello.apps.test"
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantStatus := 200
		if i == 2 {
			wantStatus = 204
		} else if i == 3 {
			wantStatus = 304
		}
		if res.StatusCode != wantStatus || string(b) != a.body {
			t.Fatalf("%s: answer %d: %d %q, want %d %q", backend, i, res.StatusCode, b, wantStatus, a.body)
		}
		if int(reqs.Load()) != i+1 {
			t.Fatalf("%s: after answer %d the host got %d requests: one was sent again", backend, i, reqs.Load())
		}
		time.Sleep(5 * time.Millisecond) // a chance for the transport to pool the connection; see above
	}
	if conns.Load() != 1 {
		t.Logf("%s: %d requests over %d connections; again", backend, reqs.Load(), conns.Load())
		return false
	}
	return true
}

// TestHeadConnCountsWhatCameBeforeTheRequest: bytes the host sent after
// its answer fail the next request's write even when a reader already
// took them from the socket and has not handed them over (net/http's
// reader, woken a moment before the write): the socket's count of bytes
// received says they came. Nothing of the request is sent.
func TestHeadConnCountsWhatCameBeforeTheRequest(t *testing.T) {
	cc, peer := testutil.TCPPair(t)
	if !counts(cc) {
		t.Skip("no tcpi_bytes_received here")
	}
	c := &headConn{Conn: cc, raw: cc}
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
	c.begin("GET")
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	head := make([]byte, 4096)
	if _, err := io.ReadAtLeast(peer, head, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(peer, answer); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(answer))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != answer {
		t.Fatalf("the answer read %q, %v", got, err)
	}
	// The forged answer comes, and a reader takes it behind c's back.
	const forged = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
	if _, err := io.WriteString(peer, forged); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cc, make([]byte, len(forged))); err != nil {
		t.Fatal(err)
	}
	c.begin("GET")
	if n, err := io.WriteString(c, "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"); n != 0 || !errors.Is(err, errUnsolicited) {
		t.Fatalf("the next request's write: %d bytes, %v; want none written, errUnsolicited", n, err)
	}
	_ = cc.Close()
	if rest, _ := io.ReadAll(peer); len(rest) != 0 {
		t.Fatalf("the host got %q after its answer", rest)
	}
}

// TestHeadConnLookAllocatesNothing: the look at a reused connection's
// socket before its next request runs on every request the ReverseProxy
// path sends to a kept-alive host, so it allocates nothing (it cost 8
// allocations a request when each look made its own handles, closures
// and TCP_INFO). An exchange on a reused connection is measured against
// the same exchange with the look skipped.
func TestHeadConnLookAllocatesNothing(t *testing.T) {
	cc, peer := testutil.TCPPair(t)
	c := &headConn{Conn: cc, raw: cc}
	_ = cc.SetDeadline(time.Now().Add(30 * time.Second))
	_ = peer.SetDeadline(time.Now().Add(30 * time.Second))
	req := []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	buf := make([]byte, 256)
	var failed error
	exchange := func(look bool) {
		c.mu.Lock()
		c.reused = look
		c.mu.Unlock()
		c.begin("GET")
		if _, err := c.Write(req); err != nil {
			failed = err
			return
		}
		if _, err := io.ReadFull(peer, buf[:len(req)]); err != nil {
			failed = err
			return
		}
		if _, err := peer.Write(answer); err != nil {
			failed = err
			return
		}
		if _, err := io.ReadFull(c, buf[:len(answer)]); err != nil || string(buf[:len(answer)]) != string(answer) {
			failed = fmt.Errorf("the answer read %q, %v", buf[:len(answer)], err)
		}
	}
	exchange(false)
	without := testing.AllocsPerRun(200, func() { exchange(false) })
	with := testing.AllocsPerRun(200, func() { exchange(true) })
	if failed != nil {
		t.Fatal(failed)
	}
	if with > without {
		t.Errorf("an exchange on a reused connection allocates %v times, %v with the look skipped: the look allocates", with, without)
	}
}

// TestHeadConnTLSPlaintextWithTheAnswer: a TLS host writes its answer and
// a forged one in one record; the TLS layer decodes both, and a read of
// exactly the answer leaves the forged bytes with it, where no look at
// the socket sees them. A request that takes the connection before
// net/http's reader asks for more (its look, right after the answer) is
// not sent: its write waits for that reader, which finds the forged
// bytes; neither the request nor the forged answer goes anywhere. After
// an honest answer the same wait ends when the reader finds nothing, and
// the request goes out and is answered.
func TestHeadConnTLSPlaintextWithTheAnswer(t *testing.T) {
	t.Parallel()
	for _, forged := range []string{"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged", ""} {
		tlsPlaintextAfter(t, forged)
	}
}

// tlsPlaintextAfter is one case of TestHeadConnTLSPlaintextWithTheAnswer:
// forged written with the answer, or nothing ("").
func tlsPlaintextAfter(t *testing.T, forged string) {
	t.Helper()
	cc, peer := testutil.TCPPair(t)
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
	cert, _ := testutil.SelfSigned(t, "127.0.0.1")
	host := tls.Server(peer, &tls.Config{Certificates: []tls.Certificate{cert}})
	c := &headConn{raw: cc, tls: true}
	c.cond.L = &c.mu
	tc := tls.Client(rawWatch{Conn: cc, c: c}, &tls.Config{InsecureSkipVerify: true})
	shook := make(chan error, 1)
	go func() { shook <- host.Handshake() }()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-shook; err != nil {
		t.Fatal(err)
	}
	c.Conn = tc
	c.begin("GET")
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	hr := bufio.NewReader(host)
	if _, err := http.ReadRequest(hr); err != nil {
		t.Fatal(err)
	}
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	if _, err := io.WriteString(host, answer+forged); err != nil { // one record
		t.Fatal(err)
	}
	got := make([]byte, len(answer))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != answer {
		t.Fatalf("the answer read %q, %v", got, err)
	}
	// The next request takes the connection now, before the reader asks.
	type wrote struct {
		n   int
		err error
	}
	done := make(chan wrote, 1)
	c.begin("GET")
	const next = "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
	go func() {
		n, err := io.WriteString(c, next)
		done <- wrote{n, err}
	}()
	var w wrote
	returned := false
	testutil.WaitFor(t, 10*time.Second, func() bool {
		select {
		case w = <-done:
			returned = true
			return true
		default:
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.waiting
	}, "the request's write neither returned nor waited")
	// net/http's reader asks for what follows the answer.
	read := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, err := c.Read(b)
		read <- fmt.Sprintf("%q, %v", b[:n], err)
	}()
	if !returned {
		w = <-done
	}
	if forged == "" {
		if w.n != len(next) || w.err != nil {
			t.Fatalf("after an honest answer, the next request's write: %d bytes, %v", w.n, w.err)
		}
		if req, err := http.ReadRequest(hr); err != nil || req.URL.Path != "/next" {
			t.Fatalf("the host read %v, %v; want the next request", req, err)
		}
		_, _ = io.WriteString(host, answer)
		if r, want := <-read, fmt.Sprintf("%q, <nil>", answer); r != want {
			t.Fatalf("the next answer read %s, want %s", r, want)
		}
		return
	}
	if r, want := <-read, `"", `+errUnsolicited.Error(); r != want {
		t.Errorf("the read after the answer: %s; want %s", r, want)
	}
	if w.n != 0 || !errors.Is(w.err, errUnsolicited) {
		t.Errorf("the next request's write: %d bytes, %v; want none written, errUnsolicited", w.n, w.err)
	}
	_ = c.Close()
	if rest, _ := io.ReadAll(hr); len(rest) != 0 {
		t.Errorf("the host got %q after its answer", rest)
	}
}

// TestHeadConnTLSRecordBegunAfterTheAnswer: a TLS host's forged answer
// whose record begins in the same read of the socket as the answer's
// last record, and ends only after the next request went out, is no
// answer to it: the request's write fails, nothing sent, though every
// byte that came before it was read (so no look at the socket sees
// them) and the TLS layer decoded none of them.
func TestHeadConnTLSRecordBegunAfterTheAnswer(t *testing.T) {
	t.Parallel()
	cc, peer := testutil.TCPPair(t)
	_ = cc.SetDeadline(time.Now().Add(10 * time.Second))
	_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
	cert, _ := testutil.SelfSigned(t, "127.0.0.1")
	held := &heldWrites{Conn: peer}
	host := tls.Server(held, &tls.Config{Certificates: []tls.Certificate{cert}})
	c := &headConn{raw: cc, tls: true}
	c.cond.L = &c.mu
	tc := tls.Client(rawWatch{Conn: cc, c: c}, &tls.Config{InsecureSkipVerify: true})
	shook := make(chan error, 1)
	go func() { shook <- host.Handshake() }()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-shook; err != nil {
		t.Fatal(err)
	}
	c.Conn = tc
	c.begin("GET")
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	hr := bufio.NewReader(host)
	if _, err := http.ReadRequest(hr); err != nil {
		t.Fatal(err)
	}
	// The records of the answer and of the forged one, sent so: the
	// answer's and the forged one's first 10 bytes in one write.
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	held.hold = true
	_, _ = io.WriteString(host, answer)
	rec := len(held.buf)
	_, _ = io.WriteString(host, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
	records := held.buf
	if _, err := peer.Write(records[:rec+10]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(answer))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != answer {
		t.Fatalf("the answer read %q, %v", got, err)
	}
	c.begin("GET")
	done := make(chan error, 1)
	go func() {
		n, err := io.WriteString(c, "GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
		if n != 0 || !errors.Is(err, errUnsolicited) {
			err = fmt.Errorf("%d bytes, %v", n, err)
		} else {
			err = nil
		}
		done <- err
	}()
	// net/http's reader asks for what follows the answer; the rest of the
	// forged record comes once the request has been written, if it is.
	read := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, err := c.Read(b)
		read <- fmt.Sprintf("%q, %v", b[:n], err)
	}()
	if err := <-done; err != nil {
		_, _ = peer.Write(records[rec+10:])
		t.Fatalf("the next request's write: %v; want none written, errUnsolicited (the reader then read %s)", err, <-read)
	}
	_ = c.Close()
	<-read
	if rest, _ := io.ReadAll(hr); len(rest) != 0 {
		t.Errorf("the host got %q after its answer", rest)
	}
}

// heldWrites is a host's connection whose writes, once hold is set, are
// kept in buf, for the test to send as it likes.
type heldWrites struct {
	net.Conn
	hold bool
	buf  []byte
}

func (h *heldWrites) Write(p []byte) (int, error) {
	if h.hold {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
}
