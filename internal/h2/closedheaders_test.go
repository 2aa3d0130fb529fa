package h2

import (
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestHeadersOnClosedStream: a HEADERS frame on a stream that is closed
// is answered as RFC 9113 §5.1 says for how it closed. After the client's
// RST_STREAM it is a stream error of type STREAM_CLOSED (RST_STREAM, the
// connection going on), whether the stream's handler still runs or has
// returned; after both sides' END_STREAM, a connection error of type
// STREAM_CLOSED (GOAWAY). A stream never opened, its id skipped, is an
// unexpected stream identifier (§5.1.1): PROTOCOL_ERROR, as before. Both
// closed cases were answered GOAWAY PROTOCOL_ERROR, and the first lost
// the client its connection for an error that was the stream's alone.
func TestHeadersOnClosedStream(t *testing.T) {
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
		{"after the client's RST_STREAM, its handler running", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, false, reqFields("POST", "/stay")...)
			waitEntered(t, entered)
			_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		}, []string{"RST_STREAM 1 STREAM_CLOSED", "alive"}},
		{"after the client's RST_STREAM, its handler returned", func(t *testing.T, rc *rawClient, s *Server, entered <-chan struct{}) {
			rc.headers(1, false, reqFields("POST", "/")...)
			waitEntered(t, entered)
			_ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
			waitHandlers(t, s) // the stream is dropped
		}, []string{"RST_STREAM 1 STREAM_CLOSED", "alive"}},
		{"never opened", func(t *testing.T, rc *rawClient, s *Server, _ <-chan struct{}) {
			rc.headers(3, true, get...)
			rc.until("stream 3's end", endOf(3))
			waitHandlers(t, s)
		}, []string{"GOAWAY PROTOCOL_ERROR"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			entered, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				if r.Method != http.MethodPost {
					return
				}
				if r.URL.Path == "/stay" {
					<-release // past its reset, as a handler may run on
					return
				}
				<-r.Context().Done()
			})
			s, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			tt.open(t, rc, s, entered)
			rc.headers(1, true, get...)
			_ = rc.fr.WritePing(false, probe)
			for _, want := range tt.want {
				if got := rc.verdict(); got != want {
					t.Fatalf("got %s, want %s", got, want)
				}
			}
		})
	}
}

func waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
}
