package discovery

import "container/list"

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
// address (host:port, as announced).
const maxChecksPerAddr = 2

// fullLocked reports whether a check of e's claims must wait for one at
// its address to end.
func (d *Discovery) fullLocked(e *entry) bool {
	return d.checking[e.ann.Addr] >= maxChecksPerAddr
}

// parkLocked sets e, whose check is due (e.queued), aside until a check at
// its address ends.
func (d *Discovery) parkLocked(e *entry) {
	l := d.parked[e.ann.Addr]
	if l == nil {
		l = list.New()
		d.parked[e.ann.Addr] = l
	}
	e.parked, e.parkedAt = l.PushBack(e), e.ann.Addr
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
func (d *Discovery) startedLocked(addr string) { d.checking[addr]++ }

// doneLocked counts a check at addr ending, and queues the check parked
// there first, if any.
func (d *Discovery) doneLocked(addr string) {
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
