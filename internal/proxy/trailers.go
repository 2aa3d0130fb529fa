package proxy

import (
	"io"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// trailerOK reports whether a host's trailer field k (canonical) may reach
// the client, on every path alike (the fast path and ReverseProxy, served
// over HTTP/1.1 or HTTP/2). Kept out:
//   - what RFC 9110 §6.5.1 keeps out of trailers (framing, connection,
//     routing, authentication, content format: httpguts's list, which the
//     HTTP/2 server applied on its own while both HTTP/1.1 servers passed a
//     host's unannounced trailers as they came), and Upgrade;
//   - the fields the gateway sets on a response itself (DESIGN §2:
//     X-Gatehouse-* in any spelling, X-Failover-Cluster, the rate-limit and
//     CORS fields, and own): a client that merges trailers into the header
//     (RFC 9110 §6.5.2 forbids it; some do) would take the host's value
//     for the gateway's, as a host's header field of these names is
//     dropped or overridden for the same reason;
//   - Set-Cookie, which no cookie specification allows after the content.
func trailerOK(k string, own []string) bool {
	if !httpguts.ValidTrailerHeader(k) || slices.Contains(own, k) {
		return false
	}
	n := strings.ToLower(strings.ReplaceAll(k, "_", "-"))
	switch n {
	case "upgrade", "set-cookie", "x-failover-cluster", "ratelimit", "ratelimit-policy":
		return false
	}
	for _, p := range [...]string{"x-gatehouse-", "x-ratelimit-", "access-control-"} {
		if strings.HasPrefix(n, p) {
			return false
		}
	}
	return true
}

// dropTrailers removes from t the fields trailerOK refuses.
func dropTrailers(t http.Header, own []string) {
	for k := range t {
		if !trailerOK(k, own) {
			delete(t, k)
		}
	}
}

// trailerFilter is a host's response body on the ReverseProxy path: once
// it ends, the transport has filled res.Trailer with every trailer the
// host sent (announced or not), and the refused ones are dropped before
// ReverseProxy copies them to the client. The announced ones were
// dropped in modifyResponse, before ReverseProxy announced them.
type trailerFilter struct {
	io.ReadCloser
	res *http.Response
	own []string
}

func (b *trailerFilter) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		dropTrailers(b.res.Trailer, b.own)
	}
	return n, err
}

// Close drops them too: ReverseProxy closes the body "to populate
// res.Trailer" before it reads them.
func (b *trailerFilter) Close() error {
	err := b.ReadCloser.Close()
	dropTrailers(b.res.Trailer, b.own)
	return err
}
