package h2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestWindowUpdateFloodsBounded: a WINDOW_UPDATE on an open stream, or on
// the connection, costs the server a frame's parse and a lock, as a PING
// does, and a client may send them whether or not the server sends it
// anything (CVE-2019-9511..9518's family). Past a small allowance, and
// ten for each DATA frame the server has sent (Envoy's bound), they count
// against the bound on frames without progress: a client sending 1-byte
// updates while its handler waits is told to go away (GOAWAY
// ENHANCE_YOUR_CALM) after a bounded number, not read for ever.
func TestWindowUpdateFloodsBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold })
	_, dial := serveTLS(t, Options{Handler: h})
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for handlers
	for _, id := range []uint32{0, 1} {
		t.Run(fmt.Sprint("stream ", id), func(t *testing.T) {
			rc := dial()
			rc.headers(1, true, reqFields("GET", "/")...) // open, its handler waiting
			flood(t, rc, windowUpdatesFree+3*maxEmptyFrames, func(int) error { return rc.fr.WriteWindowUpdate(id, 1) },
				http2.ErrCodeEnhanceYourCalm, "the flood of WINDOW_UPDATEs was not bounded")
		})
	}
}

// TestLargeDownloadsWithSmallWindows: Go's HTTP/2 client (net/http's,
// x/net's bundled) downloading 8 MiB sends a WINDOW_UPDATE for the
// stream and one for the connection each time it has read 4 KiB, or
// half its window when that is smaller: up to eight for each 16 KiB
// DATA frame, read 4 KiB at a time, and one or two per frame when the
// window holds less than a frame. It goes on updating a stream's window
// after the server has ended the stream, as it reads the rest: up to
// its 4 MiB window's worth, a thousand updates a download, which four
// downloads at once used to send within a second, each one counted as a
// frame without progress, and the connection was told to go away
// mid-body. Thousands of them: it must never meet the bound on
// WINDOW_UPDATEs (TestWindowUpdateFloodsBounded), whatever its windows
// and the size of its reads.
func TestLargeDownloadsWithSmallWindows(t *testing.T) {
	t.Parallel()
	const size = 8 << 20
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	_, addr := serve(t, Options{Handler: h})
	for _, tt := range []struct {
		name       string
		conf       *http.HTTP2Config
		read       int // the size of the client's reads
		concurrent int // downloads at once on the connection
	}{
		{"default windows, 4 KiB reads", nil, 4 << 10, 1},
		{"default windows, 1 KiB reads", nil, 1 << 10, 1},
		{"default windows, 4 at once", nil, 4 << 10, 4},
		{"16 KiB stream window", &http.HTTP2Config{MaxReceiveBufferPerStream: 16 << 10}, 4 << 10, 1},
		{"4 KiB stream window", &http.HTTP2Config{MaxReceiveBufferPerStream: 4 << 10}, 1 << 10, 1},
		{"64 KiB windows", &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}, 4 << 10, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each its own client and connection
			tr := &http.Transport{Protocols: new(http.Protocols), HTTP2: tt.conf}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
			var wg sync.WaitGroup
			errs := make(chan error, tt.concurrent)
			for range tt.concurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- download(c, "http://"+addr+"/", tt.read, size)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// download reads url's body read bytes at a time and checks its size.
func download(c *http.Client, url string, read, size int) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := make([]byte, read)
	got := 0
	for {
		n, err := io.ReadFull(resp.Body, buf)
		got += n
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", got, err)
		}
	}
	if got != size {
		return fmt.Errorf("got %d bytes, want %d", got, size)
	}
	return nil
}
