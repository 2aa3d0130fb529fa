package h2

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestStreamingClientWithUpdatesAndPings: a client reading a long
// response of small messages (server-sent events, a gRPC server stream)
// updates its windows as it reads and, as gRPC's clients estimate the
// bandwidth-delay product, sends a PING whenever DATA comes and none of
// its PINGs is unanswered, and a WINDOW_UPDATE with each answer. The
// stream makes progress all along: it must end whole, however many
// frames it took, never in GOAWAY.
func TestStreamingClientWithUpdatesAndPings(t *testing.T) {
	t.Parallel()
	const messages = 30000
	msg := strings.Repeat("m", 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		for range messages {
			if _, err := io.WriteString(w, msg); err != nil {
				return
			}
			f.Flush()
		}
	})
	_, dial := serveTLS(t, Options{Handler: h})
	for _, tt := range []struct {
		name    string
		pings   bool // BDP PINGs
		perData bool // a stream and a connection update for each DATA frame
		// a PING for each DATA frame, answered or not: the most BDP
		// PINGs come to, when the round trip is shorter than the time
		// between two frames
		pingEach bool
	}{
		{"updates for each DATA frame", false, true, false},
		{"BDP pings", true, false, false},
		{"BDP pings and updates", true, true, false},
		{"a PING for each DATA frame", true, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			// A gRPC call: its message in a body, so that the handler is
			// not run on the reading goroutine (inline.go) and PINGs are
			// answered at once.
			rc.headers(1, false, reqFields("POST", "/")...)
			if err := rc.fr.WriteData(1, true, []byte("call")); err != nil {
				t.Fatal(err)
			}
			got, unacked, pinging, pings := 0, 0, false, 0
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				f, err := rc.next()
				if err != nil {
					t.Fatalf("after %d bytes and %d PINGs: %v", got, pings, err)
				}
				switch f := f.(type) {
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY %v after %d bytes and %d PINGs", f.ErrCode, got, pings)
				case *http2.RSTStreamFrame:
					t.Fatalf("RST_STREAM %v after %d bytes", f.ErrCode, got)
				case *http2.PingFrame:
					if f.IsAck() {
						pinging = false
						if tt.pings { // a larger window for the estimate
							_ = rc.fr.WriteWindowUpdate(0, 1)
						}
					}
				case *http2.DataFrame:
					n := len(f.Data())
					got += n
					unacked += n
					if tt.perData && n > 0 || unacked >= 16<<10 { // gRPC's: a quarter of the window
						_ = rc.fr.WriteWindowUpdate(1, uint32(unacked))
						_ = rc.fr.WriteWindowUpdate(0, uint32(unacked))
						unacked = 0
					}
					if tt.pings && (!pinging || tt.pingEach) {
						pinging = true
						pings++
						_ = rc.fr.WritePing(false, [8]byte{'b', 'd', 'p'})
					}
					if f.StreamEnded() {
						if got != messages*len(msg) {
							t.Fatalf("got %d bytes, want %d", got, messages*len(msg))
						}
						t.Logf("%d PINGs", pings)
						return
					}
				}
			}
			t.Fatal("the stream did not end in time")
		})
	}
}

// TestPingFloodsBounded: the allowance of PINGs (pingsFree) is paid for
// by DATA the client is sent. Without any, a flood of PINGs while a
// handler waits is counted past the hundred and ends in GOAWAY
// ENHANCE_YOUR_CALM; alongside a download, one of twenty PINGs for each
// DATA frame read is too.
func TestPingFloodsBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			<-hold
			return
		}
		for range 8 << 10 { // 8 MiB, in 1 KiB messages
			if _, err := w.Write(make([]byte, 1<<10)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	_, dial := serveTLS(t, Options{Handler: h})
	t.Cleanup(func() { close(hold) }) // before the server's Close, which waits for handlers
	t.Run("no DATA", func(t *testing.T) {
		rc := dial()
		rc.headers(1, true, reqFields("GET", "/wait")...)
		flood(t, rc, pingsFree+3*maxEmptyFrames, func(i int) error { return rc.fr.WritePing(false, [8]byte{byte(i >> 8), byte(i)}) },
			http2.ErrCodeEnhanceYourCalm, "the flood of PINGs was not bounded")
	})
	t.Run("twenty for each DATA frame", func(t *testing.T) {
		rc := dial()
		rc.headers(1, true, reqFields("GET", "/")...)
		frames := 0
		for frames < 1<<20 { // bounded: the download is 8192 frames or so
			f, err := rc.next()
			if err != nil {
				t.Fatalf("after %d DATA frames: %v", frames, err)
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				if f.ErrCode != http2.ErrCodeEnhanceYourCalm {
					t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", f.ErrCode)
				}
				return
			case *http2.DataFrame:
				frames++
				if f.StreamEnded() {
					t.Fatalf("%d PINGs for %d DATA frames went uncounted", 20*frames, frames)
				}
				if n := uint32(len(f.Data())); n > 0 {
					_ = rc.fr.WriteWindowUpdate(1, n)
					_ = rc.fr.WriteWindowUpdate(0, n)
				}
				for i := range 20 {
					_ = rc.fr.WritePing(false, [8]byte{byte(i)})
				}
			}
		}
	})
}
