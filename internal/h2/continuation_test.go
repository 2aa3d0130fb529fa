package h2

import (
	"net/http"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestEmptyContinuationsBounded: a header block's size on the wire is
// bounded (blockFactor times the header list's), so that a block that
// never ends (the CONTINUATION flood, CVE-2024-27316) ends the
// connection. CONTINUATION frames that carry nothing are on the wire
// too: a stream of them, which decodes to nothing and never reaches the
// list's bound, must meet the same end, not be read for as long as the
// client sends them (ReadHeaderTimeout is off here, as it may be).
func TestEmptyContinuationsBounded(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	_, dial := serveTLS(t, Options{
		Handler:        http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }),
		MaxHeaderBytes: 4 << 10, // a block of at most ~17 KiB: ~2,000 empty frames
	})
	rc := dial()
	rc.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/"}, {":authority", "a.example"}} {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hb.Bytes(), EndStream: true}); err != nil {
		t.Fatal(err)
	}
	flood(t, rc, 100_000, func(int) error { return rc.fr.WriteContinuation(1, false, nil) },
		http2.ErrCodeProtocol, "a block of empty CONTINUATION frames was read on and on")
	if n := served.Load(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
}
