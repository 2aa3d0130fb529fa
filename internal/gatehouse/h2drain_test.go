package gatehouse

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2Drain stops the gateway while HTTP/2 streams are in flight, on
// two connections: one driven frame by frame, one a Go transport. The raw
// client has an event stream and an upload open; it gets GOAWAY naming
// the last of them as processed, sends the rest of its upload after it,
// and both streams complete; a stream it opens after the GOAWAY reaches no
// host; then the connection closes. The transport's 4 MiB download,
// paused by the host at 1 MiB, completes byte-exact (the window updates it
// needs flow after the GOAWAY), and a new request on it is not served on
// the draining connection (every connection refuses new streams before
// the raw client's GOAWAY is written, so the transport's is refused even
// if sent before it read its own GOAWAY): it fails cleanly (the listener
// is closed) without reaching the host.
func TestH2Drain(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	for _, impl := range h2Impls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel() // each HTTP/2 server on a gateway of its own
			e := newH2Env(t, impl.fast, false)
			k := func(s string) string { return "drain-" + s + "-" + t.Name() }
			sse, up, late, down, lateTr := e.probe(k("sse")), e.probe(k("up")), e.probe(k("late")), e.probe(k("down")), e.probe(k("late-tr"))
			c := dialRawH2(t, e.r.g.Addrs().HTTPS, "web.test.local")
			c.open(t, 1, "GET", "/sse?k="+k("sse"), true)
			c.until(t, "the first event", func() bool { return bytes.Equal(c.body[1], []byte("data: 1\n\n")) })
			upload, _ := io.ReadAll(pseudoRandom(4, 20000))
			c.open(t, 3, "PUT", "/upload?k="+k("up"), false, [2]string{"content-length", "20000"})
			c.data(t, 3, upload[:10000], false)
			await(t, up.started, "the upload to reach the host")

			tr, dials := e.client(t, "web.test.local", "h2")
			ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
			defer cancel()
			const n, pause = 4 << 20, 1 << 20
			res := roundTrip(t, tr, newReq(t, ctx, "GET", fmt.Sprintf("https://web.test.local/bytes?k=%s&n=%d&seed=7&pause=%d", k("down"), n, pause), nil))
			defer res.Body.Close()
			h := sha256.New()
			if _, err := io.CopyN(h, res.Body, pause); err != nil {
				t.Fatalf("the download's first MiB: %v", err)
			}

			e.r.cancel() // what SIGTERM does: Run drains
			c.until(t, "GOAWAY", func() bool { return c.goaway })
			if c.goCode != http2.ErrCodeNo || c.goLast != 3 {
				t.Errorf("GOAWAY %v, last stream %d; want NO_ERROR, 3 (the last stream in flight)", c.goCode, c.goLast)
			}
			// A client that ignores the GOAWAY: its new stream is past the
			// last one the gateway processes, and must reach no host.
			c.open(t, 5, "GET", "/sse?k="+k("late"), true)
			// One that honours it: the request goes to a new connection,
			// which the closed listener refuses.
			if res, err := tr.RoundTrip(newReq(t, ctx, "GET", "https://web.test.local/ok?k="+k("late-tr"), nil)); err == nil {
				res.Body.Close()
				t.Errorf("a new request on the transport during the drain: %d, want an error", res.StatusCode)
			} else if ctx.Err() != nil || dials.Load() != 2 {
				t.Errorf("a new request on the transport during the drain: %v after %d dials; want a failed second dial", err, dials.Load())
			}

			c.data(t, 3, upload[10000:], true)
			sse.letGo()
			down.letGo()
			c.until(t, "the streams in flight to end", func() bool { return (c.ended[1] || c.reset[1]) && (c.ended[3] || c.reset[3]) })
			if !c.ended[1] || c.status[1] != "200" || string(c.body[1]) != "data: 1\n\ndata: 2\n\n" {
				t.Errorf("the event stream: status %q, body %q, ended %v, reset %v; want all of it",
					c.status[1], c.body[1], c.ended[1], c.reset[1])
			}
			want := mustSum(bytes.NewReader(upload))
			if !c.ended[3] || c.status[3] != "200" || string(c.body[3]) != want {
				t.Errorf("the upload: status %q, body %q, ended %v, reset %v; want 200 %q",
					c.status[3], c.body[3], c.ended[3], c.reset[3], want)
			}
			if _, err := io.Copy(h, res.Body); err != nil {
				t.Errorf("the download after the drain began: %v", err)
			}
			if _, want, _ := sumOf(pseudoRandom(7, n)); hex.EncodeToString(h.Sum(nil)) != want {
				t.Errorf("the download: SHA-256 %x, want %s", h.Sum(nil), want)
			}
			c.until(t, "the connection to close", func() bool { return false })
			if c.status[5] != "" || len(c.body[5]) > 0 {
				t.Errorf("the stream opened after GOAWAY was answered: %q %q", c.status[5], c.body[5])
			}
			if late.seen() || lateTr.seen() {
				t.Errorf("a request sent after GOAWAY reached the host (raw %v, transport %v)", late.seen(), lateTr.seen())
			}
			select {
			case err := <-e.r.done:
				e.r.done <- err // for the cleanup's stop
				if err != nil {
					t.Errorf("Run after the drain: %v", err)
				}
			case <-time.After(h2Wait):
				t.Fatal("the gateway did not stop")
			}
		})
	}
}

// h2RawConn is an HTTP/2 client connection driven frame by frame: it shows
// what a transport hides (GOAWAY and its last stream id) and can do what
// a transport would not (open a stream after GOAWAY). Not safe for
// concurrent use.
type h2RawConn struct {
	c      *tls.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	status map[uint32]string
	header map[uint32]http.Header // the first HEADERS' regular fields
	body   map[uint32][]byte
	ended  map[uint32]bool
	reset  map[uint32]bool
	goaway bool
	goCode http2.ErrCode
	goLast uint32
	closed bool
}

func dialRawH2(t *testing.T, addr, sni string) *h2RawConn {
	t.Helper()
	d := tls.Dialer{Config: &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &h2RawConn{c: nc.(*tls.Conn), status: map[uint32]string{}, header: map[uint32]http.Header{}, body: map[uint32][]byte{}, ended: map[uint32]bool{}, reset: map[uint32]bool{}}
	t.Cleanup(func() { c.c.Close() })
	if p := c.c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	_ = c.c.SetWriteDeadline(time.Now().Add(h2Wait))
	c.fr = http2.NewFramer(c.c, c.c)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(c.c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// open opens stream id with a request for path at the connection's
// server name, and extra fields.
func (c *h2RawConn) open(t *testing.T, id uint32, method, path string, endStream bool, extra ...[2]string) {
	t.Helper()
	c.hbuf.Reset()
	fields := append([][2]string{{":method", method}, {":scheme", "https"}, {":authority", c.c.ConnectionState().ServerName}, {":path", path}}, extra...)
	for _, f := range fields {
		_ = c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// Frames of at most 16 KiB, the size every server takes: HEADERS,
	// then CONTINUATION.
	const max = 16 << 10
	b := c.hbuf.Bytes()
	first := b[:min(len(b), max)]
	b = b[len(first):]
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: endStream, EndHeaders: len(b) == 0})
	for err == nil && len(b) > 0 {
		n := min(len(b), max)
		err = c.fr.WriteContinuation(id, n == len(b), b[:n])
		b = b[n:]
	}
	if err != nil {
		t.Fatalf("opening stream %d: %v", id, err)
	}
}

// data sends p on stream id, within the initial windows (64 KiB).
func (c *h2RawConn) data(t *testing.T, id uint32, p []byte, endStream bool) {
	t.Helper()
	if err := c.fr.WriteData(id, endStream, p); err != nil {
		t.Fatalf("data on stream %d: %v", id, err)
	}
}

// until reads frames until cond holds or the connection ends, within
// h2Wait; it fails t if neither happens in time, or if the connection
// ends first while cond does not hold (cond always false: wait for the
// end).
func (c *h2RawConn) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(h2Wait))
	for !cond() && !c.closed {
		f, err := c.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("waiting for %s: nothing for %v", what, h2Wait)
		case err != nil:
			c.closed = true
			continue
		}
		c.record(f)
	}
	if !cond() && what != "the connection to close" {
		t.Fatalf("the connection closed before %s", what)
	}
}

func (c *h2RawConn) record(f http2.Frame) {
	id := f.Header().StreamID
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = c.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		c.goaway, c.goCode, c.goLast = true, f.ErrCode, f.LastStreamID
	case *http2.MetaHeadersFrame:
		if c.status[id] == "" {
			c.status[id] = f.PseudoValue("status")
			c.header[id] = http.Header{}
			for _, hf := range f.RegularFields() {
				c.header[id].Add(hf.Name, hf.Value)
			}
		}
		c.ended[id] = c.ended[id] || f.StreamEnded()
	case *http2.DataFrame:
		c.body[id] = append(c.body[id], f.Data()...)
		c.ended[id] = c.ended[id] || f.StreamEnded()
	case *http2.RSTStreamFrame:
		c.reset[id] = true
	}
}
