package edge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestH2ControlFrames: PING is answered with an ACK carrying the same
// payload, SETTINGS with an ACK; frames of an unknown type (on the
// connection and on a stream) and PRIORITY frames are ignored (RFC 9113
// §4.1, §5.3.2): the connection goes on serving.
func TestH2ControlFrames(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(okHandler)})
		cl := dialRawH2(t, e.https)

		payload := [8]byte{'g', 'a', 't', 'e', 0, 1, 2, 3}
		if err := cl.fr.WritePing(false, payload); err != nil {
			t.Fatal(err)
		}
		if err := cl.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384}); err != nil {
			t.Fatal(err)
		}
		var pinged, settled bool
		for !pinged || !settled {
			f, err := cl.read()
			if err != nil {
				t.Fatalf("PING acked %v, SETTINGS acked %v: %v", pinged, settled, err)
			}
			switch f := f.(type) {
			case *http2.PingFrame:
				if !f.IsAck() || f.Data != payload {
					t.Fatalf("PING answered with %+v, want an ACK of %v", f, payload)
				}
				pinged = true
			case *http2.SettingsFrame:
				settled = settled || f.IsAck()
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY %v", f.ErrCode)
			}
		}

		if err := cl.fr.WriteRawFrame(0xfa, 0x5, 0, []byte("unknown on the connection")); err != nil {
			t.Fatal(err)
		}
		if err := cl.fr.WriteRawFrame(0xfb, 0x1, 1, []byte("unknown on an idle stream")); err != nil {
			t.Fatal(err)
		}
		if err := cl.fr.WritePriority(3, http2.PriorityParam{StreamDep: 0, Weight: 200}); err != nil {
			t.Fatal(err)
		}
		if res := cl.get(1, "/"); res.status != "200" || string(res.body) != "ok" || res.goaway {
			t.Fatalf("after unknown and PRIORITY frames: %+v", res)
		}
		cl.headers(5, request("POST", "/"), false)
		if err := cl.fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 7, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
		if err := cl.fr.WriteRawFrame(0xfc, 0, 5, []byte("unknown on an open stream")); err != nil {
			t.Fatal(err)
		}
		cl.data(5, []byte("x"), true)
		if res := cl.response(5, true); res.status != "200" || res.goaway {
			t.Fatalf("stream 5, reprioritized: %+v", res)
		}
	})
}

// TestH2StreamIDRules: a client stream with an even id, one with an id
// lower than one it already opened, and a stream id used again are
// connection errors (RFC 9113 §5.1.1: PROTOCOL_ERROR; for a closed
// stream §5.1 also allows STREAM_CLOSED): GOAWAY and the connection
// closes, and the application never sees the offending request.
func TestH2StreamIDRules(t *testing.T) {
	cases := []struct {
		name  string
		first uint32 // a good GET first, 0 for none
		bad   uint32
		codes []http2.ErrCode
	}{
		{"even id", 0, 2, []http2.ErrCode{http2.ErrCodeProtocol}},
		{"lower than a previous id", 5, 3, []http2.ErrCode{http2.ErrCodeProtocol}},
		{"id used again", 1, 1, []http2.ErrCode{http2.ErrCodeProtocol, http2.ErrCodeStreamClosed}},
	}
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var bad calls // the offending requests' handler calls
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/bad" {
				bad.enter()
				bad.exit()
			}
			okHandler(w, r)
		})})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // each waits out its connection's close
				cl := dialRawH2(t, e.https)
				if tc.first != 0 {
					if res := cl.get(tc.first, "/"); res.status != "200" {
						t.Fatalf("first stream: %+v", res)
					}
				}
				cl.headers(tc.bad, request("GET", "/bad"), true)
				res := cl.drain(tc.bad)
				if !res.goaway || !slices.Contains(tc.codes, res.goCode) {
					t.Fatalf("want GOAWAY %v, got %+v", tc.codes, res)
				}
				if res.status != "" {
					t.Fatalf("stream %d answered %s", tc.bad, res.status)
				}
				if n := bad.n.Load(); n != 0 {
					t.Fatalf("the handler saw %d offending requests", n)
				}
			})
		}
	})
}

// TestH2MaxConcurrentStreams: a client that opens more streams at once
// than the server's SETTINGS_MAX_CONCURRENT_STREAMS, against handlers
// that block, never gets more handlers running than advertised; each
// stream over the limit is refused with RST_STREAM (PROTOCOL_ERROR or
// REFUSED_STREAM, RFC 9113 §5.1.2) or, if the server queues it, served
// once handlers return; every stream within the limit is served.
func TestH2MaxConcurrentStreams(t *testing.T) {
	const extra = 10
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		release := make(chan struct{})
		e := impl.start(t, Options{Handler: c.counting(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "ok")
		})})
		cl := dialRawH2(t, e.https)
		limit := int(cl.setting(http2.SettingMaxConcurrentStreams))
		if limit > 1000 {
			t.Fatalf("MAX_CONCURRENT_STREAMS %d: the test opens limit+%d streams", limit, extra)
		}
		total := limit + extra
		block := cl.block(request("GET", "/"))
		for i := range total {
			id := uint32(2*i + 1)
			if err := cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
		}
		// Resets of streams over the limit come while handlers block.
		refused := map[uint32]http2.ErrCode{}
		served := map[uint32]bool{}
		testutil.WaitFor(t, rawH2ReadWait, func() bool { return c.running.Load() >= int64(limit) }, "the advertised streams are not all running")
		for quiet := false; len(refused) < extra && !quiet; {
			_ = cl.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			f, err := cl.fr.ReadFrame()
			switch {
			case isTimeout(err):
				quiet = true // a server that queues the rest
			case err != nil:
				t.Fatalf("connection ended: %v", err)
			default:
				if rst, ok := f.(*http2.RSTStreamFrame); ok {
					refused[rst.StreamID] = rst.ErrCode
				}
			}
		}
		if p := c.peak.Load(); p > int64(limit) {
			t.Fatalf("%d handlers at once, over the %d streams advertised", p, limit)
		}
		close(release)
		for len(refused)+len(served) < total {
			f, err := cl.read()
			if err != nil {
				t.Fatalf("%d served, %d refused of %d: %v", len(served), len(refused), total, err)
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				refused[f.StreamID] = f.ErrCode
			case *http2.DataFrame:
				if f.StreamEnded() {
					served[f.StreamID] = true
				}
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					served[f.StreamID] = true
				}
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY %v", f.ErrCode)
			}
		}
		for id, code := range refused {
			if code != http2.ErrCodeProtocol && code != http2.ErrCodeRefusedStream {
				t.Fatalf("stream %d reset with %v", id, code)
			}
			if id <= uint32(2*limit) {
				t.Fatalf("stream %d, within the limit, was refused", id)
			}
		}
		if p := c.peak.Load(); p > int64(limit) {
			t.Fatalf("%d handlers at once, over the %d streams advertised", p, limit)
		}
		t.Logf("limit %d: %d served, %d refused (%v), at most %d handlers at once", limit, len(served), len(refused), refused[uint32(2*total-1)], c.peak.Load())
	})
}

// TestH2GracefulDrain: when the Edge's Run context ends while a stream is
// in flight, the client gets a GOAWAY, the stream in flight completes, a
// stream opened after the GOAWAY is not served (the application never
// sees it), and the connection then closes.
func TestH2GracefulDrain(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		entered, release := make(chan struct{}), make(chan struct{})
		var after calls
		e := impl.start(t, Options{DrainTimeout: 20 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/after" {
				after.enter()
				after.exit()
				_, _ = io.WriteString(w, "served after GOAWAY")
				return
			}
			c.enter()
			defer c.exit()
			close(entered)
			select { // held until released, or the connection is cut
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "done")
		})})
		cl := dialRawH2(t, e.https)
		cl.headers(1, request("GET", "/slow"), true)
		select {
		case <-entered:
		case <-time.After(rawH2ReadWait):
			t.Fatal("the slow request did not start")
		}
		e.cancel() // drain starts
		var goaway *http2.GoAwayFrame
		for goaway == nil {
			f, err := cl.read()
			if err != nil {
				t.Fatalf("no GOAWAY once drain started: %v", err)
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				goaway = g
			}
		}
		if goaway.ErrCode != http2.ErrCodeNo {
			t.Fatalf("GOAWAY %v, want NO_ERROR", goaway.ErrCode)
		}
		cl.headers(3, request("GET", "/after"), true)
		close(release)
		res := cl.response(1, true)
		if res.status != "200" || string(res.body) != "done" {
			t.Fatalf("the stream in flight: %+v", res)
		}
		late := cl.drain(3)
		if late.status != "" || after.n.Load() != 0 {
			t.Fatalf("a stream opened after GOAWAY (last stream %d) was served: %+v, %d calls", goaway.LastStreamID, late, after.n.Load())
		}
		select {
		case err := <-e.done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			e.done <- nil // for start's cleanup
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after the drain")
		}
	})
}

// TestH2ClientCancelCancelsHandler: RST_STREAM CANCEL from the client
// cancels the handler's request context, whether the handler waits
// after the request ended or in the middle of reading its body (whose
// read then fails).
func TestH2ClientCancelCancelsHandler(t *testing.T) {
	type outcome struct{ ctx, body error }
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		entered := make(chan struct{}, 1)
		out := make(chan outcome, 1)
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			var o outcome
			if r.URL.Path == "/body" {
				_, o.body = io.Copy(io.Discard, r.Body) // never ends cleanly
			}
			select {
			case <-r.Context().Done():
				o.ctx = r.Context().Err()
			case <-time.After(10 * time.Second):
			}
			out <- o
		})})
		for _, path := range []string{"/wait", "/body"} {
			t.Run(path[1:], func(t *testing.T) {
				cl := dialRawH2(t, e.https)
				cl.headers(1, request("POST", path), path == "/wait")
				if path == "/body" {
					cl.data(1, []byte("part of a body"), false)
				}
				select {
				case <-entered:
				case <-time.After(rawH2ReadWait):
					t.Fatal("the handler did not start")
				}
				if err := cl.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
					t.Fatal(err)
				}
				select {
				case o := <-out:
					if !errors.Is(o.ctx, context.Canceled) {
						t.Fatalf("handler context: %v, want canceled", o.ctx)
					}
					if path == "/body" && o.body == nil {
						t.Fatal("the body read ended cleanly after the client's RST_STREAM")
					}
				case <-time.After(rawH2ReadWait):
					t.Fatal("the handler's context was not cancelled")
				}
			})
		}
	})
}
