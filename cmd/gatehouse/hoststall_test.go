package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestSidecarCutsStalledExchanges: a client that reaches the sidecar
// directly cannot hold a request's handler, and the app's, for ever by
// stalling it once under way: an upload whose next bytes do not come is
// answered 408 and its connection closed, and an answer the client stops
// reading is given up (the app's handler returns), over HTTP/1.1 and
// h2c, within a few stall bounds. (That an honest slow upload, a long
// answer and a quiet upgraded connection are not cut by the same bound
// is TestSidecarBoundsCutNoLongExchange's and
// TestSidecarClosesSilentClients'.)
func TestSidecarCutsStalledExchanges(t *testing.T) {
	const bound = 100 * time.Millisecond
	// Long enough that a failure here is the stall bound's, short enough
	// that an unbounded wait fails the test rather than hangs it.
	const within = 10 * time.Second
	for _, scheme := range []string{host.SchemeHTTP, host.SchemeH2C} {
		t.Run(scheme, func(t *testing.T) {
			endless := make(chan error, 1) // the app's endless answer, once given up
			app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/count":
					n, err := io.Copy(io.Discard, r.Body)
					if err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					_, _ = io.WriteString(w, strconv.FormatInt(n, 10))
				case "/endless":
					buf := make([]byte, 32<<10)
					for {
						if _, err := w.Write(buf); err != nil {
							endless <- err
							return
						}
					}
				}
			}))
			app.Config.Protocols = new(http.Protocols)
			app.Config.Protocols.SetHTTP1(true)
			app.Config.Protocols.SetUnencryptedHTTP2(true)
			app.Start()
			t.Cleanup(app.Close)
			up, err := url.Parse(app.URL)
			if err != nil {
				t.Fatal(err)
			}
			// The head and idle bounds far off: what ends these is the
			// stall bound.
			tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: bound}
			addr := runSidecar(t, sidecarProxy(up, scheme, slog.New(slog.DiscardHandler)), scheme, tm)
			base := "http://" + addr

			t.Run("stalled upload", func(t *testing.T) {
				// An upload that stops after 4 of its 100 bytes.
				var stalledRes *http.Response
				if scheme == host.SchemeHTTP {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(within))
					if _, err := io.WriteString(c, "POST /count HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 100\r\n\r\n0123"); err != nil {
						t.Fatal(err)
					}
					br := bufio.NewReader(c)
					if stalledRes, err = http.ReadResponse(br, nil); err != nil {
						t.Fatalf("an upload stalled after 4 bytes: no answer within %s (bound %s): %v", within, bound, err)
					}
					_, _ = io.Copy(io.Discard, stalledRes.Body)
					if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
						t.Errorf("the stalled upload's connection is still open %s on (bound %s)", within, bound)
					}
				} else {
					pr, pw := io.Pipe()
					defer pw.Close()
					go func() { _, _ = io.WriteString(pw, "0123") }()
					req, err := http.NewRequest(http.MethodPost, base+"/count", pr)
					if err != nil {
						t.Fatal(err)
					}
					req.ContentLength = 100
					if stalledRes, err = h2cClient(t, within).Do(req); err != nil {
						t.Fatalf("an upload stalled after 4 bytes: no answer within %s (bound %s): %v", within, bound, err)
					}
					stalledRes.Body.Close()
				}
				if stalledRes.StatusCode != http.StatusRequestTimeout || !strings.Contains(stalledRes.Header.Get("Content-Type"), "problem+json") {
					t.Errorf("an upload stalled after 4 bytes: %d %s, want a 408 problem", stalledRes.StatusCode, stalledRes.Header.Get("Content-Type"))
				}

			})
			t.Run("unread answer", func(t *testing.T) {
				// An endless answer the client stops reading after its head.
				var body io.ReadCloser
				if scheme == host.SchemeHTTP {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					if _, err := io.WriteString(c, "GET /endless HTTP/1.1\r\nHost: hello.test\r\n\r\n"); err != nil {
						t.Fatal(err)
					}
					body = c
				} else {
					res, err := h2cClient(t, 0).Get(base + "/endless")
					if err != nil {
						t.Fatal(err)
					}
					body = res.Body
				}
				defer body.Close()
				select {
				case <-endless:
				case <-time.After(within):
					t.Fatalf("an answer its client stopped reading: the app still writes it %s on (bound %s)", within, bound)
				}
			})
		})
	}
}

// h2cClient is an HTTP/2-cleartext client giving up after timeout (zero:
// never).
func h2cClient(t *testing.T, timeout time.Duration) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// TestSidecarUnreadBodyStallIsBounded: a handler that answers without
// reading the body (the challenge's 405, a 508) leaves net/http to read
// what is left of it, up to 256 KiB, before its answer goes out, with no
// deadline of its own: a client that declared a body and sent 4 bytes of
// it held the connection, unanswered, for ever. The stall bound covers
// that read too; a client that sends its body gets the answer on a
// connection that goes on.
func TestSidecarUnreadBodyStallIsBounded(t *testing.T) {
	const bound = 100 * time.Millisecond
	const within = 10 * time.Second
	tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: bound}
	addr := runSidecar(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodGet)
		w.WriteHeader(http.StatusMethodNotAllowed)
	}), host.SchemeHTTP, tm)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(within))
	br := bufio.NewReader(c)
	post := "POST /x HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 10\r\n\r\n"
	// Sent whole, the body is read past and the connection kept.
	if _, err := io.WriteString(c, post+"0123456789"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusMethodNotAllowed || res.Close {
		t.Fatalf("a whole body: %v %v, want a 405 on a kept connection", res, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	// 4 bytes of 10, then nothing.
	if _, err := io.WriteString(c, post+"0123"); err != nil {
		t.Fatal(err)
	}
	if res, err = http.ReadResponse(br, nil); err != nil {
		t.Fatalf("a body stalled after 4 bytes: no answer within %s (bound %s): %v", within, bound, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the stalled body's connection is still open %s on (bound %s)", within, bound)
	}
}

// TestSidecarEarlyAnswerToAPausedUploadIsWhole: an app that answers an
// upload without taking all of it, after a pause longer than the stall
// bound (the sidecar's copy of the upload held up by the app, not by the
// client, which sent at once), has its answer reach the client whole;
// so does one whose head comes at once, or after such a pause, and whose
// body comes after another. net/http reads what is left of the upload as
// the answer's head goes out to the client, and the head of an answer
// whose length the app gave goes out with its first bytes, not as it
// comes from the app. With the deadline armed before, long passed, that
// read failed, the request was cancelled and the answer cut after its
// head: a 200 and part of a body, for a client that stalled nothing.
func TestSidecarEarlyAnswerToAPausedUploadIsWhole(t *testing.T) {
	t.Parallel()
	// Long enough that the client's upload, sent as fast as the sidecar
	// takes it, never waits that long on a loaded machine.
	const bound = 200 * time.Millisecond
	for _, pause := range []struct {
		name         string
		head, answer time.Duration // before the app's head; between it and its body
	}{
		// Past a stall and a half, the longest deadline armed.
		{"before the head", 2 * bound, 0},
		// The sidecar may read the upload for a while after the app's
		// head, until the sockets to the app are full.
		{"after the head", 0, 3 * bound},
		{"before and after the head", 2 * bound, 3 * bound},
	} {
		t.Run(pause.name, func(t *testing.T) {
			t.Parallel()
			earlyAnswerToAPausedUpload(t, bound, pause.head, pause.answer)
		})
	}
}

func earlyAnswerToAPausedUpload(t *testing.T, bound, headPause, answerPause time.Duration) {
	answer := strings.Repeat("a", 64<<10)
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// An app that reads a request's head and none of its body, and
	// answers in two parts.
	testutil.ServeConns(t, aln, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		time.Sleep(headPause)
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(answer))
		time.Sleep(answerPause)
		_, _ = io.WriteString(c, answer[:len(answer)/2])
		time.Sleep(bound / 2)
		_, _ = io.WriteString(c, answer[len(answer)/2:])
		// Then a half close, and the rest of the upload taken until the
		// sidecar closes its end, as a server that answered without
		// reading a body ends its connection (net/http's lingering
		// close): closed with the upload unread, the connection is
		// reset, and the reset may come before the sidecar has read the
		// answer's end, which it then never gets (RFC 9112 §9.6).
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c)
	})
	up, err := url.Parse("http://" + aln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: bound}
	srv := sidecarServer(sidecarProxy(up, host.SchemeHTTP, slog.New(slog.DiscardHandler)), host.SchemeHTTP, tm)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(sidecarListener(ln, tm)) }()
	t.Cleanup(func() {
		// Shutdown, not Close: it waits for the connection net/http
		// lingers on after an upload it did not read to its end.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	})

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// 32 MiB, chunked, sent as fast as the connection takes it: more
	// than the sockets between the sidecar and the app hold.
	sent := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-sent })
	go func() {
		defer close(sent)
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("u", 64<<10))
		if _, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for range 512 {
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(c, "0\r\n\r\n")
	}()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(b) != answer || err != nil {
		t.Errorf("an answer to an upload the app paused (%s before its head, %s after): %d, %d of %d bytes, %v", headPause, answerPause, res.StatusCode, len(b), len(answer), err)
	}
}

// TestSidecarStallBoundCutsNoSlowApp: the stall bound is the client's,
// not the app's. An app that takes an upload only after thinking for
// longer than the bound (the client waiting meanwhile for the 100
// Continue it asked for, over HTTP/1.1), thinks again after it, then
// answers in two parts with a gap longer than the bound (an event
// stream's), has its answer reach the client whole, and the connection
// serves the next request: no read deadline is armed ahead of a read that
// waits on the app, over h2c none at all, and a write deadline only
// while a write waits.
func TestSidecarStallBoundCutsNoSlowApp(t *testing.T) {
	const bound = 100 * time.Millisecond
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		think := r.URL.Path == "/think"
		if think {
			time.Sleep(3 * bound)
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if think {
			time.Sleep(3 * bound)
		}
		_, _ = fmt.Fprintf(w, "%d;", n)
		w.(http.Flusher).Flush()
		if think {
			time.Sleep(3 * bound)
		}
		_, _ = io.WriteString(w, "done")
	}))
	app.Config.Protocols = new(http.Protocols)
	app.Config.Protocols.SetHTTP1(true)
	app.Config.Protocols.SetUnencryptedHTTP2(true)
	app.Start()
	t.Cleanup(app.Close)
	up, err := url.Parse(app.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{host.SchemeHTTP, host.SchemeH2C} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: bound}
			addr := runSidecar(t, sidecarProxy(up, scheme, slog.New(slog.DiscardHandler)), scheme, tm)

			tr := &http.Transport{Protocols: new(http.Protocols), ExpectContinueTimeout: time.Minute}
			if scheme == host.SchemeH2C {
				tr.Protocols.SetUnencryptedHTTP2(true)
			} else {
				tr.Protocols.SetHTTP1(true)
			}
			t.Cleanup(tr.CloseIdleConnections)
			cl := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			var conns []string
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				conns = append(conns, i.Conn.LocalAddr().String())
			}}
			for i, path := range []string{"/think", "/"} {
				body := path + "0123456789"
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost, "http://"+addr+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					req.Header.Set("Expect", "100-continue")
				}
				res, err := cl.Do(req)
				if err != nil {
					t.Fatalf("POST %s to an app slower than the stall bound (%s): %v", path, bound, err)
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if want := strconv.Itoa(len(body)) + ";done"; res.StatusCode != http.StatusOK || string(b) != want || err != nil {
					t.Fatalf("POST %s to an app slower than the stall bound (%s): %d %q %v, want 200 %q", path, bound, res.StatusCode, b, err, want)
				}
			}
			if len(conns) != 2 || conns[0] != conns[1] {
				t.Errorf("connections used %v, want one", conns)
			}
		})
	}
}

// runSidecar serves h as the sidecar does (sidecarServer on a
// sidecarListener, with tm) on a loopback port until the test ends, and
// returns its address.
func runSidecar(t *testing.T, h http.Handler, scheme string, tm sidecarTimeouts) string {
	t.Helper()
	srv := sidecarServer(h, scheme, tm)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(sidecarListener(ln, tm)) }()
	t.Cleanup(func() { srv.Close(); <-served })
	return ln.Addr().String()
}
