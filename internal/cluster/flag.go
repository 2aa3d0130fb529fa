package cluster

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
)

// ParsePublicKey reads a cluster public key as config and discovery write
// it: standard base64 of the 32 raw Ed25519 bytes.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("cluster: public key is not base64: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("cluster: public key has %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ParsePeerFlag reads one -peer flag value, "id=URL,key=B64", into a
// static cluster list entry (not active) and validates it.
func ParsePeerFlag(v string) (Peer, error) {
	head, key, ok := cut(v, ",key=")
	if !ok {
		return Peer{}, fmt.Errorf("cluster: -peer %q: want id=URL,key=B64", v)
	}
	id, u, ok := strings.Cut(head, "=")
	if !ok {
		return Peer{}, fmt.Errorf("cluster: -peer %q: want id=URL,key=B64", v)
	}
	pub, err := ParsePublicKey(key)
	if err != nil {
		return Peer{}, fmt.Errorf("cluster: -peer %q: %w", id, err)
	}
	p := Peer{ID: id, URL: u, PublicKey: pub}
	if err := p.Validate(); err != nil {
		return Peer{}, fmt.Errorf("cluster: -peer: %w", err)
	}
	return p, nil
}

// cut is strings.Cut at the last occurrence of sep.
func cut(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
