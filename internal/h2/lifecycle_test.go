package h2

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestShutdownGoawayNamesTheLastStream: on Shutdown a client is told,
// in one GOAWAY NO_ERROR, the last stream the server took; those streams
// finish (a request body still on its way included), a stream opened
// after is refused with REFUSED_STREAM (never served, so the client may
// retry it elsewhere), and the connection closes once they are done.
func TestShutdownGoawayNamesTheLastStream(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var served atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		<-release
		_, _ = fmt.Fprintf(w, "%s %s", r.URL.Path, b)
	})
	s, dial := serveTLS(t, Options{Handler: h})
	rc := dial()
	rc.headers(1, true, reqFields("GET", "/one")...)
	rc.headers(3, false, reqFields("POST", "/three")...)
	_ = rc.fr.WritePing(false, probe)
	if got := rc.verdict(); got != "alive" {
		t.Fatalf("before Shutdown: %s", got)
	}
	for served.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	var g *http2.GoAwayFrame
	for g == nil {
		f, err := rc.next()
		if err != nil {
			t.Fatal(err)
		}
		g, _ = f.(*http2.GoAwayFrame)
	}
	if g.LastStreamID != 3 || g.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY last %d %v, want 3 NO_ERROR", g.LastStreamID, g.ErrCode)
	}
	rc.headers(5, true, reqFields("GET", "/five")...)
	_ = rc.fr.WriteData(3, true, []byte("body"))
	if got := rc.answer(5); got != "RST_STREAM REFUSED_STREAM" {
		t.Fatalf("stream 5 after GOAWAY: %s, want RST_STREAM REFUSED_STREAM", got)
	}
	close(release)
	bodies := map[uint32]string{}
	for {
		f, err := rc.next()
		if err != nil {
			break // the connection closed
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			bodies[f.StreamID] += string(f.Data())
		case *http2.RSTStreamFrame:
			t.Errorf("RST_STREAM %d %v while draining", f.StreamID, f.ErrCode)
		}
	}
	if bodies[1] != "/one " || bodies[3] != "/three body" || len(bodies) != 2 {
		t.Errorf("responses while draining: %v", bodies)
	}
	if n := served.Load(); n != 2 {
		t.Errorf("%d requests served, want 2", n)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// TestShutWindowClientLetGo: a client that opens streams and never opens
// its window (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE) holds a
// handler, with what it has written, for WriteStall at most: each stream
// is reset (CANCEL) and its handler returns; the connection, idle then,
// is told to go away and closed after IdleTimeout.
func TestShutWindowClientLetGo(t *testing.T) {
	t.Parallel()
	var running atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Add(-1)
		_, _ = w.Write(make([]byte, 256<<10))
	})
	_, dial := serveTLS(t, Options{Handler: h, WriteStall: 300 * time.Millisecond, IdleTimeout: 500 * time.Millisecond})
	rc := dial()
	if err := rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	const streams = 5
	for i := range streams {
		rc.headers(uint32(1+2*i), true, reqFields("GET", "/")...)
	}
	start := time.Now()
	resets, goaway := 0, false
	for {
		f, err := rc.next()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeCancel {
				t.Errorf("stream %d reset %v, want CANCEL", f.StreamID, f.ErrCode)
			}
			resets++
		case *http2.GoAwayFrame:
			goaway = true
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				t.Errorf("stream %d: %d bytes of DATA with no window", f.StreamID, len(f.Data()))
			}
		}
	}
	if resets != streams || !goaway {
		t.Errorf("%d streams reset, GOAWAY %v; want %d and a GOAWAY", resets, goaway, streams)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the connection closed after %v", d)
	}
	if n := running.Load(); n != 0 {
		t.Errorf("%d handlers still running", n)
	}
}
