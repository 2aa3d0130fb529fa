package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHostSendingEndless1xxGets502: a host that answers with 1xx after
// 1xx and never a final status gets its client a 502 at the sixth (DESIGN
// §2 step 10: five at most), on every way to the host: the fast path (a
// GET to an http host), ReverseProxy (a POST to it; an h2c host), over
// HTTP/1.1 and HTTP/2 alike. ReverseProxy passed each 1xx on through its
// trace, and net/http's client, which counts none once a trace takes
// them, read them until the head's timeout: the client waited that long
// for a 504 while the gateway parsed 1xx heads as fast as the host could
// send them.
func TestHostSendingEndless1xxGets502(t *testing.T) {
	const hints = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	// stop ends the hosts' loops at cleanup (they stop at a write error
	// otherwise: the gateway closing its connection).
	stop := make(chan struct{})
	addr := rawHost(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		for i := 0; i < 2000; i++ { // 20 s at most
			if _, err := io.WriteString(c, hints); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { close(stop) }) // before rawHost waits for its connections
	h2c := h2cServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Link", "</a.css>; rel=preload")
		for i := 0; i < 2000; i++ {
			w.WriteHeader(http.StatusEarlyHints)
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(h2c.Close)

	tests := []struct {
		name, scheme, url, method string
	}{
		{"fast path", "http", "http://" + addr, "GET"},
		{"reverse proxy", "http", "http://" + addr, "POST"},
		{"h2c host", "h2c", strings.Replace(h2c.URL, "http:", "h2c:", 1), "GET"},
	}
	for _, tt := range tests {
		for _, h2 := range []bool{false, true} {
			e := newEnv(t, nil)
			e.addHost("h1", "hello", tt.scheme, tt.url)
			_, httpsAddr := e.serve(false)
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "hello." + testZone}, Protocols: new(http.Protocols)}
			tr.Protocols.SetHTTP1(!h2)
			tr.Protocols.SetHTTP2(h2)
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader("upload")
			}
			req, err := http.NewRequest(tt.method, "https://"+httpsAddr+"/", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "hello." + testZone
			start := time.Now()
			res, err := (&http.Client{Transport: tr, Timeout: 12 * time.Second}).Do(req)
			if err != nil {
				t.Errorf("%s, HTTP/2 %v: %v", tt.name, h2, err)
				continue
			}
			took := time.Since(start)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			tr.CloseIdleConnections()
			if res.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
				t.Errorf("%s, HTTP/2 %v: answered over %s", tt.name, h2, res.Proto)
			}
			// The 30 s head timeout is far off: only the count ends it.
			if res.StatusCode != http.StatusBadGateway || took > 10*time.Second {
				t.Errorf("%s, HTTP/2 %v: %d after %v (%s); want 502 at the sixth 1xx", tt.name, h2, res.StatusCode, took.Round(time.Millisecond), b)
			}
		}
	}
}
