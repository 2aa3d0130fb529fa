package h2

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
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
	t.Parallel()
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

// pattern is stream-specific bytes: a response that arrives misordered,
// duplicated or cut shows up as a mismatch.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7 + i/251)
	}
	return b
}

// TestLargeResponsesUnderFlowControl: many streams write large responses
// at once, in writes of every size, one with a header block over the
// client's frame size and each with trailers, to a client that reads
// slowly with small windows: it shuts every stream's window with
// SETTINGS_INITIAL_WINDOW_SIZE 0 mid-response and opens them again, and
// resets some streams mid-send. Every other response arrives byte for
// byte, no frame is over SETTINGS_MAX_FRAME_SIZE, and afterwards the
// server's view of the connection's window is the client's: window a
// reset stream had reserved went back, none was lost.
func TestLargeResponsesUnderFlowControl(t *testing.T) {
	t.Parallel()
	const streams, maxFrame = 16, 20000
	size := func(id uint32) int { return 150<<10 + int(id)*997 }
	sizes := []int{1, 100, 4096, 5000, 17000, 70000, 3}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id int
		_, _ = fmt.Sscanf(r.URL.Path, "/%d", &id)
		body := pattern(id, size(uint32(id)))
		w.Header().Set("Trailer", "X-Len")
		if id == 3 {
			w.Header().Set("X-Big", strings.Repeat("b", 3*maxFrame)) // HEADERS and CONTINUATIONs
		}
		for i := 0; len(body) > 0; i++ {
			n := min(sizes[i%len(sizes)], len(body))
			if _, err := w.Write(body[:n]); err != nil {
				return
			}
			body = body[n:]
			if i%5 == 0 {
				w.(http.Flusher).Flush()
			}
		}
		w.Header().Set("X-Len", fmt.Sprint(size(uint32(id))))
	})
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr,
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxFrame})
	rc.fr.SetMaxReadFrameSize(maxFrame) // a larger frame fails the read
	for i := range streams {
		id := uint32(2*i + 1)
		rc.headers(id, true, reqFields("GET", fmt.Sprintf("/%d", id))...)
	}
	reset := map[uint32]bool{5: true, 13: true}
	bodies := map[uint32][]byte{}
	trailers := map[uint32]string{}
	connWin := int64(65535) // the server's send window, as the client counts it
	total, phase, acks := 0, 0, 0
	for done := 0; done < streams-len(reset); {
		f, err := rc.next()
		if err != nil {
			t.Fatalf("after %d bytes, %d streams done: %v", total, done, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() && !reset[f.StreamID] {
				trailers[f.StreamID] = f.PseudoValue("status") + "|" + headerValue(f, "x-len")
				done++
			} else if f.StreamID == 3 && len(headerValue(f, "x-big")) != 3*maxFrame {
				t.Fatalf("stream 3's large header: %d bytes", len(headerValue(f, "x-big")))
			}
		case *http2.DataFrame:
			n := int64(f.Header().Length)
			connWin -= n
			total += int(n)
			if !reset[f.StreamID] {
				bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
			}
			if n > 0 {
				// Give back slowly: the connection's window in pieces,
				// the stream's only while it is open to us.
				_ = rc.fr.WriteWindowUpdate(0, uint32(n))
				connWin += n
				if !reset[f.StreamID] && !f.StreamEnded() {
					_ = rc.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				}
			}
			if f.StreamEnded() && !reset[f.StreamID] {
				t.Fatalf("stream %d ended without its trailers", f.StreamID)
			}
		case *http2.RSTStreamFrame:
			if !reset[f.StreamID] {
				t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.SettingsFrame:
			if f.IsAck() {
				acks++
			}
		}
		switch {
		case phase == 0 && total > 300<<10:
			for id := range reset {
				_ = rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
			_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			phase++
		case phase == 1 && acks == 2: // the shut windows are in force: open them again
			_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 30000})
			phase++
		}
	}
	for i := range streams {
		id := uint32(2*i + 1)
		if reset[id] {
			continue
		}
		if want := pattern(int(id), size(id)); !bytes.Equal(bodies[id], want) {
			t.Errorf("stream %d: %d bytes, want %d, equal prefix %d", id, len(bodies[id]), len(want), commonPrefix(bodies[id], want))
		}
		if want := fmt.Sprintf("|%d", size(id)); trailers[id] != want {
			t.Errorf("stream %d: trailers %q, want %q", id, trailers[id], want)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); handlersRunning(s) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("handlers still running")
		}
	}
	// The client's updates are read by now: a PING's answer comes after them.
	_ = rc.fr.WritePing(false, [8]byte{1})
	rc.until("the PING's ACK", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	s.mu.Lock()
	for cn := range s.conns {
		cn.mu.Lock()
		if cn.sendWin != connWin {
			t.Errorf("the server's connection window is %d, the client's %d", cn.sendWin, connWin)
		}
		cn.mu.Unlock()
	}
	s.mu.Unlock()
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestRefusalsDoNotAddUpOverALifetime: a client that resets a stream
// has closed it (RFC 9113 §5.1), and may open another at once; while the
// reset stream's handler still runs, the server refuses it (REFUSED_STREAM,
// which the client retries). That is the client honouring the limit, and
// over a long-lived connection such refusals add up: they must not, past
// a lifetime total, end the connection as the rapid reset attack would.
func TestRefusalsDoNotAddUpOverALifetime(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	release, stop := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select { // a handler slow to notice its stream was reset
		case <-release:
		case <-stop:
		}
	})
	s, addr := serve(t, Options{Handler: h, MaxConcurrentStreams: 1})
	t.Cleanup(func() { close(stop) }) // before serve's: Close waits for handlers
	rc := dialRaw(t, addr)
	id := uint32(1)
	for round := range 3 * maxRefusalsPerStream {
		rc.headers(id, true, reqFields("GET", "/")...)
		<-entered
		_ = rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		rc.headers(id+2, true, reqFields("GET", "/")...)
		rc.until("the refusal", func(f http2.Frame) bool {
			if g, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("round %d: GOAWAY %v", round, g.ErrCode)
			}
			r, ok := f.(*http2.RSTStreamFrame)
			return ok && r.StreamID == id+2
		})
		release <- struct{}{}
		for deadline := time.Now().Add(5 * time.Second); handlersRunning(s) > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the handler did not return")
			}
		}
		id += 4
	}
	// The connection still serves.
	_ = rc.fr.WritePing(false, [8]byte{3})
	rc.until("the PING's ACK", func(f http2.Frame) bool {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY %v", g.ErrCode)
		}
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
}

// TestLoweredMaxFrameSize: once the server has acknowledged a SETTINGS
// that lowers SETTINGS_MAX_FRAME_SIZE, no frame after the ACK may be over
// it (RFC 9113 §6.5.3); a handler that read the old size and waited for
// the write lock while the ACK went out must use the new one.
func TestLoweredMaxFrameSize(t *testing.T) {
	t.Parallel()
	const big, small, each, chunk = 1 << 20, 16384, 16 << 20, 1 << 20
	stop := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, chunk)
		for range each / chunk {
			if _, err := w.Write(b); err != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	_, addr := serve(t, Options{Handler: h})
	t.Cleanup(func() { close(stop) })
	rc := dialRaw(t, addr,
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: big})
	rc.fr.SetMaxReadFrameSize(big)
	if err := rc.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	rc.headers(1, true, reqFields("GET", "/")...)
	rc.headers(3, true, reqFields("GET", "/")...)
	// Unread, the socket fills: one handler waits in a write holding the
	// write lock, the other for the lock.
	time.Sleep(300 * time.Millisecond)
	if err := rc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: small}); err != nil {
		t.Fatal(err)
	}
	acks, ended := 0, 0
	for ended < 2 {
		f, err := rc.next()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
			acks++
		}
		if n := f.Header().Length; acks == 2 && n > small {
			t.Fatalf("%v of %d bytes after the ACK of SETTINGS_MAX_FRAME_SIZE %d", f.Header().Type, n, small)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.Length > 0 {
			_ = rc.fr.WriteWindowUpdate(0, d.Length)
		}
		if endOf(1)(f) || endOf(3)(f) {
			ended++
		}
	}
}

// TestHeadersBeforeWindow: the response's HEADERS are not flow
// controlled (RFC 9113 §6.9); a client may open a stream's window only
// once it has seen them (SETTINGS_INITIAL_WINDOW_SIZE 0, then a
// WINDOW_UPDATE sized by the content-length). The server must not hold
// them back with the body until the window opens: that client waits
// for headers, the server for window, until WriteStall resets the stream.
func TestHeadersBeforeWindow(t *testing.T) {
	t.Parallel()
	for _, size := range []int{100, 64 << 10} { // held until the handler returns; written at once
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			body := pattern(size, size)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
			_, addr := serve(t, Options{Handler: h, WriteStall: 3 * time.Second})
			rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			rc.headers(1, true, reqFields("GET", "/")...)
			rc.until("the response's HEADERS", func(f http2.Frame) bool {
				switch f := f.(type) {
				case *http2.RSTStreamFrame:
					t.Fatalf("stream reset (%v) before its HEADERS", f.ErrCode)
				case *http2.DataFrame:
					t.Fatal("DATA beyond a shut window")
				case *http2.MetaHeadersFrame:
					if f.StreamEnded() {
						t.Fatal("HEADERS end a stream with a body")
					}
					return true
				}
				return false
			})
			if err := rc.fr.WriteWindowUpdate(1, uint32(size)); err != nil {
				t.Fatal(err)
			}
			var got []byte
			rc.until("the body", func(f http2.Frame) bool {
				if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
					got = append(got, d.Data()...)
					if len(got) < size {
						_ = rc.fr.WriteWindowUpdate(0, uint32(len(d.Data()))) // the connection's, past 65535
					}
				}
				return endOf(1)(f)
			})
			if !bytes.Equal(got, body) {
				t.Fatalf("%d bytes, want %d", len(got), size)
			}
		})
	}
}

// TestControlQueueLetsGo: control frames queued while a handler holds the
// write lock (PING ACKs while it writes to a client slow to read) are
// sent, and the queue's buffer, grown for them, is let go: an idle
// connection holds no buffer (bufWriter), and this one should not hold
// one the size of its largest burst for as long as it stays open.
func TestControlQueueLetsGo(t *testing.T) {
	t.Parallel()
	const size, pings = 8 << 20, 600
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(make([]byte, size)) })
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	if err := rc.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	rc.headers(1, true, reqFields("GET", "/")...)
	time.Sleep(200 * time.Millisecond) // unread, the socket fills: the handler holds the write lock
	for i := range pings {
		if err := rc.fr.WritePing(false, [8]byte{byte(i >> 8), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	acks, ended := 0, false
	rc.until("the response and every PING's ACK", func(f http2.Frame) bool {
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			acks++
		}
		ended = ended || endOf(1)(f)
		return acks == pings && ended
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for cn := range s.conns {
		cn.wmu.Lock() // cout's, and cbuf's while it swaps with it
		cn.cmu.Lock()
		held := max(cn.cbuf.Cap(), cn.cout.Cap())
		cn.cmu.Unlock()
		cn.wmu.Unlock()
		if held > 4<<10 {
			t.Fatalf("the control queue holds a %d-byte buffer after it was sent", held)
		}
	}
}

// TestFramesStaySmall: a client may allow frames up to 16 MiB; the
// server's framer keeps a buffer the size of the largest frame it ever
// wrote for the connection's life, so a client that allows large frames
// and downloads one large response would make its connection hold
// megabytes while idle. Frames stay at 16 KiB, which every client takes.
func TestFramesStaySmall(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("h", 64<<10))
		_, _ = w.Write(make([]byte, size))
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr,
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1<<24 - 1})
	rc.fr.SetMaxReadFrameSize(1<<24 - 1)
	if err := rc.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	rc.headers(1, true, reqFields("GET", "/")...)
	rc.fr.ReadMetaHeaders = nil // the frames as they come, CONTINUATIONs too
	got := 0
	rc.until("the response", func(f http2.Frame) bool {
		if n := f.Header().Length; n > 16<<10 {
			t.Fatalf("%v frame of %d bytes", f.Header().Type, n)
		}
		if d, ok := f.(*http2.DataFrame); ok {
			got += len(d.Data())
		}
		return endOf(1)(f)
	})
	if got != size {
		t.Fatalf("%d bytes of %d", got, size)
	}
}

// TestLeftBehindWriterWakes: a goroutine the handler left writing, blocked
// for a window the client keeps shut, gets an error once the handler has
// returned, instead of waiting for a window update that may never come.
func TestLeftBehindWriterWakes(t *testing.T) {
	t.Parallel()
	result := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		go func() {
			_, err := w.Write(make([]byte, 64<<10)) // over hold: waits in take
			result <- err
		}()
		time.Sleep(100 * time.Millisecond) // let it reach the wait
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	rc.headers(1, true, reqFields("GET", "/")...)
	select {
	case err := <-result:
		if err == nil {
			t.Fatal("a write with no window and no handler succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the left-behind writer is still waiting after its handler returned")
	}
}

// TestIdleTimeoutCountsFromTheLastStream: the idle timeout runs from the
// end of the connection's last stream, whatever the timer armed before it
// was doing: one that comes due while a stream runs, or before the
// timeout has passed since the last one ended, does not drain the
// connection early, and the connection does drain once it has passed.
func TestIdleTimeoutCountsFromTheLastStream(t *testing.T) {
	t.Parallel()
	// Timings are wide so that a test process stalled a few hundred
	// milliseconds cannot pass for an early drain: the timer armed at
	// the start comes due 600 ms after the request begins, so an early
	// drain ends the idle wait at most 600 ms after the last stream;
	// the check below wants three quarters of the timeout.
	const idle = 2 * time.Second
	for _, work := range []time.Duration{0, 1200 * time.Millisecond} {
		t.Run(work.String(), func(t *testing.T) {
			t.Parallel()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(work) })
			_, addr := serve(t, Options{Handler: h, IdleTimeout: idle})
			rc := dialRaw(t, addr)
			time.Sleep(idle - 600*time.Millisecond)
			rc.headers(1, true, reqFields("GET", "/")...)
			rc.until("the response", endOf(1))
			ended := time.Now()
			rc.until("the idle timeout's GOAWAY", func(f http2.Frame) bool {
				_, ok := f.(*http2.GoAwayFrame)
				return ok
			})
			if d := time.Since(ended); d < idle*3/4 {
				t.Fatalf("GOAWAY %v after the last stream ended; the idle timeout is %v", d, idle)
			}
		})
	}
}
