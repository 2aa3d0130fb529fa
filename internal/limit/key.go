package limit

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
)

// Key names one budget: a scope (an app id, a token subject, or "" for
// unknown hosts) and a client address. Keys are comparable and allocate
// nothing to build.
type Key struct {
	Scope string
	Addr  [16]byte // IPv4-mapped address, or an IPv6 /48 prefix; zero for none
}

// KeyFor returns the key of a client address under scope: an IPv4 address
// (or an IPv4-mapped IPv6 address) counts on its own, an IPv6 address by its
// /48 prefix, since one site usually holds a whole /48. An invalid address
// yields the zero address.
func KeyFor(scope string, ip netip.Addr) Key {
	k := Key{Scope: scope}
	switch {
	case !ip.IsValid():
	case ip.Is4() || ip.Is4In6():
		k.Addr = netip.AddrFrom4(ip.Unmap().As4()).As16()
	default:
		p, _ := ip.WithZone("").Prefix(48) // cannot fail for a valid IPv6 address
		k.Addr = p.Addr().As16()
	}
	return k
}

// String formats the address part of k for logs: an IPv4 address or an
// IPv6 /48 prefix.
func (k Key) String() string {
	a := netip.AddrFrom16(k.Addr)
	if a.Is4In6() {
		return k.Scope + "|" + a.Unmap().String()
	}
	return k.Scope + "|" + netip.PrefixFrom(a, 48).String()
}

var seed = maphash.MakeSeed()

// shardOf picks a shard for k. The per-shard map is Go's own seeded map, so
// a poor spread here costs balance, never correctness.
func (k Key) hash() uint64 {
	h := maphash.String(seed, k.Scope)
	a := binary.LittleEndian.Uint64(k.Addr[:8])
	b := binary.LittleEndian.Uint64(k.Addr[8:])
	h ^= a*0x9e3779b97f4a7c15 ^ b*0xc2b2ae3d27d4eb4f
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return h
}
