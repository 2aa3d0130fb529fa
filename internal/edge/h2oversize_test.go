package edge

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// TestH2OversizedFieldAnsweredOnItsStream: on gatehouse's own HTTP/2
// server, a header list over max_header_bytes (a 60 KB cookie and 10 KB
// more, under the default 64 KiB) gets the listener's 431 problem on its stream, and
// the connection goes on: the next request on it reaches the application.
// Before, the connection ended with GOAWAY COMPRESSION_ERROR.
func TestH2OversizedFieldAnsweredOnItsStream(t *testing.T) {
	var c calls
	e := h2Impls[0].start(t, Options{Handler: c.counting(okHandler)}) // net/http's HTTP/2 ends the connection
	cl := dialRawH2(t, e.https)
	noise := strings.Repeat(rand.Text(), 4000) // hpack cannot shrink it much
	cl.headers(1, request("GET", "/", [2]string{"cookie", noise[:60<<10]}, [2]string{"x-more", noise[1<<10 : 11<<10]}), true)
	res := cl.response(1, true)
	if res.status != "431" || res.header.Get("Content-Type") != problem.ContentType || res.goaway || res.closed {
		t.Fatalf("70 KB of fields: %+v, want the 431 problem and the connection kept", res)
	}
	cl.headers(3, request("GET", "/"), true)
	if res := cl.response(3, true); res.status != "200" || string(res.body) != "ok" {
		t.Fatalf("the next request on the connection: %+v", res)
	}
	if n := c.n.Load(); n != 1 {
		t.Fatalf("the application saw %d requests, want 1", n)
	}
}
