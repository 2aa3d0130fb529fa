package gateway

import "net/http"

// policy is not built yet: it passes every request on unchanged.
func (g *Gateway) policy(next http.Handler) http.Handler { return next }
