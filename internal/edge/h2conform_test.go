package edge

import (
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// The tests in this file speak raw HTTP/2 frames to the https listener
// (rawH2) and check both what the client sees and what the application
// behind the edge did or did not receive. They are black-box: each runs
// against every implementation in h2Impls.

// calls counts a handler's calls and the most that ran at once.
type calls struct {
	n, running, peak atomic.Int64
}

func (c *calls) enter() {
	c.n.Add(1)
	r := c.running.Add(1)
	for p := c.peak.Load(); r > p && !c.peak.CompareAndSwap(p, r); p = c.peak.Load() {
	}
}

func (c *calls) exit() { c.running.Add(-1) }

// counting wraps h so that c counts its calls.
func (c *calls) counting(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.enter()
		defer c.exit()
		h(w, r)
	})
}

func okHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "ok")
}

// TestH2MalformedRequestsNeverReachHandler: a request RFC 9113 §8.2 and
// §8.3 call malformed (a connection-specific field, TE other than
// "trailers", an uppercase field name, a missing, repeated, unknown or
// misplaced pseudo-header field) is refused: the stream is reset, the
// connection closed, or a 4xx answered (§8.1.1), and the application
// never sees it. The connection-level cases aside, the connection goes
// on serving. Two well-formed controls are served.
func TestH2MalformedRequestsNeverReachHandler(t *testing.T) {
	base := request("GET", "/")
	cases := []struct {
		name   string
		fields [][2]string
		ok     bool // well-formed: must be served
	}{
		{"connection", request("GET", "/", [2]string{"connection", "close"}), false},
		{"keep-alive", request("GET", "/", [2]string{"keep-alive", "timeout=5"}), false},
		{"proxy-connection", request("GET", "/", [2]string{"proxy-connection", "keep-alive"}), false},
		{"transfer-encoding", request("GET", "/", [2]string{"transfer-encoding", "chunked"}), false},
		{"upgrade", request("GET", "/", [2]string{"upgrade", "h2c"}), false},
		{"te gzip", request("GET", "/", [2]string{"te", "gzip"}), false},
		{"te trailers, gzip", request("GET", "/", [2]string{"te", "trailers, gzip"}), false},
		{"te trailers twice", request("GET", "/", [2]string{"te", "trailers"}, [2]string{"te", "trailers"}), false},
		{"uppercase name", request("GET", "/", [2]string{"X-Upper", "1"}), false},
		{"missing :method", base[1:], false},
		{"missing :scheme", [][2]string{base[0], base[2], base[3]}, false},
		{"missing :path", base[:3], false},
		{"empty :path", request("GET", ""), false},
		{"duplicate :path", append(request("GET", "/"), [2]string{":path", "/other"}), false},
		{"duplicate :method", append([][2]string{{":method", "POST"}}, base...), false},
		{"pseudo after regular", append([][2]string{base[0], {"x-a", "1"}}, base[1:]...), false},
		{"unknown pseudo", append(request("GET", "/"), [2]string{":foo", "bar"}), false},
		{"response pseudo", append(request("GET", "/"), [2]string{":status", "200"}), false},
		{"newline in value", request("GET", "/", [2]string{"x-a", "1\r\nx-b: 2"}), false},
		{"te trailers (control)", request("GET", "/", [2]string{"te", "trailers"}), true},
		{"plain (control)", base, true},
	}
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		e := impl.start(t, Options{Handler: c.counting(okHandler)})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := c.n.Load()
				cl := dialRawH2(t, e.https)
				cl.headers(1, tc.fields, true)
				res := cl.response(1, true)
				if tc.ok {
					if res.status != "200" || string(res.body) != "ok" {
						t.Fatalf("well-formed request: %+v", res)
					}
					return
				}
				if !res.refused() {
					t.Fatalf("malformed request not refused: %+v", res)
				}
				if res.status == "200" {
					t.Fatalf("malformed request answered 200: %+v", res)
				}
				if n := c.n.Load() - before; n != 0 {
					t.Fatalf("the handler was called %d times for a malformed request", n)
				}
				if res.reset || res.status != "" {
					// A stream error: the connection still serves.
					if res := cl.get(3, "/"); res.status != "200" {
						t.Fatalf("after a stream error the connection does not serve: %+v", res)
					}
				}
			})
		}
	})
}

// TestH2HeaderListTooLarge: a header list over the listener's
// MaxHeaderBytes is refused (431, a reset or a connection error) and never
// reaches the application; one well within it is served.
func TestH2HeaderListTooLarge(t *testing.T) {
	const limit = 8 << 10
	cases := []struct {
		name   string
		fields int // x-pad fields of 1,000 bytes each
		ok     bool
	}{
		{"well within", 4, true},
		{"2 KiB over, one frame", 10, false},
		{"8 KiB over, one frame", 16, false},
		{"far over, CONTINUATIONs", 40, false},
	}
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		e := impl.start(t, Options{Handler: c.counting(okHandler), MaxHeaderBytes: limit})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := c.n.Load()
				var extra [][2]string
				for i := range tc.fields {
					// Distinct random values: hpack can neither index nor
					// compress them much.
					extra = append(extra, [2]string{"x-pad-" + strconv.Itoa(i), rand.Text()[:26] + strings.Repeat(rand.Text(), 38)[:974]})
				}
				cl := dialRawH2(t, e.https)
				cl.headers(1, request("GET", "/", extra...), true)
				res := cl.response(1, true)
				if tc.ok {
					if res.status != "200" {
						t.Fatalf("header list within the limit: %+v", res)
					}
					return
				}
				if !res.refused() {
					t.Fatalf("header list of %d bytes not refused (limit %d): %+v", tc.fields*1000, limit, res)
				}
				if res.status != "" && res.status != "431" {
					t.Fatalf("answered %s, want 431 (or a reset)", res.status)
				}
				if n := c.n.Load() - before; n != 0 {
					t.Fatalf("the handler was called for a header list over the limit")
				}
			})
		}
	})
}

// TestH2ContinuationFlood: a HEADERS frame followed by an endless run of
// CONTINUATION frames, never END_HEADERS (CVE-2024-27316's attack), is cut
// off: the server closes the connection (after a GOAWAY) long before the
// flood ends, rather than buffering it, and no handler is called. The
// flood is bounded: 20,000 frames of about 1 KiB, 20 MiB, far more than
// the sockets' buffers hold, so a server that kept reading would let the
// whole flood through.
func TestH2ContinuationFlood(t *testing.T) {
	const frames = 20000
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		e := impl.start(t, Options{Handler: c.counting(okHandler)})
		cl := dialRawH2(t, e.https)
		if err := cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(request("GET", "/"))}); err != nil {
			t.Fatal(err)
		}
		read := make(chan h2Resp, 1)
		go func() {
			// The reader: GOAWAY or the connection's end. Every read is
			// bounded, and the test closes the connection when done.
			var res h2Resp
			for !res.closed {
				f, err := cl.fr.ReadFrame()
				if err != nil {
					res.closed = true
					break
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					res.goaway, res.goCode = true, g.ErrCode
				}
			}
			read <- res
		}()
		_ = cl.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_ = cl.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		sent := 0
		for ; sent < frames; sent++ {
			frag := cl.block([][2]string{{"x-flood-" + strconv.Itoa(sent), strings.Repeat("f", 1000)}})
			if err := cl.fr.WriteContinuation(1, false, frag); err != nil {
				break
			}
		}
		var res h2Resp
		select {
		case res = <-read:
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection still open after %d CONTINUATION frames", sent)
		}
		if sent == frames {
			t.Fatalf("all %d CONTINUATION frames (%d MiB) were taken", frames, frames>>10)
		}
		if res.goaway && res.goCode == http2.ErrCodeNo {
			t.Fatalf("GOAWAY %v, want an error code", res.goCode)
		}
		if n := c.n.Load(); n != 0 {
			t.Fatalf("the handler was called %d times", n)
		}
		t.Logf("cut after %d CONTINUATION frames; GOAWAY %v %v", sent, res.goaway, res.goCode)
		// The server is fine: a new connection is served.
		if res := dialRawH2(t, e.https).get(1, "/"); res.status != "200" {
			t.Fatalf("after the flood: %+v", res)
		}
	})
}

// TestH2RapidReset: a client that opens streams and resets them at once,
// 2,000 times (CVE-2023-44487), gets no more handlers running at once
// than the streams the server advertised, at most one handler call per
// stream, and leaves the server serving a second connection.
func TestH2RapidReset(t *testing.T) {
	const streams = 2000
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		h := c.counting(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/fast" {
				return
			}
			select { // a slow application: held until the client leaves
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		e := impl.start(t, Options{Handler: h})
		cl := dialRawH2(t, e.https)
		maxStreams := int64(cl.setting(http2.SettingMaxConcurrentStreams))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := cl.fr.ReadFrame(); err != nil {
					return
				}
			}
		}()
		_ = cl.c.SetDeadline(time.Now().Add(20 * time.Second))
		sent := 0
		block := cl.block(request("GET", "/"))
		for id := uint32(1); sent < streams; id += 2 {
			if cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}) != nil ||
				cl.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				break
			}
			sent++
		}
		// A second connection is served while the first is still open.
		if res := dialRawH2(t, e.https).get(1, "/fast"); res.status != "200" {
			t.Fatalf("second connection during the reset flood: %+v", res)
		}
		cl.c.Close()
		<-done
		testutil.WaitFor(t, 10*time.Second, func() bool { return c.running.Load() == 0 }, "handlers still running after the client left")
		n, peak := c.n.Load(), c.peak.Load()
		t.Logf("%d streams opened and reset: %d handler calls, at most %d at once (advertised %d)", sent, n, peak, maxStreams)
		if n > int64(sent)+1 {
			t.Fatalf("%d handler calls for %d streams", n, sent)
		}
		if peak > maxStreams+1 { // +1: the second connection's request
			t.Fatalf("%d handlers at once, over the %d streams advertised", peak, maxStreams)
		}
	})
}

// TestH2RequestLineLimit: the listener's MaxRequestLine holds over HTTP/2
// too (method, path and protocol as they would make a request line):
// longer gets 414 and never reaches the application.
func TestH2RequestLineLimit(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		var c calls
		e := impl.start(t, Options{Handler: c.counting(okHandler), MaxRequestLine: 1 << 10})
		cl := dialRawH2(t, e.https)
		if res := cl.get(1, "/"+strings.Repeat("a", 900)); res.status != "200" {
			t.Fatalf("path within the limit: %+v", res)
		}
		if res := cl.get(3, "/"+strings.Repeat("a", 1100)); res.status != "414" {
			t.Fatalf("path over the limit: %s, want 414", res.status)
		}
		if n := c.n.Load(); n != 1 {
			t.Fatalf("%d handler calls, want 1", n)
		}
	})
}

// TestH2RequestAsTheApplicationSeesIt: the http.Request an HTTP/2 stream
// becomes is what the gateway's layers read: protocol 2.0, r.TLS with
// ALPN h2, Host from :authority, path and query from :path, the body's
// length from content-length, repeated fields kept in order, cookie
// crumbs joined with "; " (RFC 9113 §8.2.3), and a remote address.
func TestH2RequestAsTheApplicationSeesIt(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			alpn := ""
			if r.TLS != nil {
				alpn = r.TLS.NegotiatedProtocol
			}
			fmt.Fprintf(w, "%s %d|%s|%s|%s|%s|%s|%d|%s|%q|%q|%v",
				r.Proto, r.ProtoMajor, alpn, r.Method, r.Host, r.URL.Path, r.URL.RawQuery, r.ContentLength, b,
				r.Header.Values("X-Multi"), r.Header.Get("Cookie"), r.RemoteAddr != "")
		})})
		cl := dialRawH2(t, e.https)
		cl.headers(1, request("PUT", "/a/b%20c?x=1&y=2",
			[2]string{"content-length", "4"}, [2]string{"x-multi", "one"}, [2]string{"cookie", "a=1"},
			[2]string{"x-multi", "two"}, [2]string{"cookie", "b=2"}), false)
		cl.data(1, []byte("body"), true)
		res := cl.response(1, true)
		want := `HTTP/2.0 2|h2|PUT|api.example.test|/a/b c|x=1&y=2|4|body|["one" "two"]|"a=1; b=2"|true`
		if res.status != "200" || string(res.body) != want {
			t.Fatalf("the application saw\n%s\nwant\n%s", res.body, want)
		}
	})
}
