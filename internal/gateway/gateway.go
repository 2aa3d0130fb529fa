package gateway

import "net/http"

// Gateway is the L7 request path. (Skeleton: the L7 work fills in Options,
// New and the layers in layers.go.)
type Gateway struct {
	// edge is the state of the protection layers (cors.go, limit.go,
	// auth.go, policy.go), built by initEdge.
	edge edgeState
	// clusters is the state of the affinity layer, built by initCluster.
	clusters clusterState
}

func (g *Gateway) dispatch() http.Handler { return http.NotFoundHandler() }
