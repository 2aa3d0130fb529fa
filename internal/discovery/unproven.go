package discovery

import "time"

// Anyone may announce on the bus, under any host_id, and heartbeat what
// they announced, so the hosts that never verified are kept apart from the
// others: an announce of a new host_id must never be refused because of
// them, and their checks must never wait behind an unbounded backlog.
//
//   - At most maxUnproven(MaxHosts) of them are tracked, a tenth of
//     MaxHosts. A host that verified once never counts, and is never
//     evicted to make room.
//   - A new host_id that finds no room (the never-verified ones at their
//     cap, or all MaxHosts tracked) evicts the never-verified host
//     announced first, passing over those being checked right now. Only
//     when every tracked host has verified is the announce dropped
//     (too_many_hosts).
//   - Their checks wait in d.pending, taken oldest first by the workers,
//     not in the shared queue: that list never holds more than the cap,
//     an eviction takes its entry out of it, and the verified hosts'
//     re-verifications and probes keep their own queue.
//
// Evicting rather than dropping is what lets a real host in under a
// sustained flood of made-up ids. Dropping would keep out every new host
// for as long as the flood filled the cap, which takes no more than ids
// that fail slowly (an enrolled id at an address that never answers) or a
// rate above what the enrolment lookups keep up with. Evicting admits
// every announce; a real host is checked unless the cap's worth of newer
// unknown ids arrive before a worker reaches it, and if they do it is
// forgotten, asked to announce again at its next heartbeat, and tries
// again. Evicting the oldest first, and never counting a later announce
// of a tracked id or its heartbeats as news, means a flooder cannot keep
// its own entries in place by repeating them.

// maxUnproven is the cap on hosts that never verified for maxHosts.
func maxUnproven(maxHosts int) int { return max(maxHosts/10, 1) }

// dropTooManyUnverified counts a never-verified host forgotten to make
// room for a newer one, in gatehouse_host_messages_dropped_total.
const dropTooManyUnverified = "too_many_unverified"

// makeRoomLocked makes room for a new host id, evicting the oldest host
// that never verified if need be. It reports false, having counted the
// drop, when every tracked host has verified and MaxHosts are tracked.
func (d *Discovery) makeRoomLocked(now time.Time, id string) bool {
	if len(d.hosts) < d.opts.MaxHosts && d.unproven.Len() < d.maxUnproven {
		return true
	}
	v := d.oldestUnprovenLocked()
	if v == nil {
		d.m.dropped.WithLabelValues("too_many_hosts").Inc()
		d.drops.warn(now, "too_many_hosts", "discovery: dropped announce: host limit reached", "host_id", id, "max_hosts", d.opts.MaxHosts)
		return false
	}
	d.m.dropped.WithLabelValues(dropTooManyUnverified).Inc()
	d.drops.warn(now, dropTooManyUnverified, "discovery: forgot the oldest unverified host for a newer one",
		"host_id", v.ann.HostID, "for", id, "max_unverified", d.maxUnproven)
	d.deleteLocked(v.ann.HostID, v)
	return true
}

// oldestUnprovenLocked returns the never-verified host announced first,
// skipping those being checked (at most Workers of them: a check already
// spent is not thrown away), or nil if there is none.
func (d *Discovery) oldestUnprovenLocked() *entry {
	for el := d.unproven.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*entry); !e.verifying {
			return e
		}
	}
	if el := d.unproven.Front(); el != nil {
		return el.Value.(*entry) // all of them are being checked
	}
	return nil
}

// pendLocked queues a check of e, which never verified, and wakes a
// worker.
func (d *Discovery) pendLocked(e *entry) {
	e.queued = true
	e.pending = d.pending.PushBack(e)
	select {
	case d.pendingc <- struct{}{}:
	default:
	}
}

// takePending starts the check waiting longest in d.pending whose address
// has room for it, if any, parking those before it that have none (see
// peraddr.go), and wakes another worker if more wait.
func (d *Discovery) takePending() *started {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		el := d.pending.Front()
		if el == nil {
			return nil
		}
		e := d.pending.Remove(el).(*entry)
		e.pending = nil
		if d.fullLocked(e) {
			d.parkLocked(e)
			continue
		}
		if d.pending.Len() > 0 {
			select {
			case d.pendingc <- struct{}{}:
			default:
			}
		}
		return d.startLocked(e.ann.HostID, e)
	}
}

// unprovenDoneLocked takes e out of the never-verified hosts, when it
// verifies or is removed.
func (d *Discovery) unprovenDoneLocked(e *entry) {
	if e.pending != nil {
		d.pending.Remove(e.pending)
		e.pending, e.queued = nil, false
	}
	if e.unproven != nil {
		d.unproven.Remove(e.unproven)
		e.unproven = nil
	}
}
