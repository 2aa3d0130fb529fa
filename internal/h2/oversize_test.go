package h2

import (
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headersSplit sends a request's header block on stream id as a HEADERS
// frame and as many CONTINUATIONs as the server's 16 KiB frames take.
func (rc *rawClient) headersSplit(id uint32, end bool, fields ...string) {
	rc.t.Helper()
	rc.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	blk := rc.hb.Bytes()
	first := blk[:min(maxFrameRead, len(blk))]
	err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(first) == len(blk)})
	for rest := blk[len(first):]; len(rest) > 0 && err == nil; {
		n := min(maxFrameRead, len(rest))
		err = rc.fr.WriteContinuation(id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	if err != nil {
		rc.t.Fatal(err)
	}
}

// noise is n bytes of hex from seed: HPACK's Huffman code shrinks it by a
// third at most, and each value is new to the table.
func noise(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, (n+1)/2)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)[:n]
}

// TestOversizedHeaderListAnsweredOnItsStream: a header list over
// MaxHeaderBytes, whether two fields of it or many add up to three times
// it over CONTINUATIONs, is answered 431 on
// its stream, and the connection goes on: a stream open on it meanwhile
// completes, and a later request whose block indexes fields the oversized
// block added to the HPACK table (before and after the field that broke
// the bound) is read as sent, so the table stayed the client's. Before,
// the connection ended (GOAWAY COMPRESSION_ERROR or PROTOCOL_ERROR) and
// took the open stream with it.
func TestOversizedHeaderListAnsweredOnItsStream(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10 // the gateway's default max_header_bytes
	var many []string      // ~200 KB of 1 KB fields
	for i := range 200 {
		many = append(many, fmt.Sprintf("x-pad-%d", i), noise(uint64(i), 1000))
	}
	cases := []struct {
		name string
		big  []string
	}{
		{"a field of 60 KB and one of 10 KB", []string{"cookie", noise(1, 60<<10), "x-more", noise(7, 10<<10)}},
		{"two fields of 50 KB", []string{"x-big", noise(2, 50<<10), "x-big2", noise(8, 50<<10)}},
		{"200 KB of fields", many},
	}
	var handled atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.Header.Get("X-Before")+"|"+r.Header.Get("X-After"))
		w.Header().Set("X-Body", fmt.Sprint(len(b)))
	})
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		h(w, r)
	}), MaxHeaderBytes: limit})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			handled.Store(0)
			rc := dialRaw(t, addr)
			// Stream 1 is open, its body still to come.
			rc.headers(1, false, reqFields("POST", "/upload")...)
			fields := reqFields("GET", "/", "x-before", "b-"+tc.name)
			fields = append(fields, tc.big...)
			fields = append(fields, "x-after", "a-"+tc.name)
			rc.headersSplit(3, true, fields...)
			got, body := rc.response(3)
			if m := fieldMap(got); m[":status"] != "431" {
				t.Fatalf("oversized header list: %v %q, want 431", got, body)
			}
			if err := rc.fr.WriteData(1, true, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			if m := fieldMap(mustResponse(rc, 1)); m[":status"] != "200" || m["x-body"] != "5" {
				t.Fatalf("the stream open alongside: %v", m)
			}
			// x-before and x-after go as indexes into the table the
			// oversized block filled.
			rc.headers(5, true, reqFields("GET", "/", "x-before", "b-"+tc.name, "x-after", "a-"+tc.name)...)
			if m := fieldMap(mustResponse(rc, 5)); m[":status"] != "200" || m["x-echo"] != "b-"+tc.name+"|a-"+tc.name {
				t.Fatalf("a request after the oversized one: %v", m)
			}
			if n := handled.Load(); n != 2 {
				t.Fatalf("the handler ran %d times, want 2 (not for the oversized list)", n)
			}
		})
	}
}

func mustResponse(rc *rawClient, id uint32) []string {
	rc.t.Helper()
	f, _ := rc.response(id)
	if len(f) == 0 || !strings.HasPrefix(f[0], ":") {
		rc.t.Fatalf("stream %d: no response head: %v", id, f)
	}
	return f
}

// TestOversizedTrailersResetTheStream: request trailers over
// MaxHeaderBytes reset their stream, as malformed trailers do, rather than
// reach the handler with some of their fields silently dropped (a
// trailer block in one frame) or end the connection (one over
// CONTINUATIONs); the connection goes on.
func TestOversizedTrailersResetTheStream(t *testing.T) {
	t.Parallel()
	const limit = 8 << 10
	cases := []struct {
		name string
		big  []string
	}{
		{"one frame", []string{"x-big", noise(3, 6<<10), "x-big2", noise(6, 6<<10)}},
		{"continuations", []string{"x-big", noise(4, 7<<10), "x-big", noise(5, 7<<10), "x-big", noise(9, 7<<10)}},
	}
	var handled atomic.Int32
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("X-Trailer", r.Trailer.Get("X-Small"))
	}), MaxHeaderBytes: limit})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			handled.Store(0)
			rc := dialRaw(t, addr)
			rc.headers(1, false, reqFields("POST", "/", "trailer", "x-small, x-big")...)
			if err := rc.fr.WriteData(1, false, []byte("body")); err != nil {
				t.Fatal(err)
			}
			rc.headersSplit(1, true, append([]string{"x-small", "s"}, tc.big...)...)
			var reset bool
			rc.until("stream 1's end", func(f http2.Frame) bool {
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
					reset = true
				}
				return endOf(1)(f)
			})
			if !reset {
				t.Fatalf("oversized trailers did not reset their stream")
			}
			rc.headers(3, true, reqFields("GET", "/")...)
			if m := fieldMap(mustResponse(rc, 3)); m[":status"] != "200" {
				t.Fatalf("the next request: %v", m)
			}
		})
	}
}

// TestOversizedFieldEndsTheConnection: one field value over MaxHeaderBytes
// ends the connection (COMPRESSION_ERROR), as x/net's Framer does: the
// HPACK decoder would buffer it whole and keep that memory for the
// connection's life, so the bound on a string is the list's own.
func TestOversizedFieldEndsTheConnection(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	_, addr := serve(t, Options{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), MaxHeaderBytes: limit})
	rc := dialRaw(t, addr)
	rc.hb.Reset()
	fields := append(reqFields("GET", "/"), "cookie", noise(1, 100<<10))
	for i := 0; i+1 < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	// Written as far as the server reads: it ends the connection part way.
	blk := rc.hb.Bytes()
	err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:maxFrameRead], EndStream: true})
	for rest := blk[maxFrameRead:]; len(rest) > 0 && err == nil; {
		n := min(maxFrameRead, len(rest))
		err = rc.fr.WriteContinuation(1, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	var code http2.ErrCode = 0xff
	rc.until("GOAWAY", func(f http2.Frame) bool {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			code = g.ErrCode
			return true
		}
		return false
	})
	if code != http2.ErrCodeCompression {
		t.Fatalf("GOAWAY %v, want COMPRESSION_ERROR", code)
	}
}
