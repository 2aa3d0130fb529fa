package cluster

import (
	"crypto/ed25519"
	"slices"
	"testing"
)

func ids(ps []Peer) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

func TestSet(t *testing.T) {
	s := NewSet("eu", []Peer{
		{ID: "us", Active: true},
		{ID: "eu"}, // self is active whatever the input says
		{ID: "ap", Active: true},
		{ID: "sa"}, // inactive: known, but neither owner nor failover
		{ID: "za", Active: true},
	})
	if got := ids(s.Peers()); !slices.Equal(got, []string{"ap", "eu", "sa", "us", "za"}) {
		t.Fatalf("Peers = %v", got)
	}
	if got := s.ActiveIDs(); !slices.Equal(got, []string{"ap", "eu", "us", "za"}) {
		t.Fatalf("ActiveIDs = %v", got)
	}
	if p, ok := s.Peer("sa"); !ok || p.Active {
		t.Fatalf("Peer(sa) = %+v, %v", p, ok)
	}
	if _, ok := s.Peer("zz"); ok {
		t.Fatal("Peer(zz) found")
	}
	tests := []struct {
		owner string
		want  []string
	}{
		{"ap", []string{"ap", "us", "za"}}, // owner first, then after self: us, za, (wrap) ap is owner
		{"za", []string{"za", "us", "ap"}},
		{"eu", []string{"us", "za", "ap"}}, // self owns: after self, wrapping
		{"sa", []string{"us", "za", "ap"}}, // inactive owner is not tried
		{"", []string{"us", "za", "ap"}},
	}
	for _, tt := range tests {
		if got := ids(s.Failover(tt.owner)); !slices.Equal(got, tt.want) {
			t.Errorf("Failover(%q) = %v, want %v", tt.owner, got, tt.want)
		}
	}
	// The unknown set owns nothing.
	var zero Set
	if zero.Owner("hello", HashModN) != "" || zero.Owner("hello", HashRendezvous) != "" || len(zero.Failover("x")) != 0 {
		t.Fatal("the zero set has an owner or failover peers")
	}
	var h Holder
	if h.Load().Self() != "" {
		t.Fatal("zero holder not unknown")
	}
	h.Store(s)
	if h.Load().Self() != "eu" {
		t.Fatal("holder lost the set")
	}
}

func TestSetSelfAlwaysActive(t *testing.T) {
	s := NewSet("eu", nil)
	if got := s.ActiveIDs(); !slices.Equal(got, []string{"eu"}) {
		t.Fatalf("ActiveIDs = %v", got)
	}
	if s.Owner("anything", HashModN) != "eu" {
		t.Fatal("a set of one does not own everything")
	}
}

func TestValidate(t *testing.T) {
	pub, _ := newKey(t)
	good := Peer{ID: "eu", URL: "https://eu.example.net", PublicKey: pub}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Peer{
		{ID: "EU", URL: good.URL, PublicKey: pub},
		{ID: "-eu", URL: good.URL, PublicKey: pub},
		{ID: "", URL: good.URL, PublicKey: pub},
		{ID: "eu", URL: "ftp://eu", PublicKey: pub},
		{ID: "eu", URL: "https://", PublicKey: pub},
		{ID: "eu", URL: "https://eu?x=1", PublicKey: pub},
		{ID: "eu", URL: "https://u:p@eu", PublicKey: pub},
		{ID: "eu", URL: "https://:8443", PublicKey: pub}, // a port, no host: it would dial this machine
		{ID: "eu", URL: "http://:80/", PublicKey: pub},
		{ID: "eu", URL: "https://[]:443", PublicKey: pub},
		{ID: "eu", URL: good.URL, PublicKey: pub[:31]},
		{ID: "eu", URL: good.URL, PublicKey: append(ed25519.PublicKey{1}, make([]byte, 31)...)}, // the identity: signs for anyone
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) passed", p)
		}
	}
}
