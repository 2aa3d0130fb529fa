package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHostStatusOver599Gets502: a host's status line with a code over 599
// (RFC 9110 §15: a status code is 100-599) reaches no client: it gets a
// 502, as for a code under 100 (DESIGN §2 step 10), on every way to the
// host: the fast path (a GET to an http host), ReverseProxy (a POST to
// it; an https host; an h2c host, whose HTTP/2 client takes any number as
// :status), over HTTP/1.1 and HTTP/2 alike, and the answer is counted
// against the host as a bad one. A 599 still passes.
func TestHostStatusOver599Gets502(t *testing.T) {
	t.Parallel()
	addr := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			code := strings.TrimPrefix(req.URL.Path, "/")
			if _, err := fmt.Fprintf(c, "HTTP/1.1 %s Odd\r\nContent-Length: 4\r\n\r\nbody", code); err != nil {
				return
			}
		}
	})
	byPath := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code) // net/http writes 100-999
		_, _ = io.WriteString(w, "body")
	})
	tlsHost := httptest.NewTLSServer(byPath)
	t.Cleanup(tlsHost.Close)
	h2c := h2cServer(byPath)
	t.Cleanup(h2c.Close)

	tests := []struct {
		name, scheme, url, method string
	}{
		{"fast path", "http", "http://" + addr, "GET"},
		{"reverse proxy", "http", "http://" + addr, "POST"},
		{"https host", "https", tlsHost.URL, "GET"},
		{"h2c host", "h2c", strings.Replace(h2c.URL, "http:", "h2c:", 1), "GET"},
	}
	for _, tt := range tests {
		e := newEnv(t, nil)
		e.addHost("h1", "hello", tt.scheme, tt.url)
		_, httpsAddr := e.serve(false)
		bad := 0
		for _, code := range []int{600, 999, 599} {
			for _, h2 := range []bool{false, true} {
				tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "hello." + testZone}, Protocols: new(http.Protocols)}
				tr.Protocols.SetHTTP1(!h2)
				tr.Protocols.SetHTTP2(h2)
				var body io.Reader
				if tt.method == "POST" {
					body = strings.NewReader("upload")
				}
				req, err := http.NewRequest(tt.method, "https://"+httpsAddr+"/"+strconv.Itoa(code), body)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = "hello." + testZone
				res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
				if err != nil {
					t.Errorf("%s, %d, HTTP/2 %v: %v", tt.name, code, h2, err)
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				tr.CloseIdleConnections()
				want := http.StatusBadGateway
				if code < 600 {
					want = code
				} else {
					bad++
				}
				if res.StatusCode != want || (want == http.StatusBadGateway && string(b) == "body") {
					t.Errorf("%s, host's %d, HTTP/2 %v: got %d (%q), want %d", tt.name, code, h2, res.StatusCode, b, want)
				}
			}
		}
		if n := testutil.ToFloat64(e.gw.Metrics().UpstreamErrors.WithLabelValues("hello", "other")); int(n) != bad {
			t.Errorf("%s: %v upstream errors counted, want %d (one per status over 599)", tt.name, n, bad)
		}
	}
}
