// Package dns is gatehouse's authoritative DNS server (DESIGN §8) for the
// zones in the store: SOA and NS at each apex, the wildcard *.{zone}
// answering the zone's gateway addresses, and the zone's explicit A, AAAA,
// CNAME and TXT records, where a record set named *.{name} answers every
// name under {name} that has none of its own. A name outside every zone
// gets REFUSED: the gateway is not an open resolver, and it never recurses.
//
// The zones come from a snapshot function the caller supplies, so the
// server reads whatever table is current without importing the store.
package dns
