package h2

import (
	"net/http"
	"testing"

	"golang.org/x/net/http2"
)

// TestDataOnClosedStream: a DATA frame on a stream that is closed is
// answered as a HEADERS frame there is (TestHeadersOnClosedStream), as
// RFC 9113 §5.1 says for how it closed. After both sides' END_STREAM, a
// connection error of type STREAM_CLOSED (GOAWAY), whatever window other
// streams left for DATA in flight; after the client's END_STREAM alone
// (half-closed), or its RST_STREAM, a stream error STREAM_CLOSED, that
// window or not; on a stream the server ended before the client did, the
// body in flight is ignored. The first case was a stream error, and the
// second and the last reset one ignored.
func TestDataOnClosedStream(t *testing.T) {
	t.Parallel()
	get := reqFields("GET", "/")
	for _, tt := range []struct {
		name string
		// open opens stream 1 and closes it, with entered told when its
		// handler runs; s is the server.
		open func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{})
		want []string // the verdicts, in order
	}{
		{"after both END_STREAMs", func(t *testing.T, rc *rawClient, s *Server, _ <-chan struct{}) {
			rc.headers(1, true, get...)
			rc.until("stream 1's end", endOf(1))
			waitHandlers(t, s) // the stream is dropped
		}, []string{"GOAWAY STREAM_CLOSED"}},
		{"after both END_STREAMs, a window left for other streams", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, true, get...)
			rc.until("stream 1's end", endOf(1))
			waitEntered(t, entered)
			// Answered before its body: the body's window is left for
			// DATA in flight on closed streams.
			rc.headers(3, false, reqFields("POST", "/early")...)
			rc.until("the RST_STREAM after the answer", func(f http2.Frame) bool {
				r, ok := f.(*http2.RSTStreamFrame)
				return ok && r.StreamID == 3
			})
			waitHandlers(t, s)
		}, []string{"GOAWAY STREAM_CLOSED"}},
		{"after the client's END_STREAM, its handler running", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, true, reqFields("GET", "/stay")...)
			waitEntered(t, entered)
		}, []string{"RST_STREAM 1 STREAM_CLOSED", "alive"}},
		{"after the client's RST_STREAM, its handler running", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, false, reqFields("POST", "/stay")...)
			waitEntered(t, entered)
			_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		}, []string{"RST_STREAM 1 STREAM_CLOSED", "alive"}},
		{"after the client's RST_STREAM, its handler returned", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, false, reqFields("POST", "/")...)
			waitEntered(t, entered)
			_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			waitHandlers(t, s)
		}, []string{"RST_STREAM 1 STREAM_CLOSED", "alive"}},
		{"after the client's RST_STREAM, its handler returned, a window left for other streams", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, false, reqFields("POST", "/")...)
			waitEntered(t, entered)
			// Answered before its body: the body's window is left for
			// DATA in flight on closed streams, none of it stream 1's.
			rc.headers(3, false, reqFields("POST", "/early")...)
			rc.until("the RST_STREAM after the answer", func(f http2.Frame) bool {
				r, ok := f.(*http2.RSTStreamFrame)
				return ok && r.StreamID == 3
			})
			_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			waitHandlers(t, s)
		}, []string{"RST_STREAM 1 STREAM_CLOSED", "alive"}},
		{"ended by the server first", func(t *testing.T, rc *rawClient, s *Server, _ <-chan struct{}) {
			rc.headers(1, false, reqFields("POST", "/early")...)
			rc.until("the RST_STREAM after the answer", func(f http2.Frame) bool {
				r, ok := f.(*http2.RSTStreamFrame)
				return ok && r.StreamID == 1
			})
			waitHandlers(t, s)
		}, []string{"alive"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			entered, release := make(chan struct{}, 2), make(chan struct{})
			defer close(release)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				switch {
				case r.URL.Path == "/stay":
					<-release // past its reset, as a handler may run on
				case r.URL.Path == "/early":
					w.WriteHeader(http.StatusRequestEntityTooLarge) // the body unread
				case r.Method == http.MethodPost:
					<-r.Context().Done()
				}
			})
			s, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			tt.open(t, rc, s, entered)
			if err := rc.fr.WriteData(1, false, []byte("x")); err != nil {
				t.Fatal(err)
			}
			_ = rc.fr.WritePing(false, probe)
			for _, want := range tt.want {
				if got := rc.verdict(); got != want {
					t.Fatalf("got %s, want %s", got, want)
				}
			}
		})
	}
}
