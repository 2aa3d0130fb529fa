package gatehouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// The first event reaches the client while the host still holds the
// response open: nothing on the way buffers a text/event-stream.
func (e *h2Env) testSSE(t *testing.T) {
	tr, _ := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	p := e.probe("sse-" + t.Name())
	res := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local/sse?k=sse-"+t.Name(), nil))
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer: %d %v", res.StatusCode, res.Header)
	}
	first := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != "data: 1\n\n" {
		t.Fatalf("first event %q, %v (held back until the host ends?)", first, err)
	}
	select {
	case <-p.release:
		t.Fatal("the host was let go before the first event arrived")
	default:
	}
	p.letGo()
	if rest, err := io.ReadAll(res.Body); err != nil || string(rest) != "data: 2\n\n" {
		t.Fatalf("after the first event: %q, %v", rest, err)
	}
}

// A 64 MiB download, a 16 MiB upload and four small downloads as
// concurrent streams of one connection, each byte-exact. The host holds
// every answer until all six requests have arrived, so the streams are
// open at once, not one after another.
func (e *h2Env) testBulk(t *testing.T) {
	tr, dials := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2BulkWait)
	defer cancel()
	warm := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local/ok", nil))
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()

	batch := "bulk-" + t.Name()
	const all = 6
	type job struct {
		name   string
		up     bool
		n      int64
		seed   uint64
		expect string // length and SHA-256, as the host reports an upload
	}
	jobs := []job{{name: "download 64 MiB", n: 64 << 20, seed: 1}, {name: "upload 16 MiB", up: true, n: 16 << 20, seed: 2}}
	for i := range 4 {
		jobs = append(jobs, job{name: fmt.Sprintf("download %d", i), n: 256<<10 + int64(i), seed: uint64(10 + i)})
	}
	for i := range jobs {
		jobs[i].expect = mustSum(pseudoRandom(jobs[i].seed, jobs[i].n))
	}
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- e.bulkJob(ctx, tr, batch, all, j.up, j.n, j.seed, j.expect) }()
	}
	for range jobs {
		if err := <-errs; err != nil { // each job ends with ctx at the latest
			t.Error(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the streams took %d connections, want 1", n)
	}
}

func (e *h2Env) bulkJob(ctx context.Context, tr *http.Transport, batch string, all int, up bool, n int64, seed uint64, expect string) error {
	var req *http.Request
	var err error
	if up {
		req, err = http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("https://web.test.local/upload?k=%s&all=%d", batch, all), pseudoRandom(seed, n))
		req.ContentLength = n
	} else {
		req, err = http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://web.test.local/bytes?k=%s&all=%d&n=%d&seed=%d", batch, all, n, seed), nil)
	}
	if err != nil {
		return err
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.ProtoMajor != 2 {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%s %s: %s %d %q", req.Method, req.URL.Path, res.Proto, res.StatusCode, b)
	}
	var got string
	if up {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return fmt.Errorf("upload's answer: %w", err)
		}
		got = string(b)
	} else {
		m, sum, err := sumOf(res.Body)
		if err != nil {
			return fmt.Errorf("download of %d bytes: %w after %d", n, err, m)
		}
		got = fmt.Sprintf("%d %s", m, sum)
	}
	if got != expect {
		return fmt.Errorf("%s %s: got %s, want %s", req.Method, req.URL.Path, got, expect)
	}
	return nil
}

// A client that cancels a stream (RST_STREAM CANCEL) cancels the host's
// request too: before the answer, in the middle of its body, in the
// middle of the client's upload, and on a gRPC stream to an h2c host (a
// reset the gateway passes on as one). The connection goes on serving the
// client's other streams.
func (e *h2Env) testCancel(t *testing.T) {
	for _, tc := range []struct {
		name, app, method, path string
		upload                  bool   // the request's body is still open at the reset
		answered                bool   // the reset comes after the answer's head
		first                   string // and after this much of its body
	}{
		{name: "before the answer", app: "web", method: "GET", path: "/hang"},
		{name: "mid-body", app: "web", method: "GET", path: "/hang?head=1", answered: true, first: "started"},
		{name: "mid-upload", app: "web", method: "PUT", path: "/hang", upload: true},
		{name: "grpc stream to an h2c host", app: "grpc", method: "POST", path: "/echo.Echo/Hang", upload: true, answered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, dials := e.client(t, tc.app+".test.local", "h2")
			key := "cancel-" + t.Name()
			p := e.probe(key)
			ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
			defer cancel()
			sep := "?"
			if strings.Contains(tc.path, "?") {
				sep = "&"
			}
			req := newReq(t, ctx, tc.method, "https://"+tc.app+".test.local"+tc.path+sep+"k="+key, nil)
			req.Header.Set("Content-Type", "application/grpc")
			if tc.upload {
				pr, pw := io.Pipe()
				defer pw.Close()
				req.Body, req.ContentLength = pr, -1
				go pw.Write(grpcFrame(strings.Repeat("u", 64<<10))) // ends when the transport closes pr
				// Go's transport, once it has the answer, notices the
				// cancel only when the body it is sending ends (its
				// body read does not watch ctx): a body that ends with
				// ctx, as a gRPC client's stream does.
				context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
			}
			errc := make(chan error, 1)
			go func() {
				res, err := tr.RoundTrip(req)
				if err == nil {
					b := make([]byte, len(tc.first))
					if _, err = io.ReadFull(res.Body, b); err == nil && string(b) != tc.first {
						err = fmt.Errorf("body %q", b)
					}
					if err == nil && tc.answered {
						errc <- nil // the stream is where the case resets it
					}
					if err == nil {
						_, err = io.Copy(io.Discard, res.Body)
					}
					res.Body.Close()
				}
				errc <- err
			}()
			await(t, p.started, "the host to see the request")
			if tc.answered {
				if err := <-errc; err != nil { // the round trip ends with ctx at the latest
					t.Fatalf("before the reset: %v", err)
				}
			}
			cancel()
			await(t, p.ended, "the host's request context to end after the client's reset")
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("the client's stream ended with %v, want context.Canceled", err)
			}
			ctx2, cancel2 := context.WithTimeout(context.Background(), h2Wait)
			defer cancel2()
			after := newReq(t, ctx2, "GET", "https://web.test.local/ok", nil)
			if tc.app == "grpc" {
				after = grpcReq(t, ctx2, "Fail", nil)
			}
			res := roundTrip(t, tr, after)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || dials.Load() != 1 {
				t.Errorf("after the reset: %d on connection %d, want 200 on the first", res.StatusCode, dials.Load())
			}
		})
	}
}

// A host that fails mid-answer (its connection cut after 30000 bytes,
// with or without a Content-Length promising more) resets the client's
// stream: the client sees every byte the host sent, then an error where
// the body stops, never a clean end of a truncated answer; and the
// connection serves on. GET takes the proxy's fast path, POST
// ReverseProxy.
func (e *h2Env) testBrokenHost(t *testing.T) {
	tr, dials := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	// Over HTTP/1.1 the cut closes the client's connection instead of
	// resetting a stream, after the same 30000 bytes.
	tr1, _ := e.client(t, "web.test.local", "http/1.1")
	for _, c := range []struct {
		proto string
		tr    *http.Transport
	}{{"HTTP/2", tr}, {"HTTP/1.1", tr1}} {
		for _, method := range []string{"GET", "POST"} {
			for _, path := range []string{"/short", "/chunkabort"} {
				res := roundTrip(t, c.tr, newReq(t, ctx, method, "https://web.test.local"+path, nil))
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || len(b) != 30000 || err == nil || ctx.Err() != nil {
					t.Errorf("%s %s %s: %d, %d bytes, %v; want 200, 30000 bytes, then an error", c.proto, method, path, res.StatusCode, len(b), err)
				}
			}
		}
	}
	e.expectOK(t, ctx, tr, dials)
}

// expectOK asserts that tr's one connection still serves a request.
func (e *h2Env) expectOK(t *testing.T, ctx context.Context, tr *http.Transport, dials *atomic.Int32) {
	t.Helper()
	res := roundTrip(t, tr, newReq(t, ctx, "GET", "https://web.test.local/ok", nil))
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "ok" || err != nil || dials.Load() != 1 {
		t.Errorf("then: %d %q %v on connection %d, want 200 ok on the first", res.StatusCode, b, err, dials.Load())
	}
}

// Header blocks over one frame (16 KiB) cross the gateway both ways, as
// HEADERS and CONTINUATION frames.
func (e *h2Env) testLargeHeaders(t *testing.T) {
	tr, _ := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	req := newReq(t, ctx, "GET", "https://web.test.local/bighead", nil)
	req.Header.Set("X-Req-Big", strings.Repeat("r", 30<<10))
	res := roundTrip(t, tr, req)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != fmt.Sprint("saw ", 30<<10) || err != nil || res.Header.Get("X-Big") != strings.Repeat("b", 40<<10) {
		t.Errorf("%d %q %v, X-Big of %d bytes; want the host to see 30 KiB and the client 40 KiB", res.StatusCode, b, err, len(res.Header.Get("X-Big")))
	}
}

// A host that answers an upload before reading it all: the client gets
// the answer, its upload stops, and the connection serves on.
func (e *h2Env) testEarlyAnswer(t *testing.T) {
	tr, dials := e.client(t, "web.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	for _, path := range []string{"/early", "/earlyread"} {
		req := newReq(t, ctx, "PUT", "https://web.test.local"+path, pseudoRandom(3, 16<<20))
		req.ContentLength = 16 << 20
		res := roundTrip(t, tr, req)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large\n" || err != nil {
			t.Errorf("%s: %d %q %v; want 413 too large", path, res.StatusCode, b, err)
		}
	}
	e.expectOK(t, ctx, tr, dials)
}
