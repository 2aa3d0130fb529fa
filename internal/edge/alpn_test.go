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

// TestALPNOffersOfHTTP1: a client that names HTTP/1.0 in its ALPN offer
// (curl 7.88 to 8.4 with --http1.0, Debian 12's curl among them) is
// served HTTP/1 like one that names http/1.1 or nothing, as nginx serves
// it, rather than refused with a no_application_protocol alert: the
// listener serves HTTP/1.0 requests, so it has no reason to refuse the
// protocol's name.
func TestALPNOffersOfHTTP1(t *testing.T) {
	for _, noLane := range []bool{false, true} {
		e := start(t, Options{DisableLane: noLane})
		for _, tc := range []struct {
			offer     []string
			req, want string // the request line's version, the answer's body prefix
			proto     string // the protocol negotiated
		}{
			{nil, "HTTP/1.1", "l7 HTTP/1.1", ""},
			{[]string{"http/1.1"}, "HTTP/1.1", "l7 HTTP/1.1", "http/1.1"},
			{[]string{"http/1.0"}, "HTTP/1.0", "l7 HTTP/1.0", "http/1.0"},
			{[]string{"http/1.1", "http/1.0"}, "HTTP/1.1", "l7 HTTP/1.1", "http/1.1"},
		} {
			c, err := dialTLS(t, e.https, &tls.Config{ServerName: "web." + zone, InsecureSkipVerify: true, NextProtos: tc.offer})
			if err != nil {
				t.Fatalf("lane off %v, offer %q: %v", noLane, tc.offer, err)
			}
			if got := c.ConnectionState().NegotiatedProtocol; got != tc.proto {
				t.Errorf("lane off %v, offer %q: negotiated %q, want %q", noLane, tc.offer, got, tc.proto)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, "GET / "+tc.req+"\r\nHost: web."+zone+"\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("lane off %v, offer %q: %v", noLane, tc.offer, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(string(body), tc.want) {
				t.Errorf("lane off %v, offer %q: %d %q, want 200 %q", noLane, tc.offer, resp.StatusCode, body, tc.want)
			}
		}
	}
}
