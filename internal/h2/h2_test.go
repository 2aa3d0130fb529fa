package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// serve starts a Server for h on a loopback listener (HTTP/2 with prior
// knowledge: what ServeConn is given after ALPN is the same), each
// connection a sock.Conn as the edge gives it (under its TLS), so that a
// connection's lone requests run inline. Cleanup closes both.
func serve(t testing.TB, o Options) (*Server, string) {
	t.Helper()
	return serveWrapped(t, o, sock.Wrap)
}

// serveWrapped is serve with each accepted connection passed through wrap
// (if not nil) before the server gets it.
func serveWrapped(t testing.TB, o Options, wrap func(net.Conn) net.Conn) (*Server, string) {
	t.Helper()
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
			if wrap != nil {
				c = wrap(c)
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.ServeConn(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.Close()
		wg.Wait()
	})
	return s, ln.Addr().String()
}

// client is net/http's HTTP/2 client speaking it over plain TCP (prior
// knowledge), with a connection pool of its own.
func client(t testing.TB) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestRequestsAndResponses(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Header().Set("X-Len", fmt.Sprint(r.ContentLength))
			w.Header().Set("X-Proto", r.Proto)
			w.Header().Set("X-Host", r.Host)
			w.Header().Set("X-Cookie", r.Header.Get("Cookie"))
			w.Header().Set("X-Trailer", r.Trailer.Get("X-T"))
			_, _ = w.Write(b)
		case "/big":
			chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
			for range 32 {
				_, _ = w.Write(chunk)
			}
		case "/trailers":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		case "/nocontent":
			w.Header().Set("X-A", "1")
			w.WriteHeader(http.StatusNoContent)
			if _, err := w.Write([]byte("x")); err != http.ErrBodyNotAllowed {
				panic(fmt.Sprint("write to 204: ", err))
			}
		case "/declared":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
			if _, err := io.WriteString(w, "!"); err != http.ErrContentLength {
				panic(fmt.Sprint("write past content-length: ", err))
			}
		case "/flush":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the client reads the first event, then leaves
		default:
			_, _ = io.WriteString(w, "<html>hello")
		}
	})
	_, addr := serve(t, Options{Handler: h})
	c := client(t)
	base := "http://" + addr

	t.Run("small GET: sniffed type, length, date", func(t *testing.T) {
		resp, err := c.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "<html>hello" || resp.ProtoMajor != 2 {
			t.Fatalf("%d %q %s", resp.StatusCode, b, resp.Proto)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("content-type %q", ct)
		}
		if resp.ContentLength != int64(len(b)) || resp.Header.Get("Date") == "" {
			t.Errorf("content-length %d, date %q", resp.ContentLength, resp.Header.Get("Date"))
		}
	})
	t.Run("POST body, cookies joined, request trailers", func(t *testing.T) {
		body := strings.Repeat("x", 3<<20) // over the 1 MiB windows: flow control both ways
		req, _ := http.NewRequest("POST", base+"/echo", io.MultiReader(strings.NewReader(body)))
		req.Header.Add("Cookie", "a=1")
		req.Header.Add("Cookie", "b=2")
		req.Trailer = http.Header{"X-T": nil}
		req.Body = &trailerBody{Reader: strings.NewReader(body), set: func() { req.Trailer.Set("X-T", "tv") }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != body {
			t.Fatalf("echoed %d bytes, want %d", len(b), len(body))
		}
		if got := resp.Header.Get("X-Cookie"); got != "a=1; b=2" {
			t.Errorf("cookie %q", got)
		}
		if got := resp.Header.Get("X-Trailer"); got != "tv" {
			t.Errorf("request trailer %q", got)
		}
		if got := resp.Header.Get("X-Len"); got != "-1" {
			t.Errorf("content length %s for a body without one", got)
		}
	})
	t.Run("big response", func(t *testing.T) {
		resp, err := c.Get(base + "/big")
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != 32*64<<10 {
			t.Fatalf("%d bytes, %v", n, err)
		}
	})
	t.Run("response trailers", func(t *testing.T) {
		resp, err := c.Get(base + "/trailers")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "body" || resp.Trailer.Get("X-Sum") != "42" || resp.Trailer.Get("X-Late") != "late" {
			t.Fatalf("%q, trailers %v", b, resp.Trailer)
		}
		if resp.Header.Get("X-Sum") != "" {
			t.Errorf("a trailer went out as a header too")
		}
	})
	t.Run("204 and HEAD carry no body", func(t *testing.T) {
		resp, err := c.Get(base + "/nocontent")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 204 || len(b) != 0 || resp.Header.Get("X-A") != "1" {
			t.Fatalf("%d %q %v", resp.StatusCode, b, resp.Header)
		}
		resp, err = c.Head(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) != 0 || resp.ContentLength != int64(len("<html>hello")) {
			t.Fatalf("HEAD: %d %q length %d", resp.StatusCode, b, resp.ContentLength)
		}
	})
	t.Run("declared length", func(t *testing.T) {
		resp, err := c.Get(base + "/declared")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "hello" || resp.ContentLength != 5 {
			t.Fatalf("%q %v length %d", b, err, resp.ContentLength)
		}
	})
	t.Run("flush streams", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/flush", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("data: 1\n\n"))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: 1\n\n" {
			t.Fatalf("%q %v", buf, err)
		}
		resp.Body.Close()
	})
}

type trailerBody struct {
	io.Reader
	set func()
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.set()
	}
	return n, err
}

func (b *trailerBody) Close() error { return nil }

// TestConcurrentStreams: many streams on one connection at once each get
// their own answer, and a reset stream's handler sees its context end.
func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	var cancelled atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			<-r.Context().Done()
			cancelled.Add(1)
			return
		}
		_, _ = io.WriteString(w, r.URL.Path)
	})
	_, addr := serve(t, Options{Handler: h})
	c := client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprintf("/%d", i)
			resp, err := c.Get("http://" + addr + p)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != p {
				errs <- fmt.Errorf("%s answered %q", p, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/hang", nil)
	if _, err := c.Do(req); err == nil {
		t.Fatal("the hanging request answered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for cancelled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if cancelled.Load() != 1 {
		t.Fatal("the client's RST_STREAM did not cancel the handler's context")
	}
}

// TestShutdownFinishesStreams: Shutdown sends GOAWAY; a stream in flight
// finishes, and Shutdown returns once the connection is gone.
func TestShutdownFinishesStreams(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	s, addr := serve(t, Options{Handler: h})
	c := client(t)
	got := make(chan string, 1)
	go func() {
		resp, err := c.Get("http://" + addr + "/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a stream in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if b := <-got; b != "done" {
		t.Fatalf("in-flight stream: %q", b)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// TestFullDuplex: a handler that answers each piece of the request body as
// it comes (gRPC's bidirectional streams, a tunnel) works in lockstep with
// a client that sends the next piece only after it has the last answer.
func TestFullDuplex(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		buf := make([]byte, 64)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(bytes.ToUpper(buf[:n]))
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	})
	_, addr := serve(t, Options{Handler: h})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+addr+"/", pr)
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, piece := range []string{"one", "two", "three"} {
		if _, err := io.WriteString(pw, piece); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(piece))
		if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != strings.ToUpper(piece) {
			t.Fatalf("%s: %q %v", piece, got, err)
		}
	}
	pw.Close()
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after the end: %q %v", rest, err)
	}
}

// TestOptionsStar: "OPTIONS *" is answered by the server, as net/http's
// is (200, no body), and reaches the handler only when the Server asks
// for that (DisableGeneralOptionsHandler).
func TestOptionsStar(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprint("DisableGeneralOptionsHandler=", disable), func(t *testing.T) {
			var seen atomic.Value
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Store(r.Method + " " + r.RequestURI)
				_, _ = io.WriteString(w, "handler")
			})
			_, addr := serve(t, Options{Handler: h, Server: &http.Server{DisableGeneralOptionsHandler: disable}})
			req, err := http.NewRequest(http.MethodOptions, "http://"+addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = "*"
			res, err := client(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			want, wantSeen := "", any(nil)
			if disable {
				want, wantSeen = "handler", "OPTIONS *"
			}
			if res.StatusCode != 200 || string(b) != want || seen.Load() != wantSeen {
				t.Fatalf("%d %q, handler saw %v; want 200 %q, handler saw %v", res.StatusCode, b, seen.Load(), want, wantSeen)
			}
		})
	}
}

// TestLargeWrite: one Write of many MiB goes out whole and in order, in
// the chunks the writer lets go of the lock between, while another
// stream of the same connection is answered beside it.
func TestLargeWrite(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = w.Write(big)
			return
		}
		_, _ = io.WriteString(w, "small")
	})
	_, addr := serve(t, Options{Handler: h})
	c := client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, p := range []string{"/big", "/small"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get("http://" + addr + p)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				errs <- err
			case p == "/big" && !bytes.Equal(b, big):
				errs <- fmt.Errorf("/big: %d bytes, not the body written", len(b))
			case p == "/small" && string(b) != "small":
				errs <- fmt.Errorf("/small: %q", b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConnectionEndCancelsHandlers: when the client's connection goes,
// every handler still running on it sees its request's context end, the
// connection's end as the cause, though no stream was reset.
func TestConnectionEndCancelsHandlers(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 3)
	causes := make(chan error, 3)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			causes <- context.Cause(r.Context())
		case <-time.After(10 * time.Second):
			causes <- nil
		}
	})
	_, addr := serve(t, Options{Handler: h})
	var mu sync.Mutex
	var conns []net.Conn
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, a)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for range 3 {
		go func() {
			if resp, err := c.Get("http://" + addr + "/hang"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range 3 {
		<-started
	}
	mu.Lock()
	for _, c := range conns { // one, or two if the requests raced the first dial
		c.Close()
	}
	mu.Unlock()
	for range 3 {
		cause := <-causes
		if cause == nil {
			t.Fatal("a handler's context did not end with its connection")
		}
		if errors.Is(cause, errStreamDone) {
			t.Fatalf("cause %v: the stream's own end, not the connection's", cause)
		}
	}
}
