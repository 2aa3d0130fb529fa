package gatehouse

import (
	"net/http"
	"slices"
	"testing"
)

// forgedTrailers are trailer names a host may not pass to a client: the
// fields the gateway sets on responses (DESIGN §2: X-Gatehouse-*,
// X-Failover-Cluster, the rate-limit fields, CORS), Set-Cookie, and the
// fields RFC 9110 §6.5.1 keeps out of trailers (framing, connection,
// routing, authentication, content format).
var forgedTrailers = []string{
	"X-Gatehouse-Cluster", "X-Gatehouse-App-Id", "X-Gatehouse-Anything", "X_gatehouse_cluster", "X-Failover-Cluster",
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Ratelimit-Policy",
	"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Set-Cookie", "Upgrade",
	"Connection", "Keep-Alive", "Content-Type", "Content-Encoding", "Www-Authenticate", "Cache-Control",
	"Content-Length", "Transfer-Encoding", "Trailer",
}

// announcedTrailers are those a host may announce in its Trailer field
// without net/http's client refusing the whole response.
var announcedTrailers = slices.DeleteFunc(slices.Clone(forgedTrailers), func(k string) bool {
	return k == "Content-Length" || k == "Transfer-Encoding" || k == "Trailer"
})

// TestParityForgedTrailers: a host's chunked answer whose trailers name
// fields the gateway controls or that must never be trailers reaches the
// client without them, and with its other trailer, on every path: the
// fast path (GET) and ReverseProxy (POST), each through the lane,
// net/http's HTTP/1.1 server and HTTP/2, announced in a Trailer field or
// not. A head announcing a framing field as a trailer is refused (502)
// on every path, as net/http's client refuses it.
func TestParityForgedTrailers(t *testing.T) {
	p := newParityEnv(t)
	for _, target := range []string{"/forged-trailers", "/forged-trailers?announce", "/forged-trailers?announce&framing"} {
		for _, method := range []string{"GET", "POST"} {
			q := parityReq{name: method + " " + target, method: method, target: target}
			if method == "POST" {
				q.body = "x"
			}
			t.Run(q.name, func(t *testing.T) {
				for _, via := range parityPaths {
					r := p.send(t, via, q)
					if target == "/forged-trailers?announce&framing" {
						if r.Status != http.StatusBadGateway {
							t.Errorf("via %s: %d %q %v, want 502", via, r.Status, r.Body, r.Trailer)
						}
						continue
					}
					if r.Status != http.StatusOK || r.Body != "body" {
						t.Fatalf("via %s: %d %q", via, r.Status, r.Body)
					}
					for _, k := range forgedTrailers {
						if v, ok := r.Trailer[k]; ok {
							t.Errorf("via %s: trailer %s: %q reached the client", via, k, v)
						}
					}
					if got := r.Trailer.Get("X-Checksum"); got != "c1" {
						t.Errorf("via %s: trailer X-Checksum %q, want c1 (trailers %v)", via, got, r.Trailer)
					}
					if r.Header.Get("X-Gatehouse-Cluster") != "one" || r.Header.Get("X-Ratelimit-Limit") != "1000" {
						t.Errorf("via %s: header %v", via, r.Header)
					}
					if tr := r.Header["Trailer"]; len(tr) > 0 && tr[0] != "X-Checksum" {
						t.Errorf("via %s: Trailer field %q, want X-Checksum or none", via, tr)
					}
				}
			})
		}
	}
}
