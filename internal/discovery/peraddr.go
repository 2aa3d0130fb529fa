package discovery

import (
	"container/list"
	"net"
	"net/netip"
	"strings"
)

// Anyone may announce an enrolled host_id (its public key is on the bus
// for anyone to read) at an address of their choosing, and the challenge
// goes there. An address that accepts and never answers holds a worker
// for the whole VerifyTimeout. One id holds at most one worker (a newer
// announce cancels its check), but an id each for every worker, all at
// one address, would hold them all, and every other host's check would
// wait behind them. So at most maxChecksPerAddr checks run at one
// announced address at a time; the others are parked, and the next one
// starts as a check there ends. Honest hosts each have an address of their
// own, so this holds none of them back.
//
// What this does not bound is many addresses, each with its ids: every
// one of them needs an enrolled id, and there are as many of those as the
// operator enrolled.

// maxChecksPerAddr bounds the verifications in flight at one announced
// address (host:port, see addrKey).
const maxChecksPerAddr = 2

// addrKey is the key the checks at addr (host:port) are counted under:
// one per address however it is spelled, so that an IP written another
// way (IPv4-mapped IPv6, IPv6 groups written out or in capitals) or a host
// name in capitals or with a final dot does not count apart. Two names of
// one machine still do: telling would take resolving them.
func addrKey(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return net.JoinHostPort(ip.Unmap().String(), p)
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.ToLower(h), "."), p)
}

// fullLocked reports whether a check of e's claims must wait for one at
// its address to end.
func (d *Discovery) fullLocked(e *entry) bool {
	return d.checking[addrKey(e.ann.Addr)] >= maxChecksPerAddr
}

// parkLocked sets e, whose check is due (e.queued), aside until a check at
// its address ends.
func (d *Discovery) parkLocked(e *entry) {
	k := addrKey(e.ann.Addr)
	l := d.parked[k]
	if l == nil {
		l = list.New()
		d.parked[k] = l
	}
	e.parked, e.parkedAt = l.PushBack(e), k
}

// unparkLocked takes e out of the parked checks, if it is there; its
// check is no longer queued.
func (d *Discovery) unparkLocked(e *entry) {
	if e.parked == nil {
		return
	}
	l := d.parked[e.parkedAt]
	l.Remove(e.parked)
	if l.Len() == 0 {
		delete(d.parked, e.parkedAt)
	}
	e.parked, e.parkedAt, e.queued = nil, "", false
}

// startedLocked counts a check starting at addr.
func (d *Discovery) startedLocked(addr string) { d.checking[addrKey(addr)]++ }

// doneLocked counts a check at addr ending, and queues the check parked
// there first, if any.
func (d *Discovery) doneLocked(addr string) {
	addr = addrKey(addr)
	if d.checking[addr]--; d.checking[addr] <= 0 {
		delete(d.checking, addr)
	}
	l := d.parked[addr]
	if l == nil {
		return
	}
	e := l.Front().Value.(*entry)
	d.unparkLocked(e)
	d.enqueueLocked(e.ann.HostID, e)
}
