package gateway

import (
	"net/http"
	"testing"
)

// BenchmarkChain is the chain of DESIGN §2 (observe through affinity)
// alone, with dispatch answering from memory: what the gateway's own
// layers cost a request on a warm cache, without the proxy, the lane or a
// host. The load harness's "floor-lane" target is the rest (the lane and
// the proxy without the chain); the two together are the request path.
func BenchmarkChain(b *testing.B) {
	e := newEnv(b, func(o *Options) {
		o.AccessLog = false
		o.Edge.RateLimit = 1 << 30 // the limiter runs, but never refuses
	})
	e.addHost("h1", "hello", "http", "http://127.0.0.1:1")
	g := e.gw
	body := []byte("hello")
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = textPlain
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	serveRepeatedly(b, g.fold(answer), len(body))
}
