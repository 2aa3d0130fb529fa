package edge

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawH2 is a synchronous raw HTTP/2 client for the conformance tests: the
// test's goroutine writes frames exactly as told (malformed ones too) and
// reads the server's frames one at a time, each read bounded by
// rawH2ReadWait, so a server that answers nothing fails the test instead
// of hanging it. Unlike h2Client it has no reader goroutine; it is not
// safe for concurrent use.
type rawH2 struct {
	t        testing.TB
	c        *tls.Conn
	fr       *http2.Framer
	enc      *hpack.Encoder
	hbuf     bytes.Buffer
	settings map[http2.SettingID]uint32 // the server's first SETTINGS
}

// rawH2ReadWait bounds each read; rawH2Total a whole response or drain,
// against a server that keeps sending frames but never ends the stream.
const (
	rawH2ReadWait = 5 * time.Second
	rawH2Total    = 30 * time.Second
)

// dialRawH2 connects to addr with ALPN h2, sends the preface and a
// SETTINGS frame with settings, and reads the server's SETTINGS (which
// must come first, RFC 9113 §3.4), acknowledging it.
func dialRawH2(t testing.TB, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c, err := dialTLS(t, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// No test writes for this long: a server that stops reading without
	// closing fails the write instead of hanging the test.
	_ = c.SetWriteDeadline(time.Now().Add(rawH2Total))
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	r := &rawH2{t: t, c: c, fr: http2.NewFramer(c, c), settings: map[http2.SettingID]uint32{}}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.fr.MaxHeaderListSize = 1 << 20
	// The server may send no frame larger than the client's
	// SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2): a larger one fails the read.
	r.fr.SetMaxReadFrameSize(16384)
	for _, s := range settings {
		if s.ID == http2.SettingMaxFrameSize {
			r.fr.SetMaxReadFrameSize(s.Val)
		}
	}
	r.enc = hpack.NewEncoder(&r.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	f, err := r.read()
	if err != nil {
		t.Fatalf("reading the server's SETTINGS: %v", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("server's first frame is %v, want SETTINGS", f.Header())
	}
	_ = sf.ForeachSetting(func(s http2.Setting) error { r.settings[s.ID] = s.Val; return nil })
	if err := r.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return r
}

// setting returns the server's value for id, or RFC 9113's default.
func (r *rawH2) setting(id http2.SettingID) uint32 {
	if v, ok := r.settings[id]; ok {
		return v
	}
	return map[http2.SettingID]uint32{
		http2.SettingInitialWindowSize:     65535,
		http2.SettingMaxFrameSize:          16384,
		http2.SettingMaxConcurrentStreams:  1 << 31, // unlimited
		http2.SettingMaxHeaderListSize:     1 << 31,
		http2.SettingHeaderTableSize:       4096,
		http2.SettingEnableConnectProtocol: 0,
	}[id]
}

// read returns the server's next frame, waiting at most rawH2ReadWait.
// The frame's buffers are valid until the next read.
func (r *rawH2) read() (http2.Frame, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(rawH2ReadWait))
	return r.fr.ReadFrame()
}

// block hpack-encodes fields as given: names are not lowercased or
// checked, so a test can send what a conforming client never would.
func (r *rawH2) block(fields [][2]string) []byte {
	r.hbuf.Reset()
	for _, f := range fields {
		_ = r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return bytes.Clone(r.hbuf.Bytes())
}

// headers sends fields on stream id, split into HEADERS and CONTINUATION
// frames of at most 16 KiB (the frame size every server accepts).
func (r *rawH2) headers(id uint32, fields [][2]string, endStream bool) {
	r.t.Helper()
	b := r.block(fields)
	const max = 16384
	first := b[:min(len(b), max)]
	b = b[len(first):]
	err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(b) == 0})
	for err == nil && len(b) > 0 {
		n := min(len(b), max)
		err = r.fr.WriteContinuation(id, n == len(b), b[:n])
		b = b[n:]
	}
	if err != nil {
		r.t.Fatalf("write headers on stream %d: %v", id, err)
	}
}

func (r *rawH2) data(id uint32, p []byte, endStream bool) {
	r.t.Helper()
	if err := r.fr.WriteData(id, endStream, p); err != nil {
		r.t.Fatalf("write data on stream %d: %v", id, err)
	}
}

// request is a request's header list: the four pseudo-header fields
// (authority api.example.test) and extra regular fields.
func request(method, path string, extra ...[2]string) [][2]string {
	return append([][2]string{{":method", method}, {":scheme", "https"}, {":authority", "api." + zone}, {":path", path}}, extra...)
}

// h2Resp is what the client saw of one stream, and of the connection
// while it read.
type h2Resp struct {
	status   string
	header   http.Header // regular fields of the first HEADERS
	body     []byte
	trailer  http.Header // fields of a trailing HEADERS
	datas    int         // DATA frames
	ended    bool        // END_STREAM seen
	reset    bool        // RST_STREAM seen
	rstCode  http2.ErrCode
	goaway   bool
	goCode   http2.ErrCode
	goLast   uint32 // GOAWAY's last stream id
	closed   bool   // the connection ended
	pingAcks [][8]byte
}

// response reads until stream id ends (END_STREAM or RST_STREAM) or the
// connection does, and returns what it saw. With grant, it gives back
// each DATA frame's bytes to the stream's and the connection's window,
// as a reading client does. A read that times out fails the test.
func (r *rawH2) response(id uint32, grant bool) h2Resp {
	r.t.Helper()
	var res h2Resp
	deadline := time.Now().Add(rawH2Total)
	for !res.ended && !res.reset && !res.closed {
		if time.Now().After(deadline) {
			r.t.Fatalf("stream %d not ended after %v: %+v", id, rawH2Total, res)
		}
		r.next(&res, id, grant)
	}
	return res
}

// drain reads until the connection ends, recording what it saw of stream
// id (0: only connection frames).
func (r *rawH2) drain(id uint32) h2Resp {
	r.t.Helper()
	var res h2Resp
	deadline := time.Now().Add(rawH2Total)
	for !res.closed {
		if time.Now().After(deadline) {
			r.t.Fatalf("connection still open after %v: %+v", rawH2Total, res)
		}
		r.next(&res, id, true)
	}
	return res
}

// next reads one frame into res.
func (r *rawH2) next(res *h2Resp, id uint32, grant bool) {
	r.t.Helper()
	f, err := r.read()
	if err != nil {
		if isTimeout(err) {
			r.t.Fatalf("stream %d: no frame from the server in %v (so far: %+v)", id, rawH2ReadWait, *res)
		}
		res.closed = true
		return
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = r.fr.WriteSettingsAck()
		}
	case *http2.GoAwayFrame:
		res.goaway, res.goCode, res.goLast = true, f.ErrCode, f.LastStreamID
	case *http2.PingFrame:
		if f.IsAck() {
			res.pingAcks = append(res.pingAcks, f.Data)
		}
	}
	if f.Header().StreamID != id || id == 0 {
		return
	}
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		h := http.Header{}
		for _, hf := range f.RegularFields() {
			h.Add(hf.Name, hf.Value)
		}
		if res.status == "" {
			res.status, res.header = f.PseudoValue("status"), h
		} else {
			res.trailer = h
		}
		res.ended = f.StreamEnded()
	case *http2.DataFrame:
		res.datas++
		res.body = append(res.body, f.Data()...)
		res.ended = f.StreamEnded()
		if n := uint32(f.Length); grant && n > 0 {
			_ = r.fr.WriteWindowUpdate(0, n)
			if !res.ended {
				_ = r.fr.WriteWindowUpdate(id, n)
			}
		}
	case *http2.RSTStreamFrame:
		res.reset, res.rstCode = true, f.ErrCode
	}
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// get sends a GET for path on stream id and returns the response, read
// to its end.
func (r *rawH2) get(id uint32, path string) h2Resp {
	r.t.Helper()
	r.headers(id, request("GET", path), true)
	return r.response(id, true)
}

// refused reports whether the server refused a stream: a reset, a
// connection error, or a 4xx answer (RFC 9113 §8.1.1 lets a server answer
// a malformed request before it ends the stream).
func (res h2Resp) refused() bool {
	return res.reset || (res.goaway && res.goCode != http2.ErrCodeNo) || res.closed || strings.HasPrefix(res.status, "4")
}
