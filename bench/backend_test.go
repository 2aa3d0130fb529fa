//go:build linux

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestBackendBody: the L7 test's path for each size answers exactly that
// many bytes, and a size out of range is refused.
func TestBackendBody(t *testing.T) {
	srv := httptest.NewServer(backendHandler())
	defer srv.Close()
	for _, tt := range []struct {
		path   string
		status int
		size   int64
	}{
		{bodyPath(smallBody), 200, smallBody},
		{bodyPath(1), 200, 1},
		{bodyPath(64 << 10), 200, 64 << 10},
		{bodyPath(maxBody), 200, maxBody},
		{bodyPath(300<<10 + 7), 200, 300<<10 + 7}, // more than one chunk, not a multiple
		{"/body/0", 400, -1},
		{"/body/" + strconv.Itoa(maxBody+1), 400, -1},
		{"/body/x", 400, -1},
	} {
		resp, err := http.Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tt.status || (tt.size >= 0 && (n != tt.size || resp.ContentLength != tt.size)) {
			t.Errorf("GET %s = %d, %d bytes (Content-Length %d), %v; want %d, %d bytes", tt.path, resp.StatusCode, n, resp.ContentLength, err, tt.status, tt.size)
		}
	}
	if got := bodyPath(smallBody); got != "/" {
		t.Errorf("bodyPath(1024) = %q: the issue's L7 test is /", got)
	}
}

func TestSizeName(t *testing.T) {
	for n, want := range map[int]string{1024: "1 KiB", 64 << 10: "64 KiB", 1 << 20: "1 MiB", 16 << 20: "16 MiB", 1000: "1000 B", 1536: "1536 B"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q, want %q", n, got, want)
		}
	}
}
