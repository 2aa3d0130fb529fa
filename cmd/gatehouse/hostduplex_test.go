package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
)

// TestSidecarEarlyHeadKeepsTheWholeUpload: an app that sends its
// answer's head before it reads the upload (and then streams, as
// Node's servers and a full-duplex Go handler may) gets the client's
// upload whole through the sidecar over HTTP/1.1. net/http's server reads
// and throws away up to 256 KiB of what is left of a request body as a
// handler's head goes out, unless the handler works in full duplex: the
// sidecar, still copying the upload to the app as it copies the answer
// back, lost those bytes, a gap in a chunked upload, the end of one of
// known length (the app's request then cut); and it held the head until
// those bytes came, from a client that may wait for the head first.
func TestSidecarEarlyHeadKeepsTheWholeUpload(t *testing.T) {
	t.Parallel()
	const first = 64 << 10 // sent before the head can come back
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The app's own server would throw bytes away too.
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		_, _ = fmt.Fprintf(w, "%d %x %v", n, h.Sum(nil), err)
	}))
	t.Cleanup(app.Close)
	up, err := url.Parse(app.URL)
	if err != nil {
		t.Fatal(err)
	}
	tm := sidecarTimeouts{readHeader: time.Minute, idle: time.Minute, stall: time.Minute}
	addr := runSidecar(t, sidecarProxy(up, host.SchemeHTTP, slog.New(slog.DiscardHandler)), host.SchemeHTTP, tm)

	for _, c := range []struct {
		name  string
		size  int64
		known bool // Content-Length, not chunked
	}{
		{"chunked", 1 << 20, false},
		// What is left at the head under 256 KiB: net/http reads it all.
		{"of known length", 192 << 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			upload := make([]byte, c.size)
			for i := range upload {
				upload[i] = byte(i * 7 / 5)
			}
			want := fmt.Sprintf("%d %x <nil>", len(upload), sha256.Sum256(upload))
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			// The rest of the upload after the answer's head came, or
			// after a while: a client may wait for the head before it
			// sends more (a stream both ways), and a sidecar that held
			// the head until more of the upload came must fail the
			// test, not hang it.
			head := make(chan struct{})
			headFirst := make(chan bool, 1)
			pr, pw := io.Pipe()
			go func() {
				if _, err := pw.Write(upload[:first]); err != nil {
					return
				}
				select {
				case <-head:
					headFirst <- true
				case <-time.After(5 * time.Second):
					headFirst <- false
				case <-ctx.Done():
				}
				_, _ = pw.Write(upload[first:])
				_ = pw.Close()
			}()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/upload", pr)
			if err != nil {
				t.Fatal(err)
			}
			if c.known {
				req.ContentLength = c.size
			}
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetHTTP1(true)
			defer tr.CloseIdleConnections()
			res, err := tr.RoundTrip(req)
			close(head)
			if err != nil {
				pr.CloseWithError(err)
				t.Fatalf("an upload to an app that answers early: %v", err)
			}
			if !<-headFirst {
				t.Errorf("the app's early head reached the client only after the rest of the upload was sent")
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			pr.CloseWithError(io.ErrClosedPipe)
			if res.StatusCode != http.StatusOK || string(b) != want || err != nil {
				t.Errorf("what the app got of an upload it answered early: %d %q %v, want 200 %q", res.StatusCode, b, err, want)
			}

			// The upload was read to its end: the connection serves the
			// next request.
			var reused bool
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
			req, err = http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, "http://"+addr+"/again", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			res, err = tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err = io.ReadAll(res.Body)
			res.Body.Close()
			if want := fmt.Sprintf("1 %x <nil>", sha256.Sum256([]byte("x"))); res.StatusCode != http.StatusOK || string(b) != want || err != nil || !reused {
				t.Errorf("the next request: %d %q %v on a connection reused: %t, want 200 %q on the same", res.StatusCode, b, err, reused, want)
			}
		})
	}
}
