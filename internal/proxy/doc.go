// Package proxy is dispatch, the last step of the L7 path (DESIGN §2 step
// 10, §4 passive health, §5.2 local retry): pick a verified, healthy host
// of the request's app, inject the authoritative X-Gatehouse-* context
// headers, and proxy the request through one [httputil.ReverseProxy] over
// pooled keep-alive upstream connections (http, https, and h2c for gRPC),
// streaming responses, Server-Sent Events and WebSocket upgrades.
//
// The common request — GET or HEAD without a body, no upgrade, to a
// plain-http host — takes a fast path instead (fast.go): the proxy writes
// the request and reads the response itself, on the handler's goroutine,
// over its own keep-alive pool, sending and answering the same bytes as
// ReverseProxy would (tests compare the two) with a fraction of the work
// and allocations. A connection's read buffer goes back to a pool while
// it is idle; a body of known length up to 32 KiB that did not all come
// with the head is gathered before it is written, so that it leaves with
// its head in one write. Options.DisableFastPath turns it off.
//
// An HTTP/1 upload is read in full duplex (http.ResponseController's
// EnableFullDuplex): the host's answer may go out while the transport
// still sends the upload on, and no byte of it is dropped as the head
// goes out.
//
// A pooled connection to a host is never handed bytes the host sent
// after its answer ended: on the fast path a look before each request,
// on the transport's connections a reading of each answer's framing
// (unsolicited.go); either way the connection is dropped and the request
// goes on a new one.
//
// Selection is round robin per app over the table's pool, skipping hosts
// that cool down after a connect failure ([route.Health]); when every host
// cools down the least recently failed one is tried rather than refusing.
// A connection refused on one host (nothing was sent, so safe for any
// method) is retried once on the next host before the request fails.
//
// Errors map to a status in one function, statusFor, and are answered as
// RFC 9457 problems that never name an internal address. When the local
// attempt cannot serve (no routable host, or every host unreachable),
// [Options.Fallback] may answer instead, before anything was written: that
// is where peer-cluster failover (DESIGN §5.2) plugs in.
//
// The proxy reads the [route.Request] the gateway layers put in the
// request's context; it never reads the client's X-Gatehouse-* headers
// (hygiene stripped them) and never touches the bus.
package proxy
