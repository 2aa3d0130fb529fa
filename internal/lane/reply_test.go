package lane

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sock"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// serveTCP serves a loopback listener with a Server made from o, each
// connection wrapped as the edge wraps it (sock: raw system calls, and
// the last of each answer written by the wait for the next request),
// over TLS when cfg is not nil. It returns the address and the Server.
func serveTCP(t *testing.T, o Options, cfg ...*tls.Config) (string, *Server) {
	t.Helper()
	if o.Handoff == nil {
		o.Handoff = func(c net.Conn) { c.Close() }
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 5 * time.Second
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c = sock.Wrap(c)
				if len(cfg) > 0 {
					tc := tls.Server(c, cfg[0])
					if err := tc.Handshake(); err != nil {
						c.Close()
						return
					}
					c = tc
				}
				s.ServeConn(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.Close(); wg.Wait() })
	return ln.Addr().String(), s
}

// replyClient is one client connection to a Server served by serveTCP,
// plain or over TLS.
type replyClient struct {
	t  *testing.T
	s  *Server
	c  net.Conn
	br *bufio.Reader
}

func newReplyClient(t *testing.T, overTLS bool, o Options) *replyClient {
	t.Helper()
	var (
		addr string
		s    *Server
		c    net.Conn
		err  error
	)
	if overTLS {
		cert, pool := testutil.SelfSigned(t, "127.0.0.1")
		addr, s = serveTCP(t, o, &tls.Config{Certificates: []tls.Certificate{cert}})
		c, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	} else {
		addr, s = serveTCP(t, o)
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &replyClient{t: t, s: s, c: c, br: bufio.NewReader(c)}
}

// send writes a GET for each path, all in one write.
func (rc *replyClient) send(paths ...string) {
	rc.t.Helper()
	var raw strings.Builder
	for _, p := range paths {
		raw.WriteString(get(p))
	}
	if _, err := io.WriteString(rc.c, raw.String()); err != nil {
		rc.t.Fatal(err)
	}
}

// next reads the next answer, for path p.
func (rc *replyClient) next(p string) *http.Response {
	rc.t.Helper()
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("the answer for %s: %v", p, err)
	}
	return res
}

// expect reads the next answers, one for each path, and wants each to be
// 200 "answer {path}" (as answerPaths answers); it returns the last.
func (rc *replyClient) expect(paths ...string) *http.Response {
	rc.t.Helper()
	var res *http.Response
	for _, p := range paths {
		res = rc.next(p)
		if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(b) != "answer "+p {
			rc.t.Fatalf("the answer for %s: %d %q", p, res.StatusCode, b)
		}
	}
	return res
}

// answerPaths answers "answer {path}"; /held waits for release first.
func answerPaths(release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			<-release
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "answer "+r.URL.Path)
	})
}

// TestReply: a connection's answers ride on the waits for its next
// requests, and a client that pipelines still gets every answer, in
// order, whether its next request came with the last (seen at once) or
// while the last was being served (which the wait may not see: the
// parker finds it when the warm wait ends, and the connection replies no
// more).
func TestReply(t *testing.T) {
	t.Parallel()
	for _, overTLS := range []bool{false, true} {
		for _, idle := range []time.Duration{0, 200 * time.Millisecond} {
			// With an idle timeout under the warm wait, a wait that ends
			// closes the connection: the missed request must not be lost.
			t.Run(fmt.Sprintf("tls=%v/idle=%v", overTLS, idle), func(t *testing.T) { testReply(t, overTLS, idle) })
		}
	}
}

func testReply(t *testing.T, overTLS bool, idle time.Duration) {
	release := make(chan struct{})
	rc := newReplyClient(t, overTLS, Options{Handler: answerPaths(release), IdleTimeout: idle})
	send, expect := rc.send, rc.expect

	// One request at a time: from the second on, each answer is a reply.
	for i := range 20 {
		p := fmt.Sprintf("/seq%d", i)
		send(p)
		expect(p)
	}
	// The next request sent while the last is served, before its answer.
	send("/held")
	time.Sleep(20 * time.Millisecond) // the held request is in the handler
	send("/during")
	time.Sleep(20 * time.Millisecond) // its bytes are in the socket
	release <- struct{}{}
	expect("/held", "/during")
	// And again, now that the connection is known to pipeline; then two
	// in one write, and one at a time again.
	send("/held")
	time.Sleep(20 * time.Millisecond)
	send("/during2")
	release <- struct{}{}
	expect("/held", "/during2")
	send("/a", "/b")
	expect("/a", "/b")
	send("/last")
	expect("/last")
}

// TestReplyOneAtATime: a client that sends each request only once it has
// the last answer, as most do, so that from its third request on each
// answer is a reply: it gets what net/http would send, whatever the
// framing, and the connection closes where net/http's does.
func TestReplyOneAtATime(t *testing.T) {
	t.Parallel()
	th := &testHandler{}
	plain, laneAddr, _ := servers(t, th, Options{})
	// Each sequence ends its connection: a short answer, a panic, the
	// client's close, or a request handed to net/http.
	sequences := [][]string{
		{"/", "/a", "/cl", "/small", "/big", "/cl16k", "/cl40k", "/flush", "/204", "/304",
			"/empty", "/status", "/trailer", "/early", "/notype", "/multi", "/badcl", "/long", "/",
			"HEAD /small", "HEAD /big", "HEAD /cl", "/b", "/short", "/after-short"},
		{"/", "/a", "/b", "/abort", "/after-abort"},
		{"/", "/a", "/b", "CLOSE /c", "/after-close"},
		{"/", "/a", "/b", "/é", "/after-handoff", "/again"},
	}
	run := func(addr string, paths []string) (out []answer) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for _, p := range paths {
			m, extra := "GET", ""
			if after, ok := strings.CutPrefix(p, "HEAD "); ok {
				m, p = "HEAD", after
			}
			if after, ok := strings.CutPrefix(p, "CLOSE "); ok {
				p, extra = after, "Connection: close\r\n"
			}
			if _, err := io.WriteString(c, m+" "+p+" HTTP/1.1\r\nHost: a.test\r\n"+extra+"\r\n"); err != nil {
				out = append(out, answer{Err: "write: " + err.Error()})
				return out
			}
			res, err := http.ReadResponse(br, &http.Request{Method: m})
			for err == nil && res.StatusCode < 200 {
				// An informational answer: the final one follows, before
				// the client sends its next request.
				out = append(out, answer{Status: res.StatusCode, Header: res.Header})
				res, err = http.ReadResponse(br, &http.Request{Method: m})
			}
			if err != nil {
				out = append(out, answer{Err: "read: " + errKind(err)})
				return out
			}
			b, err := io.ReadAll(res.Body)
			a := answer{Status: res.StatusCode, TE: res.TransferEncoding, Length: res.ContentLength, Header: res.Header, Body: string(b), Trailer: res.Trailer}
			if err != nil {
				a.Err = "body: " + errKind(err)
			}
			a.Header.Del("Date")
			out = append(out, a)
			if err != nil || res.Close {
				break
			}
		}
		return out
	}
	var want, got []answer
	for _, paths := range sequences {
		want = append(append(want, run(plain, paths)...), answer{Err: "end of sequence"})
		got = append(append(got, run(laneAddr, paths)...), answer{Err: "end of sequence"})
	}
	if len(got) != len(want) {
		t.Fatalf("lane: %d answers, net/http %d\nlane %+v\nnet/http %+v", len(got), len(want), got, want)
	}
	for i := range want {
		if fmt.Sprintf("%+v", got[i]) != fmt.Sprintf("%+v", want[i]) {
			t.Errorf("answer %d:\nlane     %+v\nnet/http %+v", i, got[i], want[i])
		}
	}
}

// TestReplyAfterALongAnswer: the last of a long answer (one the client
// starts reading late) is held for the next wait and goes after the rest,
// which the handler wrote; the next request is then served. (A reply
// that finds the socket full is sock's TestAsk/reply-full-socket.)
func TestReplyAfterALongAnswer(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	chunk := []byte(strings.Repeat("z", 64<<10))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/huge" {
			_, _ = io.WriteString(w, "answer "+r.URL.Path)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for n := 0; n < size-3000; n += len(chunk) {
			_, _ = w.Write(chunk[:min(len(chunk), size-3000-n)])
		}
		_, _ = io.WriteString(w, strings.Repeat("y", 3000)) // held: the reply
	})
	// The idle timeout counts from the handler's return, so it spans the
	// client's reading of what the socket buffers still hold of the
	// answer (megabytes, on loopback), as net/http's does; a loaded
	// machine has taken over the serveTCP default of 5 s, and the lane
	// then closed the connection before /after came. What is checked
	// here is the reply, not the timeout: it gets the client's deadline.
	rc := newReplyClient(t, false, Options{Handler: h, IdleTimeout: 20 * time.Second})
	ask := func(p string) *http.Response {
		t.Helper()
		rc.send(p)
		return rc.next(p)
	}
	for _, p := range []string{"/1", "/2"} {
		rc.send(p)
		rc.expect(p)
	}
	for range 2 {
		res := ask("/huge")
		time.Sleep(100 * time.Millisecond) // the handler waits on the socket
		b, err := io.ReadAll(res.Body)
		if err != nil || len(b) != size {
			t.Fatalf("/huge: %d bytes of %d, %v", len(b), size, err)
		}
		if strings.Trim(string(b[:size-3000]), "z") != "" || strings.Trim(string(b[size-3000:]), "y") != "" {
			t.Fatal("/huge: its last 3000 bytes are not where they belong")
		}
		rc.send("/after")
		rc.expect("/after")
	}
}

// TestReplyDrain: drain begins while a client that has just pipelined
// for the first time waits for the answer to a request it sent while the
// last was served. That request came before the drain: it is answered,
// as it is without replies, not dropped with the connection (a reset,
// with its bytes unread) because the replying wait did not see it.
func TestReplyDrain(t *testing.T) {
	t.Parallel()
	for _, overTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) { testReplyDrain(t, overTLS) })
	}
}

func testReplyDrain(t *testing.T, overTLS bool) {
	release := make(chan struct{})
	rc := newReplyClient(t, overTLS, Options{Handler: answerPaths(release)})
	send, expect, s := rc.send, rc.expect, rc.s
	for _, p := range []string{"/1", "/2"} {
		send(p)
		expect(p)
	}
	send("/held")
	time.Sleep(20 * time.Millisecond) // the held request is in the handler
	send("/during")
	time.Sleep(20 * time.Millisecond) // its bytes are in the socket
	release <- struct{}{}
	expect("/held")
	time.Sleep(20 * time.Millisecond) // the lane waits for what comes next
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	if res := expect("/during"); !res.Close {
		t.Errorf("the answer for /during, served in the drain, does not close the connection")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
