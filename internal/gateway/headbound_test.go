package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHostResponseHeadBound: a host's response head over 1 MiB gets the
// client a 502 problem whatever way the gateway took to the host (the
// fast path for a GET, ReverseProxy for a request with a body, an h2c
// host), and one under it passes whole. A tenant's host cannot make the
// gateway hold heads of up to net/http's 10 MB default in memory, one per
// request in flight, on the paths the fast path does not take.
func TestHostResponseHeadBound(t *testing.T) {
	tests := []struct {
		name, scheme, method string
		size                 int
		want                 int
	}{
		{"fast path over", "http", "GET", 1<<20 + 1024, http.StatusBadGateway},
		{"reverse proxy over", "http", "POST", 1<<20 + 1024, http.StatusBadGateway},
		{"h2c over", "h2c", "GET", 1<<20 + 1024, http.StatusBadGateway},
		{"fast path under", "http", "GET", 512 << 10, http.StatusOK},
		{"reverse proxy under", "http", "POST", 512 << 10, http.StatusOK},
		{"h2c under", "h2c", "GET", 512 << 10, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			big := strings.Repeat("a", tt.size)
			s := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("X-Big", big)
				_, _ = io.WriteString(w, "body")
			}))
			t.Cleanup(s.Close)
			e.addHost("h1", "hello", tt.scheme, strings.Replace(s.URL, "http:", tt.scheme+":", 1))
			var body io.Reader
			if tt.method != "GET" {
				body = strings.NewReader("upload")
			}
			res := e.do(tt.method, "hello.apps.test", "/", nil, body)
			if tt.want != http.StatusOK {
				wantProblem(t, res, tt.want)
				if res.Header.Get("X-Big") != "" {
					t.Fatal("the oversized field reached the client")
				}
				return
			}
			if got := readBody(t, res); res.StatusCode != tt.want || got != "body" || len(res.Header.Get("X-Big")) != tt.size {
				t.Fatalf("status %d, body %q, X-Big of %d bytes; want %d, %q, %d", res.StatusCode, got, len(res.Header.Get("X-Big")), tt.want, "body", tt.size)
			}
		})
	}
}
