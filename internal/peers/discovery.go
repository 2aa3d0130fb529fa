package peers

import (
	"encoding/base64"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// Discovery is the body of GET /api/v3/discovery/clusters (DESIGN §7).
type Discovery struct {
	Self     string        `json:"self"`
	Clusters []ClusterInfo `json:"clusters"` // sorted by id, self included
}

// ClusterInfo is one cluster in [Discovery].
type ClusterInfo struct {
	ID        string `json:"id"`
	URL       string `json:"url"`
	PublicKey string `json:"public_key"` // standard base64
	Active    bool   `json:"active"`
}

// DiscoveryOf renders a set for the API.
func DiscoveryOf(s cluster.Set) Discovery {
	d := Discovery{Self: s.Self(), Clusters: make([]ClusterInfo, 0, len(s.Peers()))}
	for _, p := range s.Peers() { // already sorted by id
		d.Clusters = append(d.Clusters, ClusterInfo{
			ID:        p.ID,
			URL:       p.URL,
			PublicKey: base64.StdEncoding.EncodeToString(p.PublicKey),
			Active:    p.Active,
		})
	}
	return d
}

// Discovery returns the current set as the API shows it.
func (p *Peers) Discovery() Discovery { return DiscoveryOf(p.Set()) }
