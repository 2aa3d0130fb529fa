package gatehouse

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// grpcFrame is p as one gRPC length-prefixed message (uncompressed).
func grpcFrame(p string) []byte {
	b := make([]byte, 5+len(p))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(p)))
	copy(b[5:], p)
	return b
}

func readGRPC(r io.Reader) (string, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[1:]))
	_, err := io.ReadFull(r, b)
	return string(b), err
}

// grpcHost is a bidirectional-streaming gRPC method in miniature: each
// message it reads is answered at once, and when the client's half ends
// the status goes in the trailers, with the request trailer it saw (in an
// undeclared trailer, as gRPC servers send metadata). /Fail answers
// trailers-only (the status in the only HEADERS), /Abort resets its
// stream after one answer, /Pipe sends back each chunk as it reads it,
// /Hang (with probe k) waits for its request's context to end.
func (e *h2Env) grpcHost(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" {
		http.Error(w, "gRPC over HTTP/2 only, got "+r.Proto, http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/grpc")
	switch r.URL.Path {
	case "/echo.Echo/Fail":
		w.Header().Set("Grpc-Status", "5")
		w.Header().Set("Grpc-Message", "not found")
		return
	case "/echo.Echo/Abort":
		readGRPC(r.Body)
		w.Write(grpcFrame("partial"))
		rc.Flush()
		panic(http.ErrAbortHandler) // RST_STREAM to the gateway
	case "/echo.Echo/Pipe":
		// Full duplex in bulk: every chunk read is sent back at once.
		w.WriteHeader(http.StatusOK)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	case "/echo.Echo/Hang":
		p := e.probe(r.URL.Query().Get("k"))
		p.arrive()
		rc.Flush()
		p.start()
		if !hold(r.Context(), p.release) && r.Context().Err() != nil {
			p.end()
		}
		return
	}
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	n := 0
	var err error
	for {
		var msg string
		if msg, err = readGRPC(r.Body); err != nil {
			break
		}
		n++
		w.Write(grpcFrame(fmt.Sprintf("echo %d: %s", n, msg)))
		rc.Flush()
	}
	if !errors.Is(err, io.EOF) {
		w.Header().Set("Grpc-Status", "13")
		w.Header().Set("Grpc-Message", "reading the stream: "+err.Error())
		return
	}
	w.Header().Set("Grpc-Status", "3")
	w.Header().Set("Grpc-Message", fmt.Sprintf("%d messages", n))
	w.Header().Set(http.TrailerPrefix+"X-Saw-Checksum", r.Trailer.Get("X-Checksum"))
}

// grpcReq is a gRPC call's request for method with body.
func grpcReq(t *testing.T, ctx context.Context, method string, body io.Reader) *http.Request {
	req := newReq(t, ctx, "POST", "https://grpc.test.local/echo.Echo/"+method, body)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	return req
}

// Four bidirectional streams at once on one connection, each in lockstep
// (a message sent only once the previous one's answer came back, so
// nothing can be batched on the way), then the client's trailers to the
// host and the host's status trailers back to the client as HTTP/2
// trailers.
func (e *h2Env) testGRPC(t *testing.T) {
	tr, dials := e.client(t, "grpc.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	// One call first: a transport dials for each request that finds no
	// connection yet, and the streams must share one.
	warm := roundTrip(t, tr, grpcReq(t, ctx, "Fail", nil))
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	const streams = 4
	errs := make(chan error, streams)
	for i := range streams {
		req := grpcReq(t, ctx, "Chat", nil)
		go func() { errs <- grpcChat(tr, req, fmt.Sprint(i)) }()
	}
	for range streams {
		if err := <-errs; err != nil { // each call ends with ctx at the latest
			t.Error(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the streams took %d connections, want 1", n)
	}
}

// grpcChat runs one lockstep Chat of three messages on req (its body is
// set here), tagged with id.
func grpcChat(tr *http.Transport, req *http.Request, id string) error {
	pr, pw := io.Pipe()
	defer pw.Close()
	req.Body, req.ContentLength = pr, -1
	req.Trailer = http.Header{"X-Checksum": nil}
	type answer struct {
		res *http.Response
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		res, err := tr.RoundTrip(req)
		answers <- answer{res, err}
	}()
	var res *http.Response
	for i := 1; i <= 3; i++ {
		if _, err := pw.Write(grpcFrame(fmt.Sprintf("msg %s.%d", id, i))); err != nil {
			return fmt.Errorf("stream %s: sending message %d: %w", id, i, err)
		}
		if res == nil {
			a := <-answers // RoundTrip ends with the request's context at the latest
			if a.err != nil {
				return fmt.Errorf("stream %s: %w", id, a.err)
			}
			res = a.res
			defer res.Body.Close()
			if res.StatusCode != 200 || res.ProtoMajor != 2 || res.Header.Get("Content-Type") != "application/grpc" {
				return fmt.Errorf("stream %s: answer %s %d %v", id, res.Proto, res.StatusCode, res.Header)
			}
		}
		got, err := readGRPC(res.Body)
		if want := fmt.Sprintf("echo %d: msg %s.%d", i, id, i); err != nil || got != want {
			return fmt.Errorf("stream %s: answer %d %q, %v; want %q", id, i, got, err, want)
		}
	}
	req.Trailer.Set("X-Checksum", "c-"+id)
	pw.Close()
	if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
		return fmt.Errorf("stream %s: after the last answer: %q, %v", id, rest, err)
	}
	want := map[string]string{"Grpc-Status": "3", "Grpc-Message": "3 messages", "X-Saw-Checksum": "c-" + id}
	for k, v := range want {
		if got := res.Trailer.Values(k); len(got) != 1 || got[0] != v || res.Header.Get(k) != "" {
			return fmt.Errorf("stream %s: %s is %q in the trailers, %q in the header; want %q in the trailers only", id, k, got, res.Header.Get(k), v)
		}
	}
	return nil
}

// Full duplex in bulk to the h2c host: 8 MiB sent while the host sends
// every chunk back as it reads it, so both directions' windows cross the
// gateway at once; the echo must be byte-exact.
func (e *h2Env) testGRPCDuplex(t *testing.T) {
	tr, _ := e.client(t, "grpc.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2BulkWait)
	defer cancel()
	const n = 8 << 20
	res := roundTrip(t, tr, grpcReq(t, ctx, "Pipe", pseudoRandom(9, n)))
	defer res.Body.Close()
	got, sum, err := sumOf(res.Body)
	if _, want, _ := sumOf(pseudoRandom(9, n)); err != nil || sum != want {
		t.Errorf("echo of %d bytes: %d bytes, %v, SHA-256 %s; want %s", n, got, err, sum, want)
	}
}

// A trailers-only error keeps its status in the header block; a host that
// resets its stream mid-answer resets the client's too: the client sees
// an error where the body ends, never a clean end of a cut answer.
func (e *h2Env) testGRPCErrors(t *testing.T) {
	tr, dials := e.client(t, "grpc.test.local", "h2")
	ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
	defer cancel()
	res := roundTrip(t, tr, grpcReq(t, ctx, "Fail", bytes.NewReader(grpcFrame("x"))))
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(b) != 0 || res.StatusCode != 200 || res.Header.Get("Grpc-Status") != "5" || res.Header.Get("Grpc-Message") != "not found" {
		t.Errorf("trailers-only: %d %v %q %v", res.StatusCode, res.Header, b, err)
	}
	res = roundTrip(t, tr, grpcReq(t, ctx, "Abort", bytes.NewReader(grpcFrame("x"))))
	b, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || string(b) != string(grpcFrame("partial")) {
		t.Errorf("host reset mid-answer: %q, %v; want the first message, then an error", b, err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the calls took %d connections, want 1", n)
	}
}
