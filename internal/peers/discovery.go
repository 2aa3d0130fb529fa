package peers

import (
	"encoding/base64"
	"encoding/json"
	"net/http"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
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

// Handler serves GET (and HEAD) /api/v3/discovery/clusters: the public
// discovery JSON. Mount it at that path; other methods get 405.
func (p *Peers) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			problem.Write(w, http.StatusMethodNotAllowed, "discovery is read-only: use GET")
			return
		}
		b, _ := json.Marshal(p.Discovery())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n'))
	})
}
