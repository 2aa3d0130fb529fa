package gateway

import "net/http"

// auth is not built yet: it passes every request on unchanged.
func (g *Gateway) auth(next http.Handler) http.Handler { return next }
