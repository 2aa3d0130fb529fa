package h2

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestFloodsOfRefusedFramesBounded: every frame that makes no request
// progress counts against the connection's bound on such frames
// (maxEmptyFrames a second), whatever part of the server refuses it. A
// header block refused as it is decoded (an uppercase name, a pseudo
// field after a regular one), a WINDOW_UPDATE of 0, an unsolicited
// SETTINGS ACK or a RST_STREAM on a stream already closed each cost the
// server a frame's work, most of them a RST_STREAM written back, exactly
// as the malformed requests refused after decoding (the control) do: a
// client sending nothing else is told to go away (GOAWAY
// ENHANCE_YOUR_CALM), not served RST_STREAMs for as long as it likes.
func TestFloodsOfRefusedFramesBounded(t *testing.T) {
	t.Parallel()
	_, dial := serveTLS(t, Options{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
	for _, tt := range []struct {
		name string
		// send writes the i-th frame of the flood.
		send func(rc *rawClient, i int) error
	}{
		{"missing :method (control)", func(rc *rawClient, i int) error {
			return rc.writeHeaders(uint32(3+2*i), ":scheme", "https", ":path", "/", ":authority", "a.example")
		}},
		{"uppercase field name", func(rc *rawClient, i int) error {
			return rc.writeHeaders(uint32(3+2*i), append(reqFields("GET", "/"), "X-Upper", "1")...)
		}},
		{"pseudo field after a regular one", func(rc *rawClient, i int) error {
			return rc.writeHeaders(uint32(3+2*i), append([]string{"x-a", "1"}, reqFields("GET", "/")...)...)
		}},
		{"WINDOW_UPDATE of 0 on a stream", func(rc *rawClient, _ int) error { return rc.fr.WriteWindowUpdate(1, 0) }},
		{"unsolicited SETTINGS ACK", func(rc *rawClient, _ int) error { return rc.fr.WriteSettingsAck() }},
		{"RST_STREAM on a closed stream", func(rc *rawClient, _ int) error { return rc.fr.WriteRSTStream(1, http2.ErrCodeCancel) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			// Stream 1 is served and closed first: the floods on it are
			// on a closed stream, not an idle one (a connection error).
			rc.headers(1, true, reqFields("GET", "/")...)
			rc.until("stream 1's end", endOf(1))
			rc.fr.AllowIllegalWrites = true // a WINDOW_UPDATE of 0
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 3 * maxEmptyFrames {
					if tt.send(rc, i) != nil {
						return
					}
				}
			}()
			defer wg.Wait()
			// Closing ends the flood's writes, if they block.
			defer rc.c.Close()
			for {
				f, err := rc.next()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("the flood was not bounded")
				}
				if err != nil {
					t.Fatalf("the connection ended with no GOAWAY: %v", err)
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
						t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
					}
					return
				}
			}
		})
	}
}

// writeHeaders is headers for a flood's goroutine: it returns the error
// rather than failing the test from there.
func (rc *rawClient) writeHeaders(id uint32, fields ...string) error {
	rc.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hb.Bytes(), EndStream: true, EndHeaders: true})
}

// TestFloodsOnAResetStreamBounded: a stream reset, by the client or the
// server, stays in the table while its handler runs on (one that does not
// watch its context, here), and frames on it change nothing more: a
// RST_STREAM again, or trailers after the server's reset. They count
// against the bound on frames without progress as those on a closed
// stream do, so a client repeating them is told to go away.
func TestFloodsOnAResetStreamBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold })
	_, dial := serveTLS(t, Options{Handler: h})
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for handlers
	for _, tt := range []struct {
		name string
		open func(t *testing.T, rc *rawClient) // leaves stream 1 reset, its handler running
		send func(rc *rawClient) error
	}{
		{"RST_STREAM again", func(t *testing.T, rc *rawClient) {
			rc.headers(1, true, reqFields("GET", "/")...)
			if err := rc.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		}, func(rc *rawClient) error { return rc.fr.WriteRSTStream(1, http2.ErrCodeCancel) }},
		{"trailers after the server's reset", func(t *testing.T, rc *rawClient) {
			rc.headers(1, false, reqFields("POST", "/", "content-length", "1")...)
			if err := rc.fr.WriteData(1, false, []byte("too long")); err != nil {
				t.Fatal(err)
			}
			rc.until("stream 1's reset", func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == 1 })
		}, func(rc *rawClient) error { return rc.writeHeaders(1, "x-t", "1") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			tt.open(t, rc)
			flood(t, rc, 3*maxEmptyFrames, func(int) error { return tt.send(rc) },
				http2.ErrCodeEnhanceYourCalm, "the flood was not bounded")
		})
	}
}

// TestStreamsAfterGoawayBounded: once the server has sent GOAWAY (its
// drain, or the client's own GOAWAY), each new stream is refused
// (REFUSED_STREAM) while the streams before it finish, and a header
// block decoded and a RST_STREAM written for each is work that makes no
// progress: a client opening stream after stream on a draining
// connection meets the flood bound as on any other.
func TestStreamsAfterGoawayBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold })
	_, dial := serveTLS(t, Options{Handler: h})
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for handlers
	rc := dial()
	rc.headers(1, true, reqFields("GET", "/")...) // held: the connection drains, not closes
	if err := rc.fr.WriteGoAway(0, http2.ErrCodeNo, nil); err != nil {
		t.Fatal(err)
	}
	rc.until("the server's GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	flood(t, rc, 3*maxEmptyFrames, func(i int) error { return rc.writeHeaders(uint32(3+2*i), reqFields("GET", "/")...) },
		http2.ErrCodeEnhanceYourCalm, "streams after GOAWAY were refused without bound")
}

// flood sends n frames by send from a goroutine while it reads the
// server's answers, until a GOAWAY, which must carry want: the server
// lingers after it, so that the client's unread frames do not have the
// socket reset it away. A read that times out means the server read on
// and on: unbounded fails the test.
func flood(t *testing.T, rc *rawClient, n int, send func(i int) error, want http2.ErrCode, unbounded string) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if send(i) != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	// Closing ends the flood's writes, if they block.
	defer rc.c.Close()
	for {
		f, err := rc.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(unbounded)
		}
		if err != nil {
			t.Fatalf("the connection ended with no GOAWAY %v: %v", want, err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != want {
				t.Fatalf("GOAWAY %v, want %v", g.ErrCode, want)
			}
			return
		}
	}
}

// TestDataOnClosedStreamsBounded: DATA on a stream the client may no
// longer send on (one it reset itself) is answered with RST_STREAM
// STREAM_CLOSED, a write for each frame (on one both ends ended, the
// first ends the connection: TestDataOnClosedStream). A byte of DATA
// makes no more request progress there than an empty frame does, and
// the window it takes is given back: a client sending nothing else
// would have the server write a frame, and flush it, for every ten
// bytes it sends, for as long as it likes. Such frames count against
// the bound on frames without progress; what a client had in flight
// when the server ended a stream early is not counted (see
// TestSmallFramesAfterEarlyAnswer).
func TestDataOnClosedStreamsBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-hold
		}
	})
	_, dial := serveTLS(t, Options{Handler: h})
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for handlers
	for _, tt := range []struct {
		name string
		open func(t *testing.T, rc *rawClient) // leaves stream 1 closed to the client
	}{
		{"a stream the client reset", func(t *testing.T, rc *rawClient) {
			rc.headers(1, false, reqFields("POST", "/hold")...)
			if err := rc.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			tt.open(t, rc)
			flood(t, rc, 20*maxEmptyFrames, func(int) error { return rc.fr.WriteData(1, false, []byte{'x'}) },
				http2.ErrCodeEnhanceYourCalm, "the flood was not bounded")
		})
	}
}

// TestBodyInFlightOnARefusedStream: a client whose stream is refused
// (REFUSED_STREAM, over SETTINGS_MAX_CONCURRENT_STREAMS here) may have
// sent its body, within the window, before it read the refusal: those
// frames are ignored, neither answered one by one nor counted as a
// flood, and the connection goes on.
func TestBodyInFlightOnARefusedStream(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold })
	_, dial := serveTLS(t, Options{Handler: h, MaxConcurrentStreams: 1})
	t.Cleanup(func() { close(hold) })
	rc := dial()
	rc.headers(1, true, reqFields("GET", "/")...)
	rc.headers(3, false, reqFields("POST", "/")...) // over the limit: refused
	msg := make([]byte, 100)
	for range 3 * maxEmptyFrames {
		if err := rc.fr.WriteData(3, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	_ = rc.fr.WritePing(false, probe)
	resets := 0
	for {
		f, err := rc.next()
		if err != nil {
			t.Fatalf("connection ended: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			resets++
		case *http2.PingFrame:
			if f.IsAck() && f.Data == probe {
				if resets != 1 {
					t.Errorf("%d RST_STREAMs, want 1 (the refusal)", resets)
				}
				return
			}
		}
	}
}

// TestWindowUpdatesOnAnOverflowedStreamBounded: a WINDOW_UPDATE that
// takes a stream's window over 2^31-1 resets it (FLOW_CONTROL_ERROR);
// the handler may run on a while, and the window stays over, so every
// WINDOW_UPDATE after on that stream, whatever its increment, was
// answered with another RST_STREAM. They change nothing: they count
// against the bound on frames without progress, and the stream is reset
// once.
func TestWindowUpdatesOnAnOverflowedStreamBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hold })
	_, dial := serveTLS(t, Options{Handler: h})
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for handlers
	rc := dial()
	rc.headers(1, true, reqFields("GET", "/")...)
	if err := rc.fr.WriteWindowUpdate(1, 1<<31-1); err != nil {
		t.Fatal(err)
	}
	rc.until("stream 1's reset", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == 1 && r.ErrCode == http2.ErrCodeFlowControl
	})
	flood(t, rc, 20*maxEmptyFrames, func(int) error { return rc.fr.WriteWindowUpdate(1, 1) },
		http2.ErrCodeEnhanceYourCalm, "the flood was not bounded")
}

// TestTrailersInFlightOnAClosedStream: a client uploading a body with
// trailers (a Go client's Request.Trailer) may have sent them before it
// read the server's early answer (RST_STREAM NO_ERROR after the response,
// RFC 9113 §8.1) or refusal. The server must ignore frames on a stream it
// reset (RFC 9113 §5.1), and the block is decoded either way (the HPACK
// table stays the client's): they are not a connection error that would
// cut every other request on the connection. A header block on a stream
// the client itself ended, or a second one, still is; one on a stream the
// client reset is that stream's error (STREAM_CLOSED, RFC 9113 §5.1).
func TestTrailersInFlightOnAClosedStream(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			<-r.Context().Done()
		case "/early":
			w.WriteHeader(http.StatusRequestEntityTooLarge) // the body unread
		}
	})
	_, dial := serveTLS(t, Options{Handler: h, MaxConcurrentStreams: 1})
	trailers := func(rc *rawClient, id uint32) {
		_ = rc.fr.WriteData(id, false, []byte("abc"))
		_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block("x-sum", "1"), EndStream: true, EndHeaders: true})
	}
	resetOf := func(id uint32) func(http2.Frame) bool {
		return func(f http2.Frame) bool {
			rst, ok := f.(*http2.RSTStreamFrame)
			return ok && rst.StreamID == id
		}
	}
	for _, tt := range []struct {
		name string
		send func(rc *rawClient)
		want string
	}{
		{"answered early", func(rc *rawClient) {
			rc.headers(1, false, reqFields("POST", "/early")...)
			rc.until("the RST_STREAM after the 413", resetOf(1)) // the stream is gone
			trailers(rc, 1)
		}, "alive"},
		{"refused over the limit", func(rc *rawClient) {
			rc.headers(1, true, reqFields("GET", "/hold")...)
			rc.headers(3, false, reqFields("POST", "/early")...)
			rc.until("the refusal", resetOf(3))
			trailers(rc, 3)
		}, "alive"},
		{"trailers twice", func(rc *rawClient) {
			rc.headers(1, false, reqFields("POST", "/early")...)
			rc.until("the RST_STREAM after the 413", resetOf(1))
			trailers(rc, 1)
			trailers(rc, 1)
		}, "GOAWAY PROTOCOL_ERROR"},
		{"a stream the client ended", func(rc *rawClient) {
			rc.headers(1, true, reqFields("GET", "/early")...)
			rc.until("the 413", endOf(1))
			rc.headers(1, true, "x-sum", "1")
		}, "GOAWAY"},
		{"a stream the client reset", func(rc *rawClient) {
			rc.headers(1, false, reqFields("POST", "/hold")...)
			_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			rc.headers(1, true, "x-sum", "1")
		}, "RST_STREAM 1 STREAM_CLOSED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			tt.send(rc)
			_ = rc.fr.WritePing(false, probe)
			if got := rc.verdict(); !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
