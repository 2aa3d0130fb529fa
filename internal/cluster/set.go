package cluster

import (
	"crypto/ed25519"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gatehouse-dev/gatehouse/internal/edkey"
)

// Peer is one cluster as discovery knows it.
type Peer struct {
	ID string
	// URL is the cluster's public gateway base URL (http or https, no
	// query); forwards and failovers go to URL + the request's path.
	URL       string
	PublicKey ed25519.PublicKey
	// Active: the cluster answers probes or keeps announcing (DESIGN §5.1).
	Active bool
}

// Validate checks what a peer must have to be routed to.
func (p Peer) Validate() error {
	if !ValidID(p.ID) {
		return fmt.Errorf("cluster: id %q is not a DNS label", p.ID)
	}
	if _, err := ParseURL(p.URL); err != nil {
		return fmt.Errorf("cluster %s: %w", p.ID, err)
	}
	if len(p.PublicKey) != ed25519.PublicKeySize {
		return fmt.Errorf("cluster %s: public key has %d bytes, want %d", p.ID, len(p.PublicKey), ed25519.PublicKeySize)
	}
	if edkey.SmallOrder(p.PublicKey) {
		// Such a key verifies signatures nobody made: whoever announced
		// it would let anyone sign marks and announcements in its name.
		return fmt.Errorf("cluster %s: public key is a point of small order, not a key", p.ID)
	}
	return nil
}

// ParseURL parses a cluster's gateway base URL: absolute http or https,
// with a host, no user, query or fragment. A port without a host name
// ("https://:8443") is no host: a dial of it reaches this machine, so
// forwards and probes would go to the gateway's own neighbours.
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("cluster: url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("cluster: url %q: want http(s)://host[:port][/path]", s)
	}
	return u, nil
}

// ValidID reports whether id is a DNS label, as cluster ids are.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] == '-' || id[len(id)-1] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Set is an immutable snapshot of the known clusters, self included. The
// zero Set is the unknown set: no owner, serve locally. Copying a Set is
// cheap and safe; its slices are never modified after [NewSet].
type Set struct {
	self   string
	peers  []Peer   // sorted by id, unique
	active []string // ids of the active peers, sorted
}

// NewSet builds a set. self is always active and always present (added
// without URL or key if peers lacks it). A later duplicate id replaces an
// earlier one. peers is not modified.
func NewSet(self string, peers []Peer) Set {
	byID := make(map[string]Peer, len(peers)+1)
	for _, p := range peers {
		byID[p.ID] = p
	}
	if self != "" {
		p := byID[self]
		p.ID, p.Active = self, true
		byID[self] = p
	}
	s := Set{self: self, peers: make([]Peer, 0, len(byID))}
	for _, p := range byID {
		s.peers = append(s.peers, p)
	}
	slices.SortFunc(s.peers, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	for _, p := range s.peers {
		if p.Active {
			s.active = append(s.active, p.ID)
		}
	}
	return s
}

// Self is this cluster's id; "" for the unknown set.
func (s Set) Self() string { return s.self }

// Peers returns every known cluster, self included, sorted by id. The
// caller must not modify the slice.
func (s Set) Peers() []Peer { return s.peers }

// ActiveIDs returns the active ids, sorted bytewise. The caller must not
// modify the slice.
func (s Set) ActiveIDs() []string { return s.active }

// Peer returns the cluster with id.
func (s Set) Peer(id string) (Peer, bool) {
	i, ok := slices.BinarySearchFunc(s.peers, id, func(p Peer, id string) int { return strings.Compare(p.ID, id) })
	if !ok {
		return Peer{}, false
	}
	return s.peers[i], true
}

// Owner returns app's owner among the active clusters with h, or "" when
// the set is unknown or empty.
func (s Set) Owner(app string, h Hash) string {
	if h == HashRendezvous {
		return Rendezvous(app, s.active)
	}
	if len(s.active) == 0 {
		return ""
	}
	return s.active[ownerIndex(app, len(s.active))] // already sorted and unique
}

// Failover returns the active peers to try, in DESIGN §5.2's order: owner
// first (when it is an active peer), then the other active peers sorted by
// id starting after self and wrapping around. Self is never included.
func (s Set) Failover(owner string) []Peer {
	var out []Peer
	if p, ok := s.Peer(owner); ok && p.Active && owner != s.self {
		out = append(out, p)
	}
	start, _ := slices.BinarySearchFunc(s.peers, s.self, func(p Peer, id string) int { return strings.Compare(p.ID, id) })
	for i := range len(s.peers) {
		p := s.peers[(start+i)%len(s.peers)]
		if p.Active && p.ID != s.self && p.ID != owner {
			out = append(out, p)
		}
	}
	return out
}

// Holder publishes a Set. The zero Holder holds the unknown set. Load and
// Store may be called concurrently.
type Holder struct{ p atomic.Pointer[Set] }

// Load returns the current set.
func (h *Holder) Load() Set {
	if s := h.p.Load(); s != nil {
		return *s
	}
	return Set{}
}

// Store publishes s.
func (h *Holder) Store(s Set) { h.p.Store(&s) }
