package h2

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// takeWakes sums the wake-ups of take on s's connections.
func takeWakes(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for cn := range s.conns {
		cn.mu.Lock()
		n += cn.takeWakes
		cn.mu.Unlock()
	}
	return n
}

// TestConnWindowUpdateWakesOne: with many streams waiting for the
// connection's window, a WINDOW_UPDATE on the connection must cost a
// wake-up or so, not one per stream: a client sending WINDOW_UPDATE(0, 1)
// over and over would otherwise buy O(streams) work for 13 bytes. The
// bytes still go out, one stream after another.
func TestConnWindowUpdateWakesOne(t *testing.T) {
	const streams, updates, each = 50, 100, 64 << 10
	body := bytes.Repeat([]byte("x"), each)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	s, addr := serve(t, Options{Handler: h})
	// Streams' windows wide open: only the connection's (65535) holds
	// them back.
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	for i := range streams {
		rc.headers(uint32(2*i+1), true, reqFields("GET", "/")...)
	}
	got := 0
	rc.until("the connection's first window", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			got += len(d.Data())
		}
		return got == 65535
	})
	time.Sleep(100 * time.Millisecond) // every handler reaches its wait
	before := takeWakes(s)
	for i := range updates {
		if err := rc.fr.WriteWindowUpdate(0, 1); err != nil {
			t.Fatal(err)
		}
		rc.until("the byte the update lets through", func(f http2.Frame) bool {
			d, ok := f.(*http2.DataFrame)
			if !ok || len(d.Data()) == 0 { // a stream's empty END_STREAM
				return false
			}
			if len(d.Data()) != 1 {
				t.Fatalf("update %d: %d bytes for a window of 1", i, len(d.Data()))
			}
			return true
		})
	}
	if woke := takeWakes(s) - before; woke > 3*updates {
		t.Fatalf("%d WINDOW_UPDATEs of the connection woke writers %d times (%d streams waiting)", updates, woke, streams)
	}
}
