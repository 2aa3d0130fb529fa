package h2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient speaks HTTP/2 frame by frame to a server from serve().
type rawClient struct {
	t   testing.TB
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

// dialRaw opens a connection, sends the preface and settings, and leaves
// the server's frames unread.
func dialRaw(t testing.TB, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return rawOver(t, c, settings...)
}

// rawOver is dialRaw on a connection the caller made (a TLS one, say).
func rawOver(t testing.TB, c net.Conn, settings ...http2.Setting) *rawClient {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.enc = hpack.NewEncoder(&rc.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return rc
}

// headers sends a request's header block on stream id.
func (rc *rawClient) headers(id uint32, end bool, fields ...string) {
	rc.t.Helper()
	rc.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

func reqFields(method, path string, extra ...string) []string {
	return append([]string{":method", method, ":scheme", "https", ":path", path, ":authority", "a.example"}, extra...)
}

// TestBodyReadUnblocks: a Read of the request body waiting for DATA on
// another goroutine (as httputil.ReverseProxy's transport reads it) must
// return when the body is closed or the handler returns, as net/http's
// does; otherwise that goroutine waits for DATA that never comes.
func TestBodyReadUnblocks(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"close", "return"} {
		t.Run(how, func(t *testing.T) {
			readDone := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reading := make(chan struct{})
				go func() {
					close(reading)
					_, err := r.Body.Read(make([]byte, 10))
					readDone <- err
				}()
				<-reading
				time.Sleep(20 * time.Millisecond) // let the Read wait for DATA
				if how == "close" {
					r.Body.Close()
				}
			})
			_, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			rc.headers(1, false, reqFields("POST", "/")...) // a body that never comes
			select {
			case err := <-readDone:
				if err == nil {
					t.Fatal("Read returned no error")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the body's Read still waits after the body was " + map[string]string{"close": "closed", "return": "left by its handler"}[how])
			}
		})
	}
}

// TestContinueWhileResponding: with Expect: 100-continue, the handler may
// answer on its goroutine while another reads the body (full duplex, as a
// proxy streams an upload): the first Read's 100 Continue must not race
// the response's header block (-race), nor follow it on the wire.
func TestContinueWhileResponding(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(r.Body)
			got <- b
		}()
		w.WriteHeader(http.StatusAccepted)
		w.(http.Flusher).Flush()
		_, _ = w.Write(<-got)
	})
	_, addr := serve(t, Options{Handler: h})
	for i := range 20 {
		rc := dialRaw(t, addr)
		rc.headers(1, false, reqFields("POST", "/", "expect", "100-continue")...)
		final := false
		for {
			f, err := rc.next()
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			if hf, ok := f.(*http2.MetaHeadersFrame); ok && hf.StreamID == 1 {
				status := hf.PseudoValue("status")
				if final && status == "100" {
					t.Fatalf("round %d: 100 Continue after the final response", i)
				}
				if status == "202" {
					final = true
					_ = rc.fr.WriteData(1, true, []byte("up"))
				}
			}
			if endOf(1)(f) {
				break
			}
		}
		rc.c.Close()
	}
}

// next reads the next frame, failing the test after 10s without one.
func (rc *rawClient) next() (http2.Frame, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	return rc.fr.ReadFrame()
}

// endOf reports whether f ends stream id's response.
func endOf(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			return f.StreamID == id && f.StreamEnded()
		case *http2.MetaHeadersFrame:
			return f.StreamID == id && f.StreamEnded()
		case *http2.RSTStreamFrame:
			return f.StreamID == id
		}
		return false
	}
}

// until reads frames until stop returns true; it fails the test if the
// connection ends or stalls first.
func (rc *rawClient) until(what string, stop func(http2.Frame) bool) {
	rc.t.Helper()
	for {
		f, err := rc.next()
		if err != nil {
			rc.t.Fatalf("waiting for %s: %v", what, err)
		}
		if stop(f) {
			return
		}
	}
}

// TestNoRefusalAfterEndStream: a client at SETTINGS_MAX_CONCURRENT_STREAMS
// that opens its next stream as soon as one's END_STREAM arrives honours
// the limit (RFC 9113 §5.1.2: that stream is closed for it), so it must
// be neither refused nor, refusals adding up, told to go away.
func TestNoRefusalAfterEndStream(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	_, addr := serve(t, Options{Handler: h, MaxConcurrentStreams: 1})
	rc := dialRaw(t, addr)
	refused := 0
	for id := uint32(1); id < 2*2000; id += 2 {
		rc.headers(id, true, reqFields("GET", "/")...)
		rc.until("the response", func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY %v after %d requests, %d refused", f.ErrCode, id/2, refused)
			case *http2.RSTStreamFrame:
				if f.ErrCode == http2.ErrCodeRefusedStream {
					refused++
				}
			}
			return endOf(id)(f)
		})
	}
	if refused > 0 {
		t.Fatalf("%d of 2000 streams refused", refused)
	}
}

// TestHeadSniffsContentType: a HEAD response carries the fields the GET
// would (RFC 9110 §9.3.2), the sniffed Content-Type included, as
// net/http's server sends them.
func TestHeadSniffsContentType(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html><body>hello</body></html>")
	})
	_, addr := serve(t, Options{Handler: h})
	c := client(t)
	for _, method := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(method, "http://"+addr+"/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s: content-type %q", method, ct)
		}
	}
}

// TestBodyBufferBounded: a body read more slowly than it arrives is never
// drained; what the handler has read must still be let go, so that the
// body's buffer stays about the stream's window however long the upload.
func TestBodyBufferBounded(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	most := make(chan int, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := r.Body.(*reqBody)
		buf := make([]byte, 32<<10)
		peak, n := 0, 0
		for {
			m, err := r.Body.Read(buf)
			n += m
			b.mu.Lock()
			peak = max(peak, cap(b.buf))
			b.mu.Unlock()
			if err != nil {
				break
			}
			time.Sleep(time.Millisecond) // a slow host behind a fast client
		}
		most <- peak
		_, _ = fmt.Fprint(w, n)
	})
	_, addr := serve(t, Options{Handler: h})
	resp, err := client(t).Post("http://"+addr+"/", "application/octet-stream", io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != fmt.Sprint(size) {
		t.Fatalf("the handler read %s bytes of %d", got, size)
	}
	if peak := <-most; peak > 4*streamWindow {
		t.Fatalf("the body's buffer grew to %d bytes for a %d-byte window", peak, streamWindow)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestTrailersReachTheHandlerAtEOF: the request's trailers are the
// handler's to read once the body has returned io.EOF, and until then
// r.Trailer is the handler's alone: a handler (httputil.ReverseProxy's
// req.Clone) may read it while the trailers arrive, and the connection's
// goroutine writing it then is a concurrent map access, which crashes
// the process (-race shows it every time).
func TestTrailersReachTheHandlerAtEOF(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // the trailers are in by now
		before := len(r.Trailer.Clone()["X-T"])
		_, err := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%d %q %v", before, r.Trailer["X-T"], err)
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	rc.headers(1, false, reqFields("POST", "/", "trailer", "x-t")...)
	if err := rc.fr.WriteData(1, false, []byte("body")); err != nil {
		t.Fatal(err)
	}
	rc.headers(1, true, "x-t", "v")
	if g := <-got; g != `0 ["v"] <nil>` {
		t.Fatalf("trailer before EOF, after, read error: %s", g)
	}
}

// TestTableSizeUpdateAfterLoweredSetting: a client that lowers
// SETTINGS_HEADER_TABLE_SIZE below the default 4096 must find a dynamic
// table size update at the start of the next header block (RFC 7541
// §4.2); nghttp2-based clients (curl, h2load) fail the connection with
// COMPRESSION_ERROR without one. net/http's encoder sends it.
func TestTableSizeUpdateAfterLoweredSetting(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
	rc.headers(1, true, reqFields("GET", "/")...)
	rc.fr.ReadMetaHeaders = nil // the block's bytes, undecoded
	rc.until("the response's HEADERS", func(f http2.Frame) bool {
		hf, ok := f.(*http2.HeadersFrame)
		if !ok || hf.StreamID != 1 {
			return false
		}
		if b := hf.HeaderBlockFragment(); len(b) == 0 || b[0]&0xe0 != 0x20 {
			t.Fatalf("header block starts % x: no dynamic table size update", b[:min(len(b), 4)])
		}
		fields, err := hpack.NewDecoder(0, nil).DecodeFull(hf.HeaderBlockFragment())
		if err != nil || len(fields) == 0 || fields[0].Value != "200" {
			t.Fatalf("%v %v", fields, err)
		}
		return true
	})
}

// TestNoFramesAfterReset: once a stream is reset, by the client or by
// the server answering a frame on a half-closed stream with
// STREAM_CLOSED, the server must send nothing more on it (RFC 9113
// §5.1, §5.4.2): not even the HEADERS of a bodiless response its handler
// ends with.
func TestNoFramesAfterReset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		poke func(rc *rawClient)
	}{
		{"client RST_STREAM", func(rc *rawClient) { _ = rc.fr.WriteRSTStream(1, http2.ErrCodeCancel) }},
		{"DATA after END_STREAM", func(rc *rawClient) { _ = rc.fr.WriteData(1, false, []byte("late")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-r.Context().Done():
				case <-time.After(200 * time.Millisecond):
				}
				w.WriteHeader(http.StatusNoContent)
			})
			s, addr := serve(t, Options{Handler: h})
			rc := dialRaw(t, addr)
			rc.headers(1, true, reqFields("GET", "/")...)
			<-entered
			tc.poke(rc)
			// Wait for the handler to be done: what it wrote is flushed
			// before it counts as done.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if handlersRunning(s) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the handler did not return")
				}
			}
			_ = rc.fr.WritePing(false, [8]byte{7})
			rc.until("the PING's ACK", func(f http2.Frame) bool {
				switch f := f.(type) {
				case *http2.MetaHeadersFrame:
					if f.StreamID == 1 {
						t.Fatalf("HEADERS %s on stream 1 after it was reset", f.PseudoValue("status"))
					}
				case *http2.DataFrame:
					if f.StreamID == 1 {
						t.Fatal("DATA on stream 1 after it was reset")
					}
				case *http2.PingFrame:
					return f.IsAck() && f.Data[0] == 7
				}
				return false
			})
		})
	}
}

// handlersRunning counts the handlers of s's connections.
func handlersRunning(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for cn := range s.conns {
		cn.mu.Lock()
		n += cn.handlers
		cn.mu.Unlock()
	}
	return n
}

// TestShutdownKeepsStreamBeingOpened: Shutdown's GOAWAY names the last
// stream the connection's goroutine has read, and promises it an
// answer; one read but not yet counted as running (its request being
// built) must not let the connection close as if idle: not when its
// handler takes longer than closeSoon's moment, nor when building the
// request does (a GC pause, a busy machine, a RequestContext hook that
// takes its time).
func TestShutdownKeepsStreamBeingOpened(t *testing.T) {
	t.Parallel()
	const pastCloseSoon = 200 * time.Millisecond
	for _, tc := range []struct {
		name           string
		handler, build time.Duration
	}{
		{"slow handler", pastCloseSoon, 0},
		{"slow to open", 0, pastCloseSoon},
	} {
		t.Run(tc.name, func(t *testing.T) {
			building, drained := make(chan struct{}), make(chan struct{})
			o := Options{
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(tc.handler)
					_, _ = io.WriteString(w, "answered")
				}),
				RequestContext: func(ctx context.Context) context.Context {
					close(building)
					<-drained
					time.Sleep(tc.build)
					return ctx
				},
			}
			s, addr := serve(t, o)
			rc := dialRaw(t, addr)
			rc.headers(1, true, reqFields("GET", "/")...)
			<-building
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(context.Background()) }()
			for deadline := time.Now().Add(5 * time.Second); !draining(s); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("Shutdown did not start draining")
				}
			}
			close(drained)
			var body []byte
			rc.until("stream 1's answer", func(f http2.Frame) bool {
				if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
					body = append(body, d.Data()...)
				}
				if g, ok := f.(*http2.GoAwayFrame); ok && g.LastStreamID < 1 {
					t.Fatalf("GOAWAY names %d", g.LastStreamID)
				}
				return endOf(1)(f)
			})
			if string(body) != "answered" {
				t.Fatalf("stream 1: %q", body)
			}
			if err := <-shut; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// draining reports whether every connection of s has sent GOAWAY.
func draining(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for cn := range s.conns {
		cn.mu.Lock()
		g := cn.goaway
		cn.mu.Unlock()
		if !g {
			return false
		}
	}
	return len(s.conns) > 0
}

// TestKeepalivePingsOnALongStream: a client that pings now and then (a
// gRPC keepalive, a browser on an idle event stream) while one long
// stream runs and no other starts is not flooding: the bound on frames
// without a request is a rate, not a lifetime total.
func TestKeepalivePingsOnALongStream(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	rc.headers(1, true, reqFields("GET", "/events")...)
	for burst := range 2 {
		if burst > 0 {
			time.Sleep(1100 * time.Millisecond) // past the second over which they count
		}
		for i := range maxEmptyFrames * 6 / 10 {
			if err := rc.fr.WritePing(false, [8]byte{byte(burst), byte(i >> 8), byte(i)}); err != nil {
				t.Fatal(err)
			}
			rc.until("the PING's ACK", func(f http2.Frame) bool {
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("GOAWAY %v after %d pings in %d bursts", g.ErrCode, i+1, burst+1)
				}
				p, ok := f.(*http2.PingFrame)
				return ok && p.IsAck()
			})
		}
	}
	// A flood still meets the bound.
	go func() {
		for i := 0; i < 3*maxEmptyFrames; i++ {
			if rc.fr.WritePing(false, [8]byte{9}) != nil {
				return
			}
		}
	}()
	for {
		f, err := rc.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("a flood of PINGs was not bounded")
		}
		if err != nil {
			t.Fatalf("the connection ended with no GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			return
		}
	}
}

// TestDrainedBodiesLetGo: a connection's receive window bounds the body
// bytes it holds at once, and so should its memory: streams whose bodies
// have been read (their handlers waiting for more, as a proxy streaming
// an upload does) must not each keep a window's worth of buffer.
func TestDrainedBodiesLetGo(t *testing.T) {
	t.Parallel()
	const each, streams = 512 << 10, 16
	read := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 32<<10)
		n := 0
		for {
			m, err := r.Body.Read(buf)
			if n += m; n == each {
				select {
				case read <- struct{}{}:
				case <-r.Context().Done():
				}
			}
			if err != nil {
				return
			}
		}
	})
	s, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	chunk := make([]byte, 16<<10)
	for i := range streams {
		id := uint32(2*i + 1)
		rc.headers(id, false, reqFields("POST", "/up")...)
		for range each / len(chunk) {
			if err := rc.fr.WriteData(id, false, chunk); err != nil {
				t.Fatal(err)
			}
		}
		<-read // its window comes back before the next stream sends
	}
	held := 0
	s.mu.Lock()
	for cn := range s.conns {
		cn.mu.Lock()
		for _, st := range cn.streams {
			st.body.mu.Lock()
			held += cap(st.body.buf)
			st.body.mu.Unlock()
		}
		cn.mu.Unlock()
	}
	s.mu.Unlock()
	if held > 2*streamWindow {
		t.Fatalf("%d streams whose bodies were read hold %d bytes of buffer", streams, held)
	}
}

// TestDrainingConnectionStartsWithSettings: a connection that arrives
// while the server drains still opens with SETTINGS, the server's
// connection preface (RFC 9113 §3.4), and then gets its GOAWAY; a
// GOAWAY first is a protocol error to the client (net/http's Transport
// fails the request), not a clean "go elsewhere".
func TestDrainingConnectionStartsWithSettings(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	s, addr := serve(t, Options{Handler: h})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before serve's
	busy := dialRaw(t, addr)
	busy.headers(1, true, reqFields("GET", "/")...)
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for deadline := time.Now().Add(5 * time.Second); !draining(s); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Shutdown did not start draining")
		}
	}
	late := dialRaw(t, addr)
	f, err := late.next()
	if err != nil {
		t.Fatal(err)
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("the connection opened with %v", f)
	}
	late.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	once.Do(func() { close(release) })
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// TestSmallFramesAfterEarlyAnswer: a client streaming small DATA frames
// (a gRPC client stream of tiny messages) when the handler answers early
// has many frames in flight on a stream the server has closed. Within the
// window the client had, they are ignored (RFC 9113 §5.4.2) and their
// window given back; they are not a flood of frames without a request,
// and the connection goes on.
func TestSmallFramesAfterEarlyAnswer(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) })
	_, addr := serve(t, Options{Handler: h})
	rc := dialRaw(t, addr)
	rc.headers(1, false, reqFields("POST", "/")...)
	rc.until("401", endOf(1))
	msg := make([]byte, 100)
	for range 1500 {
		if err := rc.fr.WriteData(1, false, msg); err != nil {
			break
		}
	}
	_ = rc.fr.WritePing(false, [8]byte{5})
	for {
		f, err := rc.next()
		if err != nil {
			t.Fatalf("conn ended: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			t.Fatalf("GOAWAY %v", g.ErrCode)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data[0] == 5 {
			return
		}
	}
}

// TestTrickledHeadBounded: a header block begun and never ended (HEADERS
// without END_HEADERS, then CONTINUATIONs that trickle or never come)
// closes the connection after ReadHeaderTimeout, as an HTTP/1 head that
// never ends does, not after the idle timeout.
func TestTrickledHeadBounded(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, Options{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: time.Hour})
	rc := dialRaw(t, addr)
	rc.hb.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}, {Name: ":path", Value: "/"}} {
		_ = rc.enc.WriteField(f)
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hb.Bytes(), EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		for {
			if _, err := rc.fr.ReadFrame(); err != nil {
				closed <- err
				return
			}
		}
	}()
	// One more CONTINUATION, still without END_HEADERS: a trickle.
	time.Sleep(100 * time.Millisecond)
	rc.hb.Reset()
	_ = rc.enc.WriteField(hpack.HeaderField{Name: "x-a", Value: "1"})
	_ = rc.fr.WriteContinuation(1, false, rc.hb.Bytes())
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a head left unended holds the connection past ReadHeaderTimeout")
	}
}
