package lane

import (
	"bufio"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"golang.org/x/net/http/httpguts"
)

// FuzzParse holds the lane to net/http on any bytes a client may send:
// a head the lane takes, net/http must read too, to the same request.
// (The reverse need not hold: the lane leaves a great deal to net/http.)
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		get("/"),
		get("/a/b?c=d&e", "User-Agent: x\r\nAccept: */*\r\n"),
		"HEAD /x HTTP/1.1\r\nhost: a.test\r\nconnection: close\r\n\r\n",
		get("/a%20b/%2F?q=%41;x", "X-A: 1\r\nx-a: 2\r\n"),
		get("/a(b)!*'", "Connection: keep-alive, close\r\n"),
		"GET / HTTP/1.1\r\nHost: [::1]:80\r\nX-Empty:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET /? HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n",
		"DELETE /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0012\r\n\r\n",
		"OPTIONS /p HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end := headEnd(b, 0)
		if end <= 0 {
			return
		}
		var h head
		hdr := http.Header{}
		var vals [4]string
		if parse(string(b[:end]), &h, hdr, vals[:]) != "" {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(b[:end]))))
		if err != nil {
			t.Fatalf("the lane took a head net/http refuses (%v):\n%q", err, b[:end])
		}
		if r.Method != h.method || r.RequestURI != h.target || r.Host != h.host || r.Close != h.close {
			t.Fatalf("request line or host differ: net/http %q %q %q close=%v, lane %q %q %q close=%v",
				r.Method, r.RequestURI, r.Host, r.Close, h.method, h.target, h.host, h.close)
		}
		if *r.URL != *h.url {
			t.Fatalf("URL differs: net/http %#v, lane %#v", *r.URL, *h.url)
		}
		// What httpwire.MarkChecked promises the hygiene layer, which
		// then skips its own look (internal/gateway's desync).
		for k, vs := range hdr {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("the lane took an invalid field name %q", k)
			}
			for _, v := range vs {
				if !httpwire.ValidValue(v) {
					t.Fatalf("the lane took an invalid value %q in %s", v, k)
				}
			}
		}
		if _, te := hdr["Transfer-Encoding"]; te || len(hdr["Content-Length"]) > 1 {
			t.Fatalf("the lane took a framing hygiene refuses: %q", hdr)
		}
		if len(r.Header) == 0 && len(hdr) == 0 {
			return
		}
		if !reflect.DeepEqual(r.Header, hdr) {
			t.Fatalf("headers differ:\nnet/http %q\nlane     %q", r.Header, hdr)
		}
		if r.ContentLength != h.length || len(r.TransferEncoding) != 0 || r.ProtoMajor != 1 || r.ProtoMinor != 1 {
			t.Fatalf("net/http sees another body or version: length %d (lane %d), coding %v, %s", r.ContentLength, h.length, r.TransferEncoding, r.Proto)
		}
	})
}
