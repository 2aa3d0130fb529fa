package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// BenchmarkWriteFast is the fast path's request head to the host for a
// browser-like GET as it leaves the chain: the client's fields, the
// X-Forwarded-* and X-Request-Id the layers set, and the gateway's
// context fields the proxy adds.
func BenchmarkWriteFast(b *testing.B) {
	p, err := New(Options{ClusterID: "c1"})
	if err != nil {
		b.Fatal(err)
	}
	in, err := http.NewRequest(http.MethodGet, "http://shop.apps.example.com/products/42?ref=home", nil)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range map[string]string{
		"User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", "Accept": "text/html,*/*;q=0.8",
		"Accept-Language": "en-US,en;q=0.5", "Accept-Encoding": "gzip, deflate, br", "Cookie": "session=0123456789abcdef",
		"X-Forwarded-For": "192.0.2.10", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.apps.example.com",
		"X-Request-Id": "01JDQ5Z8K2M3N4P5Q6R7S8T9V0",
	} {
		in.Header.Set(k, v)
	}
	host := &route.Host{ID: "h1", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:8080"}}
	a := &attempt{Context: context.Background(), host: host, app: "shop",
		req:  &route.Request{ID: "01JDQ5Z8K2M3N4P5Q6R7S8T9V0", ClientIP: netip.MustParseAddr("192.0.2.10")},
		vals: [3]string{"shop", "192.0.2.10", "01JDQ5Z8K2M3N4P5Q6R7S8T9V0"}}
	var bw bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		bw.Reset()
		if err := p.writeFast(&bw, in, a); err != nil {
			b.Fatal(err)
		}
	}
	if !bytes.Contains(bw.Bytes(), []byte("\r\nCookie: session=0123456789abcdef\r\n")) || bytes.Contains(bw.Bytes(), []byte("\r\nX-Request-Id: 01JDQ5Z8K2M3N4P5Q6R7S8T9V0\r\nX-Request-Id")) {
		b.Fatalf("unexpected head:\n%s", bw.Bytes())
	}
}
