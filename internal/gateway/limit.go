package gateway

import "net/http"

// limit is not built yet: it passes every request on unchanged.
func (g *Gateway) limit(next http.Handler) http.Handler { return next }
