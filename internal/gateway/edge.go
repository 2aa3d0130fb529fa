package gateway

// EdgeOptions configures the protection layers: CORS, rate limits, edge
// tokens and path policy (DESIGN §2 steps 5-8). (Not built yet.)
type EdgeOptions struct{}

// edgeState is what the protection layers keep between requests.
type edgeState struct{}

// initEdge builds g.edge from opts; New calls it once.
func (g *Gateway) initEdge(opts EdgeOptions) error { return nil }
