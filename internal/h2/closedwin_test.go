package h2

import (
	"errors"
	"net/http"
	"os"
	"sync"
	"testing"

	"golang.org/x/net/http2"
)

// TestBankedClosedWindowBounded: DATA a client had in flight on streams
// the server ended before the client ended them is ignored as far as
// their windows go (closedWin), neither answered nor counted. A client
// may leave the body of many requests unsent, each answered at once, and
// bank a window for each: a megabyte apiece, which it may later spend
// on small DATA frames on those closed streams that the server parses
// and gives the window back for, uncounted. Nothing legitimate is in
// flight past the connection's window (RFC 9113 §6.9: more is a
// FLOW_CONTROL_ERROR), so the allowance goes no further: past it, DATA
// on closed streams counts as frames without progress do, and the
// client is told to go away.
func TestBankedClosedWindowBounded(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}) // the body unread
	_, dial := serveTLS(t, Options{Handler: h})
	rc := dial()
	const banked = 8 // streams, a window each: 8 MiB without the bound
	for i := range banked {
		id := uint32(1 + 2*i)
		rc.headers(id, false, reqFields("POST", "/")...)
		// Its RST_STREAM NO_ERROR (RFC 9113 §8.1) follows the stream's
		// window's banking.
		rc.until("the RST_STREAM after the answer", func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id
		})
	}
	// Spend it on stream 1, closed: 1 KiB frames, within the connection's
	// window as the server gives it back, past that window by twice the
	// flood bound, well within the bank.
	const frame = 1 << 10
	n := connWindow/frame + 2*maxEmptyFrames
	if n*frame >= banked*streamWindow {
		t.Fatal("the test spends more than it banked")
	}
	credit := make(chan int64, 1024)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		win := int64(connWindow) // 65,535 and the server's first WINDOW_UPDATE
		payload := make([]byte, frame)
		for range n {
			for win < frame {
				select {
				case c := <-credit:
					win += c
				case <-quit:
					return
				}
			}
			if rc.fr.WriteData(1, false, payload) != nil {
				return
			}
			win -= frame
		}
		_ = rc.fr.WritePing(false, probe)
	}()
	defer wg.Wait()
	defer close(quit)
	defer rc.c.Close() // ends the sender's writes, if they block
	for {
		f, err := rc.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the server stalled")
		}
		if err != nil {
			return // closed: a reset can come before the GOAWAY is read
		}
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				credit <- int64(f.Increment)
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", f.ErrCode)
			}
			return
		case *http2.PingFrame:
			if f.IsAck() && f.Data == probe {
				t.Fatalf("%d KiB of DATA on a closed stream went uncounted", n)
			}
		}
	}
}

// TestBankedTrailersCounted: the trailers a client may still send on
// streams the server ended first (closedHeads) bank up as their windows
// do, one a stream, unbounded; but each is counted as a frame without
// progress when it comes, bank or not: what the bank spares is a GOAWAY
// PROTOCOL_ERROR, not the flood bound. A client that banked more than the
// bound and sends them all is told to go away as any flood is.
func TestBankedTrailersCounted(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	_, dial := serveTLS(t, Options{Handler: h})
	rc := dial()
	banked := maxEmptyFrames + maxEmptyFrames/2
	for i := range banked {
		id := uint32(1 + 2*i)
		rc.headers(id, false, reqFields("POST", "/")...)
		rc.until("the RST_STREAM after the answer", func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id
		})
	}
	flood(t, rc, banked, func(i int) error { return rc.writeHeaders(uint32(1+2*i), "x-sum", "1") },
		http2.ErrCodeEnhanceYourCalm, "banked trailers went uncounted")
}

// TestWindowInFlightOnClosedStreams: the bound on that allowance
// (TestBankedClosedWindowBounded) is no lower than what a client may
// have in flight: a client whose uploads on eight streams were all
// answered early, before it sent any of their bodies, may then send a
// whole connection window of DATA spread over them before it reads the
// answers. Every frame of it is ignored: no RST_STREAM, no GOAWAY.
func TestWindowInFlightOnClosedStreams(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	_, dial := serveTLS(t, Options{Handler: h})
	rc := dial()
	const streams = 8
	for i := range streams {
		id := uint32(1 + 2*i)
		rc.headers(id, false, reqFields("POST", "/")...)
		rc.until("the RST_STREAM after the answer", func(f http2.Frame) bool {
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id
		})
	}
	const frame = 1 << 10
	payload := make([]byte, frame)
	for i := range connWindow / frame { // the connection's window, all of it
		if err := rc.fr.WriteData(uint32(1+2*(i%streams)), false, payload); err != nil {
			t.Fatal(err)
		}
	}
	_ = rc.fr.WritePing(false, probe)
	if got := rc.verdict(); got != "alive" {
		t.Fatalf("got %s, want alive", got)
	}
}
