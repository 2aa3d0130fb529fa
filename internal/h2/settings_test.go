package h2

import (
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestSettingsFrameBounded: a SETTINGS_INITIAL_WINDOW_SIZE changes the
// window of every open stream (RFC 9113 §6.9.2), and each one in a frame
// walked them all: a 16 KiB frame of 2,730 cost the server hundreds of
// thousands of window updates, a thousand such frames a second before
// the flood bound met them. No client needs more than a few settings in
// a frame: one with over 100 ends the connection (GOAWAY
// PROTOCOL_ERROR), as x/net's server has it. Up to that, a setting may
// come more than once (h2spec 6.5.3/1: taken in order).
func TestSettingsFrameBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	_, dial := serveTLS(t, Options{Handler: h})
	many := make([]http2.Setting, 2000)
	for i := range many {
		many[i] = http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(65535 + i%2)}
	}
	all := []http2.Setting{
		{ID: http2.SettingHeaderTableSize, Val: 4096},
		{ID: http2.SettingEnablePush, Val: 0},
		{ID: http2.SettingMaxConcurrentStreams, Val: 100},
		{ID: http2.SettingInitialWindowSize, Val: 1 << 20},
		{ID: http2.SettingMaxFrameSize, Val: 1 << 14},
		{ID: http2.SettingMaxHeaderListSize, Val: 1 << 16},
	}
	for _, tt := range []struct {
		name     string
		settings []http2.Setting
		want     string // "ACK", or the GOAWAY's code
		full     bool   // stream 1's window is at 2^31-1 first
	}{
		{"every setting once", all, "ACK", false},
		{"2000 settings", many, "PROTOCOL_ERROR", false},
		{"101 distinct ids", func() []http2.Setting {
			s := make([]http2.Setting, 101)
			for i := range s {
				s[i] = http2.Setting{ID: http2.SettingID(0x100 + i)} // unknown ids: ignored, one by one
			}
			return s
		}(), "PROTOCOL_ERROR", false},
		{"a setting twice", []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1}, {ID: http2.SettingInitialWindowSize, Val: 2}}, "ACK", false},
		{"100 initial window sizes", many[:100], "ACK", false},
		// Taken in order: a window over 2^31-1 at any of them is the
		// error, though the last would bring it back.
		{"a window over 2^31-1 on the way", []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 65536}, {ID: http2.SettingInitialWindowSize, Val: 65535}}, "FLOW_CONTROL_ERROR", true},
		{"a full window lowered", []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 65534}, {ID: http2.SettingInitialWindowSize, Val: 65535}}, "ACK", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := dial()
			// Streams open, for the window changes to walk.
			for id := uint32(1); id < 200; id += 2 {
				rc.headers(id, true, reqFields("GET", "/")...)
			}
			heads := 0
			rc.until("100 responses' heads", func(f http2.Frame) bool {
				if _, ok := f.(*http2.MetaHeadersFrame); ok {
					heads++
				}
				return heads == 100
			})
			if tt.full {
				if err := rc.fr.WriteWindowUpdate(1, 1<<31-1-65535); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if err := rc.fr.WriteSettings(tt.settings...); err != nil {
				t.Fatal(err)
			}
			_ = rc.fr.WritePing(false, [8]byte{1})
			for {
				f, err := rc.next()
				if errors.Is(err, os.ErrDeadlineExceeded) || err != nil && tt.want == "ACK" {
					t.Fatalf("%v, want %s", err, tt.want)
				}
				if err != nil {
					return // closed: a reset can come before the GOAWAY is read
				}
				switch f := f.(type) {
				case *http2.GoAwayFrame:
					if got := f.ErrCode.String(); got != tt.want {
						t.Fatalf("GOAWAY %s, want %s", got, tt.want)
					}
					return
				case *http2.PingFrame:
					if tt.want != "ACK" {
						t.Fatalf("the SETTINGS frame was taken (in %v), want GOAWAY %s", time.Since(start), tt.want)
					}
					return
				}
			}
		})
	}
}
