package edge

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestH2ResponseWithinClientWindow: a response far larger than the
// client's window (SETTINGS_INITIAL_WINDOW_SIZE 1024, the connection's
// left at 65,535), which the client reopens DATA frame by DATA frame,
// arrives complete and byte-exact, and no DATA frame ever goes past the
// stream's or the connection's window.
func TestH2ResponseWithinClientWindow(t *testing.T) {
	const window = 1024
	payload := make([]byte, 200<<10)
	_, _ = rand.Read(payload)
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(payload)
		})})
		cl := dialRawH2(t, e.https, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
		cl.headers(1, request("GET", "/"), true)
		var (
			body            []byte
			frames, largest int
			streamW, connW  = window, 65535
			status          string
			ended           bool
		)
		for !ended {
			f, err := cl.read()
			if err != nil {
				t.Fatalf("after %d of %d bytes: %v", len(body), len(payload), err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = cl.fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				status, ended = f.PseudoValue("status"), f.StreamEnded()
			case *http2.RSTStreamFrame, *http2.GoAwayFrame:
				t.Fatalf("after %d bytes: %v", len(body), f)
			case *http2.DataFrame:
				n := len(f.Data())
				body = append(body, f.Data()...)
				frames, largest, ended = frames+1, max(largest, n), f.StreamEnded()
				streamW -= int(f.Length)
				connW -= int(f.Length)
				if streamW < 0 || connW < 0 {
					t.Fatalf("DATA of %d bytes past the window: stream %d, connection %d", f.Length, streamW, connW)
				}
				if f.Length > 0 && !ended {
					_ = cl.fr.WriteWindowUpdate(1, f.Length)
					_ = cl.fr.WriteWindowUpdate(0, f.Length)
					streamW += int(f.Length)
					connW += int(f.Length)
				}
			}
		}
		if status != "200" || !bytes.Equal(body, payload) {
			t.Fatalf("status %q, %d bytes, byte-exact %v; want 200 and %d bytes", status, len(body), bytes.Equal(body, payload), len(payload))
		}
		if largest > window {
			t.Fatalf("a DATA frame of %d bytes, over the %d-byte window", largest, window)
		}
		t.Logf("%d bytes in %d DATA frames of at most %d", len(body), frames, largest)
	})
}

// TestH2UploadWithinServerWindow: a client that respects the server's
// advertised windows uploads a body several times larger than them; the
// server reopens its windows as the application reads, and the
// application gets every byte.
func TestH2UploadWithinServerWindow(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			fmt.Fprintf(w, "%d %x %v", n, h.Sum(nil), err)
		})})
		cl := dialRawH2(t, e.https)
		streamW := int(cl.setting(http2.SettingInitialWindowSize))
		connW := 65535 // the connection's window starts at 65,535 whatever SETTINGS say
		payload := make([]byte, 2*streamW+12345)
		_, _ = rand.Read(payload)
		sum := sha256.Sum256(payload)
		t.Logf("uploading %d bytes; the server's stream window is %d", len(payload), streamW)
		cl.headers(1, request("POST", "/"), false)
		for sent := 0; sent < len(payload); {
			if n := min(16384, streamW, connW, len(payload)-sent); n > 0 {
				cl.data(1, payload[sent:sent+n], sent+n == len(payload))
				sent, streamW, connW = sent+n, streamW-n, connW-n
				continue
			}
			// Both windows shut: only the server's WINDOW_UPDATE opens them.
			f, err := cl.read()
			if err != nil {
				t.Fatalf("window shut after %d of %d bytes, and no WINDOW_UPDATE: %v", sent, len(payload), err)
			}
			switch f := f.(type) {
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					connW += int(f.Increment)
				} else if f.StreamID == 1 {
					streamW += int(f.Increment)
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = cl.fr.WriteSettingsAck()
				}
			case *http2.RSTStreamFrame, *http2.GoAwayFrame, *http2.MetaHeadersFrame:
				t.Fatalf("after %d bytes: %v", sent, f)
			}
		}
		res := cl.response(1, true)
		want := fmt.Sprintf("%d %s <nil>", len(payload), hex.EncodeToString(sum[:]))
		if res.status != "200" || string(res.body) != want {
			t.Fatalf("got %s %q, want 200 %q", res.status, res.body, want)
		}
	})
}

// TestH2DataBeyondServerWindow: a client that sends more DATA than the
// server's window allows, to a handler that reads none of it, gets a
// FLOW_CONTROL_ERROR (RST_STREAM, or GOAWAY if the connection's window
// gave first; RFC 9113 §6.9.1): the server buffers no more than it
// advertised, and the handler's request is cancelled.
func TestH2DataBeyondServerWindow(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		cancelled := make(chan error, 1)
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select { // reads nothing
			case <-r.Context().Done():
				cancelled <- r.Context().Err()
			case <-time.After(10 * time.Second):
				cancelled <- nil
			}
		})})
		cl := dialRawH2(t, e.https)
		window := int(cl.setting(http2.SettingInitialWindowSize))
		cl.headers(1, request("POST", "/"), false)
		chunk := make([]byte, 16384)
		for sent := 0; sent <= window; sent += len(chunk) {
			if err := cl.fr.WriteData(1, false, chunk); err != nil {
				break // the server may have closed the connection already
			}
		}
		res := cl.response(1, false)
		stream := res.reset && res.rstCode == http2.ErrCodeFlowControl
		conn := res.goaway && res.goCode == http2.ErrCodeFlowControl
		if !stream && !conn {
			t.Fatalf("%d bytes past a %d-byte window: want FLOW_CONTROL_ERROR, got %+v", len(chunk), window, res)
		}
		select {
		case err := <-cancelled:
			if err == nil {
				t.Fatal("the handler's context was not cancelled")
			}
		case <-time.After(rawH2ReadWait):
			t.Fatal("the handler's context was not cancelled")
		}
	})
}

// TestH2WindowUpdateErrors: a WINDOW_UPDATE that takes a window past
// 2^31-1 is a FLOW_CONTROL_ERROR, of the connection (GOAWAY) or of the
// stream (RST_STREAM), and one of zero a PROTOCOL_ERROR (RFC 9113
// §6.9.1, §6.9); the stream's handler is cancelled.
func TestH2WindowUpdateErrors(t *testing.T) {
	cases := []struct {
		name   string
		stream uint32
		incr   uint32
		code   http2.ErrCode
	}{
		{"connection overflow", 0, 1<<31 - 1, http2.ErrCodeFlowControl},
		{"stream overflow", 1, 1<<31 - 1, http2.ErrCodeFlowControl},
		{"connection zero", 0, 0, http2.ErrCodeProtocol},
		{"stream zero", 1, 0, http2.ErrCodeProtocol},
	}
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		cancelled := make(chan error, len(cases))
		e := impl.start(t, Options{Handler: c.counting(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
				cancelled <- r.Context().Err()
			case <-time.After(10 * time.Second):
				cancelled <- nil
			}
		})})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := c.n.Load()
				cl := dialRawH2(t, e.https)
				cl.headers(1, request("POST", "/"), false) // open, its handler waiting
				testutil.WaitFor(t, rawH2ReadWait, func() bool { return c.n.Load() > before }, "the handler was not called")
				cl.fr.AllowIllegalWrites = true // a zero increment
				if err := cl.fr.WriteWindowUpdate(tc.stream, tc.incr); err != nil {
					t.Fatal(err)
				}
				var res h2Resp
				if tc.stream == 0 {
					res = cl.drain(1)
					if !res.goaway || res.goCode != tc.code {
						t.Fatalf("want GOAWAY %v, got %+v", tc.code, res)
					}
				} else {
					res = cl.response(1, true)
					if !res.reset || res.rstCode != tc.code {
						t.Fatalf("want RST_STREAM %v, got %+v", tc.code, res)
					}
				}
				select {
				case err := <-cancelled:
					if err == nil {
						t.Fatal("the handler's context was not cancelled")
					}
				case <-time.After(rawH2ReadWait):
					t.Fatal("the handler's context was not cancelled")
				}
			})
		}
	})
}

// TestH2Trailers: trailers the handler declares, or adds with
// http.TrailerPrefix, reach the client in a trailing HEADERS frame, and
// the trailers a client sends after its body reach the handler.
func TestH2Trailers(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			w.Header().Set("Trailer", "X-Sum")
			fmt.Fprintf(w, "%s|%s|%v", b, r.Trailer.Get("X-Req"), err)
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		})})
		cl := dialRawH2(t, e.https)
		cl.headers(1, request("POST", "/", [2]string{"trailer", "x-req"}), false)
		cl.data(1, []byte("abc"), false)
		cl.headers(1, [][2]string{{"x-req", "sent after the body"}}, true)
		res := cl.response(1, true)
		if res.status != "200" || string(res.body) != "abc|sent after the body|<nil>" {
			t.Fatalf("request trailer: %s %q", res.status, res.body)
		}
		if res.trailer.Get("X-Sum") != "42" || res.trailer.Get("X-Late") != "late" {
			t.Fatalf("response trailers %v, want X-Sum 42 and X-Late late", res.trailer)
		}
		if res.header.Get("X-Sum") != "" {
			t.Fatalf("the trailer went out with the header: %v", res.header)
		}
	})
}

// TestH2ResponsesWithoutContent: a response to HEAD, a 204 and a 304
// carry no DATA (RFC 9110 §6.4.1), whatever the handler writes; a
// Content-Length the handler sets goes out with a body of that length.
func TestH2ResponsesWithoutContent(t *testing.T) {
	cases := []struct {
		method, path string
		status       string
		body         string
		length       string // content-length header, "" for none checked
	}{
		{"HEAD", "/", "200", "", ""},
		{"HEAD", "/length", "200", "", "5"},
		{"GET", "/204", "204", "", ""},
		{"GET", "/304", "304", "", ""},
		{"GET", "/length", "200", "hello", "5"},
	}
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/204":
				w.WriteHeader(http.StatusNoContent)
			case "/304":
				w.WriteHeader(http.StatusNotModified)
			case "/length":
				w.Header().Set("Content-Length", "5")
			}
			_, _ = io.WriteString(w, "hello")
		})})
		cl := dialRawH2(t, e.https)
		for i, tc := range cases {
			id := uint32(2*i + 1)
			cl.headers(id, request(tc.method, tc.path), true)
			res := cl.response(id, true)
			if res.status != tc.status || string(res.body) != tc.body || !res.ended {
				t.Errorf("%s %s: %s %q (ended %v), want %s %q", tc.method, tc.path, res.status, res.body, res.ended, tc.status, tc.body)
			}
			if tc.body == "" && res.datas != 0 {
				t.Errorf("%s %s: %d DATA frames, want none", tc.method, tc.path, res.datas)
			}
			if tc.length != "" && res.header.Get("Content-Length") != tc.length {
				t.Errorf("%s %s: content-length %q, want %q", tc.method, tc.path, res.header.Get("Content-Length"), tc.length)
			}
		}
	})
}
