package testutil

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// H2Windows speaks HTTP/2 on c, a new connection to a server (past TLS,
// if any), and returns the receive windows the server advertises before
// it answers anything: a stream's (its SETTINGS_INITIAL_WINDOW_SIZE) and
// the connection's (65,535 and its WINDOW_UPDATEs on stream 0, RFC 9113
// §6.9.2). It sends the client preface, SETTINGS and a PING and reads up
// to the PING's ack, which a server writes after its own first frames. A
// failure fails t. The caller closes c.
func H2Windows(t testing.TB, c net.Conn) (stream, conn int64) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WritePing(false, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	stream, conn = 65535, 65535
	for pinged := false; !pinged; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the server's first frames (windows so far: a stream's %d, the connection's %d): %v", stream, conn, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				stream = int64(v)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn += int64(f.Increment)
			}
		case *http2.PingFrame:
			pinged = f.IsAck()
		}
	}
	return stream, conn
}

// HeldUpload is the case a connection's receive window larger than a
// stream's is for: on one HTTP/2 connection (a browser puts all its
// requests to the gateway on one, the gateway all its requests to a host
// on one), an upload whose handler takes none of it and keeps its
// request open, and another upload beside it, which must still be
// answered. With a connection's window no larger than a stream's, the
// held stream's unread bytes fill it and the other upload cannot send a
// byte.
//
// Its ServeHTTP is the handler behind the server under test: /hold takes
// none of its upload and answers once Run is done (or its request ends);
// /count reads its upload and answers its length, or 408 and the read's
// error. Make one with NewHeldUpload, and call Run once.
type HeldUpload struct {
	// Stopped reports whether the held upload has taken all the window
	// it will ever get, given its request as ServeHTTP got it and the
	// bytes the client has taken from its body. Nil means that count
	// has not changed for 250 ms.
	Stopped func(held *http.Request, taken int64) bool

	held    chan *http.Request
	release chan struct{}
}

// NewHeldUpload returns a HeldUpload whose ServeHTTP is ready to serve.
func NewHeldUpload() *HeldUpload {
	return &HeldUpload{held: make(chan *http.Request, 1), release: make(chan struct{})}
}

func (h *HeldUpload) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/hold":
		h.held <- r
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	case "/count":
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		_, _ = fmt.Fprint(w, n)
	}
}

// HeldUploadResult is what Run saw once the upload beside the held one
// was answered.
type HeldUploadResult struct {
	Proto     string // that answer's protocol
	Taken     int64  // bytes taken from the held upload's body by then
	HeldEnded bool   // the held upload's request had ended by then
	HeldErr   error  // the held upload's request's error, once Run released it
}

// Run posts an endless upload to base+"/hold" with roundTrip and, once
// ServeHTTP has it and it has stopped (see Stopped), 256 KiB to
// base+"/count", and fails t unless that is answered 200 with its
// length. roundTrip must put both on one connection. Before it returns,
// on a failure too, Run releases the held request and waits for it.
// Each wait is bounded by 20 s.
func (h *HeldUpload) Run(t testing.TB, roundTrip func(*http.Request) (*http.Response, error), base string) (res HeldUploadResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var up zeros
	heldDone := make(chan error, 1)
	go func() { heldDone <- post(ctx, roundTrip, base+"/hold", &up) }()
	defer func() {
		close(h.release)
		if !res.HeldEnded {
			res.HeldErr = <-heldDone
		}
	}()
	var held *http.Request
	select {
	case held = <-h.held:
	case <-ctx.Done():
		t.Fatal("the held upload's handler never ran")
	}
	stopped := h.Stopped
	if stopped == nil {
		stopped = unchangedFor(250 * time.Millisecond)
	}
	for !stopped(held, up.n.Load()) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("the held upload never took all the window it can get: %d bytes taken from it", up.n.Load())
		}
	}

	const size = 256 << 10
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/count", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := roundTrip(req)
	if err != nil {
		t.Fatalf("an upload beside a held one (%d bytes taken from that one's body): %v", up.n.Load(), err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("an upload beside a held one (%d bytes taken from that one's body): %d, its body: %v", up.n.Load(), resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(size) {
		t.Fatalf("an upload beside a held one (%d bytes taken from that one's body): %d %.80q after %v, want 200 %q",
			up.n.Load(), resp.StatusCode, got, time.Since(start).Round(time.Millisecond), fmt.Sprint(size))
	}
	res.Proto, res.Taken = resp.Proto, up.n.Load()
	select {
	case res.HeldErr = <-heldDone:
		res.HeldEnded = true
	default:
	}
	return res
}

// post posts body to url with roundTrip and closes the answer's body.
func post(ctx context.Context, roundTrip func(*http.Request) (*http.Response, error), url string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := roundTrip(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// unchangedFor is a HeldUpload.Stopped that holds once the count taken
// has not changed for d.
func unchangedFor(d time.Duration) func(*http.Request, int64) bool {
	last, since := int64(-1), time.Now()
	return func(_ *http.Request, taken int64) bool {
		if taken != last {
			last, since = taken, time.Now()
		}
		return time.Since(since) >= d
	}
}

// zeros is an endless upload that counts the bytes taken from it.
type zeros struct{ n atomic.Int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}
