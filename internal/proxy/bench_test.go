package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
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

// BenchmarkReadFastHead is the fast path reading a host's response head
// and adding it to the response's (cleared) header map: an application's
// eight fields, and a small one (three, as the load harness's backend
// sends), whose values take the small block.
func BenchmarkReadFastHead(b *testing.B) {
	for _, bc := range []struct {
		name, head string
		fields     int
	}{
		{"8-fields", "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 1024\r\n" +
			"Date: Tue, 01 Dec 2026 22:01:00 GMT\r\nCache-Control: private, max-age=0\r\nEtag: \"33a64df551425fcc55e4d42a148795d9f25f89d4\"\r\n" +
			"Vary: Accept-Encoding\r\nSet-Cookie: session=0123456789abcdef; Path=/; HttpOnly\r\nServer: app\r\n\r\n", 9},
		{"3-fields", "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1024\r\n" +
			"Date: Tue, 01 Dec 2026 22:01:00 GMT\r\n\r\n", 4},
	} {
		b.Run(bc.name, func(b *testing.B) {
			src := strings.NewReader(bc.head)
			br := bufio.NewReaderSize(src, 4096)
			h := make(http.Header, 16)
			cluster := []string{"c1"}
			var text []byte // the connection's scratch, as exchangeFast keeps it
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(bc.head)
				br.Reset(src)
				clear(h)
				res := fastResp{text: text}
				if err := readFastHead(br, &res); err != nil {
					b.Fatal(err)
				}
				res.copyTo(h, cluster)
				text = res.text[:0]
				if res.length != 1024 || len(h) != bc.fields {
					b.Fatalf("length %d, %d fields", res.length, len(h))
				}
			}
		})
	}
}
