package gateway

import "net/http"

// Gateway is the L7 request path. (Skeleton: filled in by the L7 work.)
type Gateway struct{}

func (g *Gateway) dispatch() http.Handler { return http.NotFoundHandler() }
