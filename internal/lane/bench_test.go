package lane

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkServe compares the lane with net/http's server on one
// keep-alive loopback connection, one small GET at a time, with a handler
// that sets a few headers and writes 1 KiB (allocs/op counts the client's
// few too, which are the same for both).
func BenchmarkServe(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd["Content-Type"] = []string{"text/plain"}
		hd["Content-Length"] = []string{"1024"}
		hd["X-Request-Id"] = []string{"abc"}
		_, _ = w.Write(body)
	})
	for _, srv := range []string{"net/http", "lane"} {
		b.Run(srv, func(b *testing.B) {
			var addr string
			if srv == "net/http" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				hs := &http.Server{Handler: h}
				go hs.Serve(ln)
				defer hs.Close()
				addr = ln.Addr().String()
			} else {
				addr = laneListener(b, h)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte("GET /x HTTP/1.1\r\nHost: app.example.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				// The response is one head and 1 KiB; read until its end.
				n := 0
				for {
					k, err := c.Read(buf[n:])
					if err != nil {
						if err == io.EOF {
							b.Fatal("server closed")
						}
						b.Fatal(err)
					}
					n += k
					if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 && n-i-4 >= 1024 {
						break
					}
				}
			}
		})
	}
}

// laneListener serves h with a lane on a loopback listener until tb ends,
// and returns the listener's address.
func laneListener(tb testing.TB, h http.Handler) string {
	tb.Helper()
	s, err := New(Options{Handler: h, Handoff: func(c net.Conn) { c.Close() }, ReadHeaderTimeout: 10 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close(); s.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.ServeConn(c)
		}
	}()
	return ln.Addr().String()
}

// BenchmarkWriterHead is the writer's part of one proxied response like
// the L7 harness's: a head of ten fields (three from the host, seven the
// gateway adds) set in the header map, WriteHeader, a 1 KiB body and the
// end of the handler, into a buffer that goes nowhere.
func BenchmarkWriterHead(b *testing.B) {
	s, err := New(Options{Handler: http.NotFoundHandler(), Handoff: func(net.Conn) {}})
	if err != nil {
		b.Fatal(err)
	}
	bw := newOut(io.Discard, &s.joins)
	w := &writer{cn: &conn{s: s}, bw: bw, hdr: make(http.Header, 16)}
	body := bytes.Repeat([]byte("x"), 1024)
	fields := map[string][]string{
		"Content-Type": {"text/plain"}, "Content-Length": {"1024"}, "Date": {"Tue, 01 Dec 2026 22:01:00 GMT"},
		"X-Gatehouse-Cluster": {"local"}, "X-Request-Id": {"01JDQ5Z8K2M3N4P5Q6R7S8T9V0"}, "Ratelimit-Limit": {"1000000"},
		"Ratelimit-Remaining": {"999999"}, "Ratelimit-Reset": {"60"}, "Ratelimit-Policy": {"1000000;w=60"}, "Vary": {"Origin"},
	}
	b.ReportAllocs()
	for b.Loop() {
		w.reset(false, false)
		h := w.Header()
		for k, v := range fields {
			h[k] = v
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		w.finish()
		if w.err != nil || bw.Buffered() < 1024+200 {
			b.Fatalf("response not written: %v, %d bytes", w.err, bw.Buffered())
		}
		_ = bw.Flush()
	}
}

// BenchmarkParse is the lane reading a browser-like request head (twelve
// fields, some in lower case as HTTP/2-era clients send them) into its
// head and header map.
func BenchmarkParse(b *testing.B) {
	text := "GET /products/42?ref=home HTTP/1.1\r\nHost: shop.apps.example.com\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
		"Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\naccept-language: en-US,en;q=0.5\r\n" +
		"Accept-Encoding: gzip, deflate, br\r\nReferer: https://shop.apps.example.com/\r\n" +
		"Cookie: session=0123456789abcdef\r\nsec-fetch-dest: document\r\nsec-fetch-mode: navigate\r\n" +
		"Sec-Fetch-Site: same-origin\r\nUpgrade-Insecure-Requests: 1\r\nPriority: u=0, i\r\n\r\n"
	var h head
	hdr := make(http.Header, 16)
	var vals [32]string
	b.ReportAllocs()
	for b.Loop() {
		if reason := parse(text, &h, hdr, vals[:]); reason != "" || len(hdr) != 11 {
			b.Fatalf("parse: %q, %d fields", reason, len(hdr))
		}
	}
}
