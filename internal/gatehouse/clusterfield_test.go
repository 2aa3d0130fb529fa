package gatehouse

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// TestRefusalsNameTheCluster: the answers written before the gateway's
// chain runs — the 414 and 431 of edge and of the connection guard, and
// what the guard writes in place of net/http's own error answers — carry
// X-Gatehouse-Cluster, as DESIGN §5.2 says every response does, on the
// plaintext listener, on HTTP/1.1 over TLS (the lane, which hands such
// heads to net/http) and over HTTP/2.
func TestRefusalsNameTheCluster(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listeners.MaxRequestLine = 8 << 10
	cfg.Listeners.MaxHeaderBytes = 16 << 10
	r := start(t, cfg)
	// An app, for the https listener's certificate.
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	const host = "Host: hello.test.local\r\n"
	field := func(n int) string { return "X-Big: " + strings.Repeat("b", n) + "\r\n" }
	tests := []struct {
		name, raw string
		status    int
	}{
		// net/http reads the line whole; edge answers.
		{"request line over the limit", "GET /" + strings.Repeat("a", 9<<10) + " HTTP/1.1\r\n" + host + "\r\n", 414},
		// Longer than net/http would read: the guard cuts it off.
		{"request line past what net/http reads", "GET /" + strings.Repeat("a", 40<<10) + " HTTP/1.1\r\n" + host + "\r\n", 414},
		// Under what net/http reads (the limit plus 4 KiB): edge answers.
		{"header block over the limit", "GET / HTTP/1.1\r\n" + host + field(17<<10) + "\r\n", 431},
		// Past it: net/http answers, the guard in its place.
		{"header block past what net/http reads", "GET / HTTP/1.1\r\n" + host + field(28<<10) + "\r\n", 431},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"unknown expectation", "GET / HTTP/1.1\r\n" + host + "Expect: foo\r\n\r\n", 417},
		{"both framings", "POST / HTTP/1.1\r\n" + host + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
	}
	dials := []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"http", func() (net.Conn, error) { return net.Dial("tcp", r.g.Addrs().HTTP) }},
		{"https", func() (net.Conn, error) {
			return tls.Dial("tcp", r.g.Addrs().HTTPS, &tls.Config{ServerName: "hello.test.local", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		}},
		// DESIGN §3's limits hold on every HTTP listener.
		{"management", func() (net.Conn, error) { return net.Dial("tcp", r.g.Addrs().Management) }},
	}
	for _, d := range dials {
		for _, tt := range tests {
			t.Run(d.name+"/"+tt.name, func(t *testing.T) {
				c, err := d.dial()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.WriteString(c, tt.raw)
				b, _ := io.ReadAll(c) // every one of these answers closes
				res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
				if err != nil {
					t.Fatalf("%v in %q", err, b)
				}
				if res.StatusCode != tt.status || res.Header.Get("Content-Type") != problem.ContentType {
					t.Fatalf("got %q, want a %d problem", b, tt.status)
				}
				if got := res.Header.Values("X-Gatehouse-Cluster"); len(got) != 1 || got[0] != "one" {
					t.Errorf("X-Gatehouse-Cluster %q, want one: %q", got, b)
				}
			})
		}
	}

	// The management listener's answers, its own and the API's, name the
	// cluster too.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/api/v3/apps", "/nowhere"} {
		t.Run("management"+path, func(t *testing.T) {
			res, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + r.g.Addrs().Management + path)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if got := res.Header.Values("X-Gatehouse-Cluster"); len(got) != 1 || got[0] != "one" {
				t.Errorf("%d: X-Gatehouse-Cluster %q, want one", res.StatusCode, got)
			}
		})
	}

	pad := func(n int) [][2]string {
		var f [][2]string
		for i := range n {
			// Pseudo-random values: HPACK cannot shrink the list much.
			v, _ := io.ReadAll(pseudoRandom(uint64(100+i), 500))
			f = append(f, [2]string{"x-pad-" + strconv.Itoa(i), hex.EncodeToString(v)})
		}
		return f
	}
	for _, tt := range []struct {
		name, path string
		fields     [][2]string
		status     int
	}{
		{"h2/request line over the limit", "/" + strings.Repeat("a", 9<<10), nil, 414},
		{"h2/header list over the limit", "/", pad(18), 431},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRawH2(t, r.g.Addrs().HTTPS, "hello.test.local")
			c.open(t, 1, "GET", tt.path, true, tt.fields...)
			c.until(t, "the answer", func() bool { return c.ended[1] || c.reset[1] })
			if got := c.status[1]; got != strconv.Itoa(tt.status) || c.header[1].Get("Content-Type") != problem.ContentType {
				t.Fatalf("got %s %v, want a %d problem", got, c.header[1], tt.status)
			}
			if got := c.header[1].Values("X-Gatehouse-Cluster"); len(got) != 1 || got[0] != "one" {
				t.Errorf("X-Gatehouse-Cluster %q, want one: %v", got, c.header[1])
			}
		})
	}
}
