package gateway

import "net/http"

// ClusterOptions configures owner affinity, signed forwarding and peer
// failover (DESIGN §5). (Not built yet.)
type ClusterOptions struct{}

// clusterState is what the affinity layer keeps between requests.
type clusterState struct{}

// initCluster builds g.clusters from opts; New calls it once.
func (g *Gateway) initCluster(opts ClusterOptions) error { return nil }

// affinity is not built yet: it passes every request on unchanged.
func (g *Gateway) affinity(next http.Handler) http.Handler { return next }
