package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// head is a GET whose request line and header block together take size
// bytes, padded with X-Pad fields of at most 1000 bytes each.
func head(size int) string {
	h := "GET / HTTP/1.1\r\nHost: w\r\n"
	for len(h)+2 < size {
		n := min(1000, size-len(h)-2-len("X-Pad: \r\n"))
		if n < 1 {
			h += strings.Repeat("Y", size-len(h)-2-len("Y: \r\n")-1) + ": z\r\n" // fill the last few bytes
			break
		}
		h += "X-Pad: " + strings.Repeat("p", n) + "\r\n"
	}
	return h + "\r\n"
}

// TestHeaderBlockLimitExact: a head over MaxHeaderBytes gets 431 and one
// within it is served, on the http and https listeners, through the lane
// and net/http alike (DESIGN §3: header block ≤ 64 KiB, 431; docs/config.md:
// "Largest header block in bytes; larger gets 431"). net/http alone lets
// MaxHeaderBytes plus 4 KiB through.
func TestHeaderBlockLimitExact(t *testing.T) {
	for _, limit := range []int{0, 8 << 10} {
		max := limit
		if max == 0 {
			max = 64 << 10
		}
		for _, noLane := range []bool{false, true} {
			e := start(t, Options{HTTPMode: ModeServe, MaxHeaderBytes: limit, DisableLane: noLane})
			cases := []struct {
				name string
				size int
				want int
			}{
				{"at the limit", max, 200},
				{"1 KiB over", max + 1<<10, 431},
				{"3 KiB over", max + 3<<10, 431},
				{"far over", max + 16<<10, 431},
			}
			for _, tc := range cases {
				req := head(tc.size)
				if len(req) != tc.size {
					t.Fatalf("head(%d) is %d bytes", tc.size, len(req))
				}
				if got := rawRequest(t, e.http, req); got != tc.want {
					t.Errorf("limit %d, lane off %v, http, %s (%d bytes): %d, want %d", max, noLane, tc.name, tc.size, got, tc.want)
				}
				if got := tlsRequest(t, e.https, req); got != tc.want {
					t.Errorf("limit %d, lane off %v, https, %s (%d bytes): %d, want %d", max, noLane, tc.name, tc.size, got, tc.want)
				}
			}
		}
	}
}

// tlsRequest is rawRequest over TLS (HTTP/1.1).
func tlsRequest(t *testing.T, addr, req string) int {
	t.Helper()
	c, err := dialTLS(t, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { _, _ = io.WriteString(c, req) }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
