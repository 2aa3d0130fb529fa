package h2

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// BenchmarkIdleConnection reports the memory an idle HTTP/2 connection
// holds on the server after one request: gatehouse's server against
// net/http's in the same process. The clients are raw framers that hold
// little, so the figure is mostly the server's. Browsers keep such
// connections open to every TLS origin they have used.
func BenchmarkIdleConnection(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	b.Run("h2", func(b *testing.B) {
		_, addr := serve(b, Options{Handler: h})
		idleConns(b, addr)
	})
	b.Run("net-http", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
		srv.Protocols.SetUnencryptedHTTP2(true)
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		idleConns(b, ln.Addr().String())
	})
}

func idleConns(b *testing.B, addr string) {
	const n = 500
	inUse := testutil.HeapInUse
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "a.example"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	var sum float64
	for range b.N {
		before := inUse()
		conns := make([]net.Conn, n)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
				b.Fatal(err)
			}
			fr := http2.NewFramer(c, c)
			_ = fr.WriteSettings()
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) {
					break
				}
				if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			}
			_ = c.SetDeadline(time.Time{})
		}
		time.Sleep(100 * time.Millisecond)
		sum += float64(inUse()) - float64(before)
		for _, c := range conns {
			c.Close()
		}
	}
	b.ReportMetric(sum/float64(b.N)/n, "B/conn")
}

// BenchmarkRequest is one small GET and its 1 KiB answer at a time on one
// connection, from a raw framer client (which allocates little): the
// server's cost per request, allocations included, without TLS or a
// proxy behind it.
func BenchmarkRequest(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Request-Id", "0123456789abcdef")
		_, _ = w.Write(body)
	})
	_, addr := serve(b, Options{Handler: h})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", "a.example"}, {"user-agent", "bench"}, {"accept", "*/*"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		b.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.SetReuseFrames()
	_ = fr.WriteSettings()
	_ = fr.WriteWindowUpdate(0, 1<<30)
	id := uint32(1)
	request := func() {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.DataFrame:
				if f.StreamID == id && f.StreamEnded() {
					id += 2
					return
				}
			case *http2.RSTStreamFrame, *http2.GoAwayFrame:
				b.Fatalf("%v", f)
			}
		}
	}
	request()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		request()
	}
}
