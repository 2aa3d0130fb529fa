package h2

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// byteConn is a client that sends in and then ends; what the server
// writes goes nowhere.
type byteConn struct {
	r *bytes.Reader
}

func (c *byteConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *byteConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *byteConn) Close() error                { return nil }
func (c *byteConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443} }
func (c *byteConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}
}
func (c *byteConn) SetDeadline(time.Time) error      { return nil }
func (c *byteConn) SetReadDeadline(time.Time) error  { return nil }
func (c *byteConn) SetWriteDeadline(time.Time) error { return nil }

// frames is a client's opening (preface and SETTINGS) and then what build
// writes.
func frames(build func(f *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer)) []byte {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	f := http2.NewFramer(&b, nil)
	_ = f.WriteSettings()
	var hb bytes.Buffer
	build(f, hpack.NewEncoder(&hb), &hb)
	return b.Bytes()
}

func headerBlock(enc *hpack.Encoder, hb *bytes.Buffer, fields ...string) []byte {
	hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), hb.Bytes()...)
}

// FuzzServeConn feeds a connection arbitrary frames after a valid
// opening. Whatever they are, the server must not panic, must end the
// connection when the client does (no goroutine left waiting), and must
// never run more handlers at once than it advertises.
func FuzzServeConn(f *testing.F) {
	get := []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a.example"}
	post := []string{":method", "POST", ":scheme", "https", ":path", "/up", ":authority", "a.example", "content-length", "5"}
	f.Add(frames(func(f *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock(enc, hb, get...), EndStream: true, EndHeaders: true})
	}))
	f.Add(frames(func(f *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock(enc, hb, post...), EndHeaders: true})
		_ = f.WriteData(1, false, []byte("he"))
		_ = f.WriteWindowUpdate(0, 1000)
		_ = f.WriteData(1, true, []byte("llo"))
		_ = f.WritePing(false, [8]byte{1})
	}))
	f.Add(frames(func(f *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		blk := headerBlock(enc, hb, append(get, "cookie", "a=1", "cookie", "b=2", "trailer", "x-t")...)
		_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: blk[:4]})
		_ = f.WriteContinuation(3, true, blk[4:])
		_ = f.WriteData(3, false, []byte("x"))
		_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: headerBlock(enc, hb, "x-t", "v"), EndStream: true, EndHeaders: true})
		_ = f.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = f.WritePriority(5, http2.PriorityParam{StreamDep: 5})
		_ = f.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
		_ = f.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add(frames(func(f *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		for id := uint32(1); id < 20; id += 2 {
			_ = f.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: headerBlock(enc, hb, get...), EndHeaders: true})
			_ = f.WriteRSTStream(id, http2.ErrCodeCancel)
		}
	}))
	f.Fuzz(func(t *testing.T, in []byte) {
		var running, most atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Trailer", "X-T")
			_, _ = w.Write([]byte("answer"))
			w.Header().Set("X-T", "1")
		})
		s, err := New(Options{Handler: h, MaxConcurrentStreams: 4, MaxHeaderBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeConn(&byteConn{r: bytes.NewReader(in)})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ServeConn did not return after the client's input ended")
		}
		s.Close()
		if m := most.Load(); m > 4 {
			t.Fatalf("%d handlers ran at once, 4 advertised", m)
		}
	})
}
