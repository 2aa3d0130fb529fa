package gatehouse

import (
	"net/http"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// rawAnswers are answers no net/http host writes, which parityHost's /raw
// writes as they are on its hijacked connection.
var rawAnswers = map[string]string{
	"status-000": "HTTP/1.1 000 Zero\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"status-099": "HTTP/1.1 099 Low\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
}

// TestParityHostStatusBelow100: a host whose status line has a code under
// 100 sent no HTTP response: the client gets a 502 problem, the same on
// the fast path (GET, HEAD) and through ReverseProxy (POST), over the
// lane, net/http's HTTP/1.1 server and HTTP/2 — not a 500 saying the
// gateway failed (a handler's WriteHeader with such a code panics).
func TestParityHostStatusBelow100(t *testing.T) {
	p := newParityEnv(t)
	for _, a := range []string{"status-000", "status-099"} {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			q := parityReq{name: method + " " + a, method: method, target: "/raw?a=" + a}
			if method == "POST" {
				q.body = "x"
			}
			t.Run(q.name, func(t *testing.T) {
				for _, via := range parityPaths {
					r := p.send(t, via, q)
					if r.Status != http.StatusBadGateway || r.Header.Get("Content-Type") != problem.ContentType {
						t.Errorf("via %s: %d %v %q, want a 502 problem", via, r.Status, r.Header, r.Body)
					}
				}
			})
		}
	}
}
