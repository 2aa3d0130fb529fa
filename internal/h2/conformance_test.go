package h2

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// probe is the PING payload that tells a case the connection still reads.
var probe = [8]byte{'p', 'r', 'o', 'b', 'e', '0', '0', '0'}

// verdict reads the server's frames until one decides the case: the
// first GOAWAY, the first RST_STREAM other than NO_ERROR, the ACK of the
// probe PING (the connection went on: "alive"), or the connection's end.
func (rc *rawClient) verdict() string {
	rc.t.Helper()
	for {
		f, err := rc.next()
		if err != nil {
			return "closed"
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeNo {
				return fmt.Sprintf("RST_STREAM %d %v", f.StreamID, f.ErrCode)
			}
		case *http2.PingFrame:
			if f.IsAck() && f.Data == probe {
				return "alive"
			}
		}
	}
}

// block encodes a header block with the client's encoder.
func (rc *rawClient) block(fields ...string) []byte {
	rc.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpackField(fields[i], fields[i+1]))
	}
	return append([]byte(nil), rc.hb.Bytes()...)
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// TestProtocolConformance: what RFC 9113 (and h2spec) says a server must
// answer to each protocol violation a client may commit, and that the
// connection goes on where the error is the stream's alone. Each case
// runs on a fresh connection over a real TLS handshake (ALPN h2).
func TestProtocolConformance(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold": // the stream stays open until reset
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(w, "%d", len(b))
		}
	})
	_, dial := serveTLS(t, Options{Handler: h})
	get := reqFields("GET", "/")
	hold := reqFields("POST", "/hold")
	for _, tt := range []struct {
		name string
		send func(rc *rawClient)
		want string
	}{
		// Frames on stream 0 that belong to a stream.
		{"DATA on stream 0", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FrameData, 0, 0, []byte("x")) }, "GOAWAY PROTOCOL_ERROR"},
		{"HEADERS on stream 0", func(rc *rawClient) {
			_ = rc.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 0, rc.block(get...))
		}, "GOAWAY PROTOCOL_ERROR"},
		{"PRIORITY on stream 0", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FramePriority, 0, 0, make([]byte, 5)) }, "GOAWAY PROTOCOL_ERROR"},
		{"RST_STREAM on stream 0", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FrameRSTStream, 0, 0, u32(8)) }, "GOAWAY PROTOCOL_ERROR"},
		// Frames on stream ids that are not stream 0's.
		{"SETTINGS on a stream", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FrameSettings, 0, 1, nil) }, "GOAWAY PROTOCOL_ERROR"},
		{"PING on a stream", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FramePing, 0, 1, make([]byte, 8)) }, "GOAWAY PROTOCOL_ERROR"},
		{"GOAWAY on a stream", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FrameGoAway, 0, 1, make([]byte, 8)) }, "GOAWAY PROTOCOL_ERROR"},
		// Idle streams.
		{"DATA on an idle stream", func(rc *rawClient) { _ = rc.fr.WriteData(3, true, []byte("x")) }, "GOAWAY PROTOCOL_ERROR"},
		{"RST_STREAM on an idle stream", func(rc *rawClient) { _ = rc.fr.WriteRSTStream(3, http2.ErrCodeCancel) }, "GOAWAY PROTOCOL_ERROR"},
		{"WINDOW_UPDATE on an idle stream", func(rc *rawClient) { _ = rc.fr.WriteWindowUpdate(3, 1) }, "GOAWAY PROTOCOL_ERROR"},
		{"CONTINUATION on an idle stream", func(rc *rawClient) {
			_ = rc.fr.WriteRawFrame(http2.FrameContinuation, http2.FlagContinuationEndHeaders, 3, rc.block(get...))
		}, "GOAWAY PROTOCOL_ERROR"},
		// A stream the server would open (an even id) is idle whatever
		// the client opened: the server opens none.
		{"DATA on an even stream", func(rc *rawClient) {
			rc.headers(5, true, get...)
			_ = rc.fr.WriteData(2, true, []byte("x"))
		}, "GOAWAY PROTOCOL_ERROR"},
		{"RST_STREAM on an even stream", func(rc *rawClient) {
			rc.headers(5, true, get...)
			_ = rc.fr.WriteRSTStream(2, http2.ErrCodeCancel)
		}, "GOAWAY PROTOCOL_ERROR"},
		{"WINDOW_UPDATE on an even stream", func(rc *rawClient) {
			rc.headers(5, true, get...)
			_ = rc.fr.WriteWindowUpdate(2, 1)
		}, "GOAWAY PROTOCOL_ERROR"},
		{"PRIORITY on an idle stream", func(rc *rawClient) {
			_ = rc.fr.WritePriority(3, http2.PriorityParam{StreamDep: 0, Weight: 15})
		}, "alive"},
		{"PRIORITY on its own stream", func(rc *rawClient) {
			_ = rc.fr.WritePriority(3, http2.PriorityParam{StreamDep: 3, Weight: 15})
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"HEADERS depending on itself", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: rc.block(get...), EndStream: true, EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 3, Weight: 15}})
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"PRIORITY of 4 bytes", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FramePriority, 0, 3, make([]byte, 4)) }, "GOAWAY FRAME_SIZE_ERROR"},
		{"even stream id", func(rc *rawClient) { rc.headers(2, true, get...) }, "GOAWAY PROTOCOL_ERROR"},
		// Half-closed (remote) and closed streams.
		{"DATA on a half-closed stream", func(rc *rawClient) {
			rc.headers(3, true, reqFields("GET", "/hold")...)
			_ = rc.fr.WriteData(3, true, []byte("x"))
		}, "RST_STREAM 3 STREAM_CLOSED"},
		{"HEADERS on a half-closed stream", func(rc *rawClient) {
			rc.headers(3, true, reqFields("GET", "/hold")...)
			rc.headers(3, true, "x-t", "1")
		}, "RST_STREAM 3 STREAM_CLOSED"},
		{"lower stream id after a higher", func(rc *rawClient) {
			rc.headers(5, true, get...)
			rc.headers(3, true, get...)
		}, "GOAWAY PROTOCOL_ERROR"},
		// SETTINGS out of range.
		{"ENABLE_PUSH 2", func(rc *rawClient) { _ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 2}) }, "GOAWAY PROTOCOL_ERROR"},
		{"INITIAL_WINDOW_SIZE 2^31", func(rc *rawClient) {
			_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, "GOAWAY FLOW_CONTROL_ERROR"},
		{"MAX_FRAME_SIZE 16383", func(rc *rawClient) {
			_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1<<14 - 1})
		}, "GOAWAY PROTOCOL_ERROR"},
		{"MAX_FRAME_SIZE 2^24", func(rc *rawClient) {
			_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 24})
		}, "GOAWAY PROTOCOL_ERROR"},
		{"SETTINGS of 5 bytes", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FrameSettings, 0, 0, make([]byte, 5)) }, "GOAWAY FRAME_SIZE_ERROR"},
		{"SETTINGS ACK with a payload", func(rc *rawClient) {
			_ = rc.fr.WriteRawFrame(http2.FrameSettings, http2.FlagSettingsAck, 0, make([]byte, 6))
		}, "GOAWAY FRAME_SIZE_ERROR"},
		{"unknown setting", func(rc *rawClient) { _ = rc.fr.WriteSettings(http2.Setting{ID: 0xff, Val: 1}) }, "alive"},
		// WINDOW_UPDATE (0 and overflow: internal/edge's TestH2WindowUpdateErrors).
		{"WINDOW_UPDATE of 3 bytes", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, make([]byte, 3)) }, "GOAWAY FRAME_SIZE_ERROR"},
		// Padding and windows.
		{"DATA padding past the payload", func(rc *rawClient) {
			rc.headers(3, false, hold...)
			_ = rc.fr.WriteRawFrame(http2.FrameData, http2.FlagDataPadded, 3, []byte{5, 'x'})
		}, "GOAWAY PROTOCOL_ERROR"},
		{"HEADERS padding past the payload", func(rc *rawClient) {
			_ = rc.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders, 3, append([]byte{200}, rc.block(get...)...))
		}, "GOAWAY PROTOCOL_ERROR"},
		// Header blocks.
		{"CONTINUATION after END_HEADERS", func(rc *rawClient) {
			rc.headers(3, false, hold...)
			_ = rc.fr.WriteContinuation(3, true, rc.block("x-a", "1"))
		}, "GOAWAY PROTOCOL_ERROR"},
		{"DATA inside a header block", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: rc.block(get...), EndStream: true})
			_ = rc.fr.WriteData(3, true, nil)
		}, "GOAWAY PROTOCOL_ERROR"},
		{"unknown frame inside a header block", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: rc.block(get...), EndStream: true})
			_ = rc.fr.WriteRawFrame(0xee, 0, 3, nil)
		}, "GOAWAY PROTOCOL_ERROR"},
		{"unknown frame type", func(rc *rawClient) { _ = rc.fr.WriteRawFrame(0xee, 0, 0, []byte("x")) }, "alive"},
		{"PUSH_PROMISE", func(rc *rawClient) {
			_ = rc.fr.WriteRawFrame(http2.FramePushPromise, http2.FlagPushPromiseEndHeaders, 1, u32(2))
		}, "GOAWAY PROTOCOL_ERROR"},
		// HPACK.
		{"table size update over the setting", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: append([]byte{0x3f, 0xe2, 0x1f}, rc.block(get...)...), EndStream: true, EndHeaders: true}) // 8192
		}, "GOAWAY COMPRESSION_ERROR"},
		{"table size update after a field", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: append(rc.block(get...), 0x20), EndStream: true, EndHeaders: true})
		}, "GOAWAY COMPRESSION_ERROR"},
		{"index past the tables", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0xff, 0x7f}, EndStream: true, EndHeaders: true})
		}, "GOAWAY COMPRESSION_ERROR"},
		{"index 0", func(rc *rawClient) {
			_ = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x80}, EndStream: true, EndHeaders: true})
		}, "GOAWAY COMPRESSION_ERROR"},
		// Malformed requests, as far as internal/edge's
		// TestH2MalformedRequestsNeverReachHandler does not take them.
		{"pseudo field in trailers", func(rc *rawClient) {
			rc.headers(3, false, hold...)
			rc.headers(3, true, ":path", "/x")
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"trailers without END_STREAM", func(rc *rawClient) {
			rc.headers(3, false, hold...)
			rc.headers(3, false, "x-t", "1")
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"CONNECT with a :path", func(rc *rawClient) {
			rc.headers(3, true, ":method", "CONNECT", ":authority", "a.example:443", ":path", "/", ":scheme", "https")
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"CONNECT without an :authority", func(rc *rawClient) { rc.headers(3, true, ":method", "CONNECT") }, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"extended CONNECT", func(rc *rawClient) {
			rc.headers(3, true, ":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":path", "/", ":authority", "a.example")
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"content-length over the DATA", func(rc *rawClient) {
			rc.headers(3, false, append(reqFields("POST", "/"), "content-length", "5")...)
			_ = rc.fr.WriteData(3, true, []byte("abc"))
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"content-length under the DATA", func(rc *rawClient) {
			rc.headers(3, false, append(reqFields("POST", "/"), "content-length", "2")...)
			_ = rc.fr.WriteData(3, true, []byte("abc"))
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
		{"content-length with HEADERS ending the stream", func(rc *rawClient) {
			rc.headers(3, true, append(reqFields("POST", "/"), "content-length", "2")...)
		}, "RST_STREAM 3 PROTOCOL_ERROR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			rc.fr.AllowIllegalWrites = true
			rc.headers(1, true, get...) // a stream served and closed first
			rc.until("stream 1's end", endOf(1))
			tt.send(rc)
			_ = rc.fr.WritePing(false, probe)
			if got := rc.verdict(); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func hpackField(name, value string) hpack.HeaderField {
	return hpack.HeaderField{Name: name, Value: value}
}

// TestContentLengthMismatchNoWholeBody: a request body that disagrees
// with its content-length (RFC 9113 §8.1.1) never reaches the handler as
// a whole body: its Read fails, so a proxy never sends the host a body
// of another length than the one it declared, whether the DATA falls
// short at END_STREAM, runs over, or is cut short by trailers.
func TestContentLengthMismatchNoWholeBody(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%q %v", b, err)
	})
	_, dial := serveTLS(t, Options{Handler: h})
	for _, tt := range []struct {
		name string
		send func(rc *rawClient)
	}{
		{"short at END_STREAM", func(rc *rawClient) {
			_ = rc.fr.WriteData(1, false, []byte("abc"))
			_ = rc.fr.WriteData(1, true, nil)
		}},
		{"over", func(rc *rawClient) {
			_ = rc.fr.WriteData(1, false, []byte("abcd"))
			_ = rc.fr.WriteData(1, true, []byte("efgh"))
		}},
		{"short at trailers", func(rc *rawClient) {
			_ = rc.fr.WriteData(1, false, []byte("abc"))
			rc.headers(1, true, "x-t", "1")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			rc.headers(1, false, append(reqFields("POST", "/"), "content-length", "5")...)
			tt.send(rc)
			if v := rc.verdict(); v != "RST_STREAM 1 PROTOCOL_ERROR" {
				t.Errorf("got %s, want RST_STREAM 1 PROTOCOL_ERROR", v)
			}
			select {
			case b := <-got:
				if strings.HasSuffix(b, " <nil>") {
					t.Errorf("the handler read a whole body: %s", b)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the handler's Read did not return")
			}
		})
	}
}

// TestPriorityOnItselfResetsAnOpenStream: a PRIORITY frame that makes an
// open stream depend on itself is a stream error (RFC 9113 §5.3.1): the
// RST_STREAM ends the stream for the client, so the server must end it
// too, its handler told (its context cancelled) and nothing more sent on
// it. Answering with the RST_STREAM alone left the handler running and
// writing a response on a stream the client had been told was closed.
func TestPriorityOnItselfResetsAnOpenStream(t *testing.T) {
	t.Parallel()
	cancelled := make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cancelled <- true
		case <-time.After(2 * time.Second):
			cancelled <- false
			_, _ = io.WriteString(w, "late")
		}
	})
	_, dial := serveTLS(t, Options{Handler: h})
	rc := dial()
	rc.headers(1, true, reqFields("GET", "/")...)
	if err := rc.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1, Weight: 15}); err != nil {
		t.Fatal(err)
	}
	if v := rc.verdict(); v != "RST_STREAM 1 PROTOCOL_ERROR" {
		t.Fatalf("got %s, want RST_STREAM 1 PROTOCOL_ERROR", v)
	}
	if !<-cancelled {
		t.Error("the handler of the reset stream was not told")
	}
	_ = rc.fr.WritePing(false, probe)
	for {
		f, err := rc.next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Header().StreamID == 1 {
			t.Errorf("%v frame on stream 1 after its RST_STREAM", f.Header().Type)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == probe {
			return
		}
	}
}

// TestFirstFrameNotSettings: the client's preface ends with a SETTINGS
// frame (RFC 9113 §3.4); any other first frame is a connection error
// PROTOCOL_ERROR, a GOAWAY before the close, whatever else is wrong with
// the frame, not a stream's reset followed by a bare close.
func TestFirstFrameNotSettings(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Handler: http.NotFoundHandler()})
	for _, tt := range []struct {
		name string
		send func(fr *http2.Framer)
	}{
		{"PING", func(fr *http2.Framer) { _ = fr.WritePing(false, probe) }},
		{"WINDOW_UPDATE of 0 on a stream", func(fr *http2.Framer) { _ = fr.WriteWindowUpdate(1, 0) }},
		{"HEADERS padded past its payload", func(fr *http2.Framer) {
			_ = fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders, 1, []byte{200, 0x82})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fr := http2.NewFramer(c, c)
			fr.AllowIllegalWrites = true
			if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			tt.send(fr)
			got := "closed without GOAWAY"
			for {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				f, err := fr.ReadFrame()
				if err != nil {
					break
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					got = "GOAWAY " + g.ErrCode.String()
					break
				}
			}
			if got != "GOAWAY PROTOCOL_ERROR" {
				t.Errorf("got %s, want GOAWAY PROTOCOL_ERROR", got)
			}
		})
	}
}
