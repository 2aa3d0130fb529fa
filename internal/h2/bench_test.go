package h2

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// BenchmarkIdleConnection reports the memory an idle HTTP/2 connection
// holds on the server after one request: gatehouse's server (alone, and
// with streams reused as behind the gateway) against net/http's in the
// same process. The clients are raw framers that hold
// little, so the figure is mostly the server's. Browsers keep such
// connections open to every TLS origin they have used.
func BenchmarkIdleConnection(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	b.Run("h2", func(b *testing.B) {
		_, addr := serve(b, Options{Handler: h})
		idleConns(b, addr)
	})
	// As behind the gateway, whose RequestDone says nothing holds a
	// request: the connection keeps its last stream for the next one.
	b.Run("h2-reused", func(b *testing.B) {
		_, addr := serve(b, Options{
			Handler:        h,
			RequestContext: func(ctx context.Context) context.Context { return ctx },
			RequestDone:    func(context.Context) bool { return true },
		})
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
	_, addr := serve(b, Options{Handler: benchHandler()})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchRequests(b, c, false, benchFields, nil)
}

// BenchmarkRequestPipe is BenchmarkRequest over net.Pipe: no system
// calls, whose cost and noise (on a shared machine) are most of the other,
// so what it measures is mostly the server's own work. "browser" sends the
// dozen fields a browser sends on a page load (bench's -headers browser),
// "post" a 1 KiB body the handler reads.
func BenchmarkRequestPipe(b *testing.B) {
	for _, tc := range []struct {
		name    string
		fields  [][2]string
		body    []byte
		handler http.Handler
	}{
		{"host", benchFields, nil, benchHandler()},
		{"browser", browserFields, nil, benchHandler()},
		{"post", benchFields, bytes.Repeat([]byte("y"), 1024), benchHandler()},
		{"gateway", benchFields, nil, gatewayHandler()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := Options{Handler: tc.handler}
			if tc.name == "gateway" {
				// As the gateway's: nothing holds a request after its
				// handler, so its stream is reused.
				o.RequestContext = func(ctx context.Context) context.Context { return ctx }
				o.RequestDone = func(context.Context) bool { return true }
			}
			s, err := New(o)
			if err != nil {
				b.Fatal(err)
			}
			c, sc := net.Pipe()
			done := make(chan struct{})
			go func() { defer close(done); s.ServeConn(sc) }()
			defer func() { c.Close(); s.Close(); <-done }()
			benchRequests(b, c, true, tc.fields, tc.body)
		})
	}
}

// benchFields are BenchmarkRequest's request fields beside the pseudo
// ones; browserFields those Firefox 128 sends on a page load (as in
// bench/wrk.go).
var (
	benchFields   = [][2]string{{"user-agent", "bench"}, {"accept", "*/*"}}
	browserFields = [][2]string{
		{"user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"},
		{"accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
		{"accept-language", "en-US,en;q=0.5"},
		{"accept-encoding", "gzip, deflate, br, zstd"},
		{"referer", "https://a.example/"},
		{"cookie", "session=4f1c2a9e7b3d4c5e8f6a0b1c2d3e4f5a; theme=dark"},
		{"upgrade-insecure-requests", "1"},
		{"sec-fetch-dest", "document"},
		{"sec-fetch-mode", "navigate"},
		{"sec-fetch-site", "same-origin"},
		{"sec-fetch-user", "?1"},
		{"priority", "u=0, i"},
	}
)

func benchHandler() http.Handler {
	body := bytes.Repeat([]byte("x"), 1024)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Request-Id", "0123456789abcdef")
		_, _ = w.Write(body)
	})
}

// gatewayHandler answers with the fields the gateway's answers carry (the
// host's, the rate limit's, the request id and cluster), a new request id
// and remaining count each time.
func gatewayHandler() http.Handler {
	body := bytes.Repeat([]byte("x"), 1024)
	n := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		h := w.Header()
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
		h["Content-Length"] = []string{"1024"}
		h["X-Gatehouse-Cluster"] = []string{"local"}
		h["X-Request-Id"] = []string{fmt.Sprintf("%016x", n)}
		h["X-Ratelimit-Limit"] = []string{"1000000"}
		h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(1000000 - n%1000000)}
		h["X-Ratelimit-Reset"] = []string{"60"}
		h["Ratelimit-Policy"] = []string{`"app";q=1000000;w=60`}
		h["Ratelimit"] = []string{`"app";r=` + strconv.Itoa(1000000-n%1000000) + ";t=60"}
		_, _ = w.Write(body)
	})
}

// benchRequests runs the requests of BenchmarkRequest, with fields and
// body (none if nil), on c, a net.Pipe if pipe.
func benchRequests(b *testing.B, c net.Conn, pipe bool, fields [][2]string, body []byte) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	method := "GET"
	if body != nil {
		method = "POST"
	}
	for _, f := range append([][2]string{{":method", method}, {":scheme", "https"}, {":path", "/"}, {":authority", "a.example"}}, fields...) {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	fr := http2.NewFramer(c, c)
	fr.SetReuseFrames()
	open := func() {
		_, _ = io.WriteString(c, http2.ClientPreface)
		_ = fr.WriteSettings()
		_ = fr.WriteWindowUpdate(0, 1<<30)
	}
	if !pipe {
		open()
	} else {
		// net.Pipe does not buffer: the opening is written while the
		// server's own frames are read, up to the ACK of the client's
		// SETTINGS (not acknowledging the server's, which could come
		// before the client's SETTINGS; the server does not wait for it).
		opened := make(chan struct{})
		go func() { defer close(opened); open() }()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
				break
			}
		}
		<-opened
	}
	id := uint32(1)
	request := func() {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: body == nil, EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
		if body != nil {
			if err := fr.WriteData(id, true, body); err != nil {
				b.Fatal(err)
			}
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() && !pipe {
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
