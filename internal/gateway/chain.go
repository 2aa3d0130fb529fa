package gateway

import "net/http"

// chain is the L7 path of DESIGN §2: the layers of fold, then step 10,
// dispatch (pick a host and proxy, internal/proxy).
func (g *Gateway) chain() http.Handler { return g.fold(g.dispatch()) }

// fold wraps h in the layers in reading order. Reading this list tells you
// the whole path: each layer answers the request itself or calls next, and
// knows nothing of the layers above it.
func (g *Gateway) fold(h http.Handler) http.Handler {
	layers := []func(next http.Handler) http.Handler{
		g.healthz,  // 1. GET /healthz: 200 ok, outside everything (layers.go)
		g.observe,  // 2. request id, access log, metrics, panic recovery (layers.go)
		g.route,    // 3. Host -> app | api.{zone} | 404 (layers.go)
		g.hygiene,  // 4. desync refusal, header stripping, X-Forwarded-* (layers.go)
		g.cors,     // 5. preflights answered here; allow-list on responses (cors.go)
		g.limit,    // 6. per (app, client) sliding window (limit.go)
		g.auth,     // 7. edge bearer tokens (auth.go)
		g.policy,   // 8. ordered path rules (policy.go)
		g.affinity, // 9. forward to the owner cluster (affinity.go)
	}
	for i := len(layers) - 1; i >= 0; i-- {
		h = layers[i](h)
	}
	return h
}
