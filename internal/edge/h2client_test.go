package edge

import (
	"bytes"
	"crypto/tls"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Client is a raw HTTP/2 client over TLS (ALPN h2) that does only what
// a test tells it to: in particular it opens no flow-control window of
// its own accord. Frames arrive on frames, read by one goroutine that the
// test's cleanup stops and waits for; writes may come from any goroutine.
type h2Client struct {
	c      *tls.Conn
	fr     *http2.Framer
	frames chan h2Frame

	wmu  sync.Mutex
	henc *hpack.Encoder
	hbuf bytes.Buffer
}

// h2Frame is what a test needs of a frame the server sent.
type h2Frame struct {
	typ    http2.FrameType
	stream uint32
	n      int    // DATA payload length
	end    bool   // END_STREAM
	status string // HEADERS :status
	ack    bool   // PING ack
}

// dialH2 connects to addr, sends the preface and SETTINGS with the given
// INITIAL_WINDOW_SIZE (the connection's own window stays at 64 KiB until
// the test opens it).
func dialH2(t *testing.T, addr string, window uint32) *h2Client {
	t.Helper()
	c, err := dialTLS(t, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	cl := &h2Client{c: c, fr: http2.NewFramer(c, c), frames: make(chan h2Frame, 64)}
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cl.henc = hpack.NewEncoder(&cl.hbuf)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go cl.read(quit, done)
	t.Cleanup(func() {
		close(quit)
		c.Close()
		<-done
	})
	return cl
}

// read forwards the server's frames until the connection ends, then
// closes frames; it acknowledges the server's SETTINGS as a client must.
func (cl *h2Client) read(quit, done chan struct{}) {
	defer close(done)
	defer close(cl.frames)
	for {
		f, err := cl.fr.ReadFrame()
		if err != nil {
			return
		}
		h := h2Frame{typ: f.Header().Type, stream: f.Header().StreamID}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				cl.write(func() error { return cl.fr.WriteSettingsAck() })
			}
		case *http2.DataFrame:
			h.n, h.end = len(f.Data()), f.StreamEnded()
		case *http2.MetaHeadersFrame:
			h.status, h.end = f.PseudoValue("status"), f.StreamEnded()
		case *http2.PingFrame:
			h.ack = f.IsAck()
		}
		select {
		case cl.frames <- h:
		case <-quit:
			return
		}
	}
}

func (cl *h2Client) write(f func() error) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	return f()
}

// get opens stream id with a GET for path.
func (cl *h2Client) get(t *testing.T, id uint32, path string) {
	t.Helper()
	err := cl.write(func() error {
		cl.hbuf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api." + zone}, {":path", path}} {
			if err := cl.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
				return err
			}
		}
		return cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cl.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// open grants n more bytes of window on stream id (0: the connection).
func (cl *h2Client) open(id, n uint32) error {
	return cl.write(func() error { return cl.fr.WriteWindowUpdate(id, n) })
}

func (cl *h2Client) ping() error {
	return cl.write(func() error { return cl.fr.WritePing(false, [8]byte{'g', 'h'}) })
}
