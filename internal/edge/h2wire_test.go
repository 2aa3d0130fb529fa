package edge

import (
	"crypto/rand"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestH2ResponseHeaderEncoding: what the server encodes keeps to the
// client's settings. With SETTINGS_HEADER_TABLE_SIZE 0 the server's HPACK
// encoder uses no dynamic table (RFC 7541 §4.2; the client's decoder has
// none, so a reference into one fails the read), over several responses
// repeating the same fields; a response header block larger than a frame
// is split into HEADERS and CONTINUATION frames of at most the client's
// SETTINGS_MAX_FRAME_SIZE; and a large body comes in DATA frames of at
// most that size too (rawH2 refuses any larger frame).
func TestH2ResponseHeaderEncoding(t *testing.T) {
	big := strings.Repeat(rand.Text(), 1600)[:40<<10] // random: hpack cannot shrink it
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Repeat", "the same value every time")
			if r.URL.Path == "/big" {
				w.Header().Set("X-Big", big)
				_, _ = io.WriteString(w, strings.Repeat("d", 100<<10))
				return
			}
			_, _ = io.WriteString(w, "ok")
		})})
		cl := dialRawH2(t, e.https, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		cl.fr.ReadMetaHeaders = hpack.NewDecoder(0, nil)
		for i := range 3 {
			res := cl.get(uint32(2*i+1), "/")
			if res.status != "200" || res.header.Get("X-Repeat") != "the same value every time" || res.closed {
				t.Fatalf("response %d with no dynamic table: %+v", i, res)
			}
		}
		res := cl.get(7, "/big")
		if res.status != "200" || res.header.Get("X-Big") != big || len(res.body) != 100<<10 {
			t.Fatalf("a 40 KiB header and a 100 KiB body: status %q, header %d bytes, body %d bytes, closed %v",
				res.status, len(res.header.Get("X-Big")), len(res.body), res.closed)
		}
	})
}

// TestH2ExpectContinue: a request with "expect: 100-continue" gets an
// interim 100 response once the handler reads the body, then the body
// goes through and the final response follows on the same stream.
func TestH2ExpectContinue(t *testing.T) {
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
			}
			_, _ = w.Write(b)
		})})
		cl := dialRawH2(t, e.https)
		cl.headers(1, request("POST", "/", [2]string{"expect", "100-continue"}), false)
		for got100 := false; !got100; {
			f, err := cl.read()
			if err != nil {
				t.Fatalf("no 100 Continue: %v", err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok {
				if s := h.PseudoValue("status"); s != "100" || h.StreamEnded() {
					t.Fatalf("before the body: %s, want 100 (end of stream %v)", s, h.StreamEnded())
				}
				got100 = true
			}
		}
		cl.data(1, []byte("the body, after 100"), true)
		if res := cl.response(1, true); res.status != "200" || string(res.body) != "the body, after 100" {
			t.Fatalf("final response: %+v", res)
		}
	})
}

// TestH2IdleConnectionClosed: an HTTP/2 connection with no stream open
// for IdleTimeout is closed (after a GOAWAY NO_ERROR, if any), and the
// edge stops counting it.
func TestH2IdleConnectionClosed(t *testing.T) {
	t.Parallel() // mostly waits out bounds; its own servers, no process-wide state
	forEachH2(t, func(t *testing.T, impl h2Impl) {
		e := impl.start(t, Options{Handler: http.HandlerFunc(okHandler), IdleTimeout: 500 * time.Millisecond})
		cl := dialRawH2(t, e.https)
		if res := cl.get(1, "/"); res.status != "200" {
			t.Fatalf("%+v", res)
		}
		res := cl.drain(0) // each read waits rawH2ReadWait at most
		if res.goaway && res.goCode != http2.ErrCodeNo {
			t.Fatalf("idle connection closed with GOAWAY %v", res.goCode)
		}
		testutil.WaitFor(t, 5*time.Second, func() bool { return e.ActiveConnections() == 0 }, "the idle connection is still counted")
	})
}
