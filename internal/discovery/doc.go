// Package discovery is the gateway side of host discovery (DESIGN §4). It
// listens on gatehouse.{cluster}.hosts.announce|heartbeat|leave, keeps each
// host's state, has every announced host verified by internal/verify, and
// publishes hosts to the route builder, which alone decides what requests
// see: only a verified host is routable.
//
// States, as [route.HostState]:
//
//	announce (new or changed claims) -> provisional (published, never routed)
//	verification passes               -> verified (routable)
//	verification fails               -> provisional with LastError, retried
//	                                    after a back-off or on re-announce;
//	                                    unless the enrolment refused the
//	                                    claims it last proved, its
//	                                    heartbeats are answered "announce"
//	                                    (once an interval), since a forged
//	                                    announce may have replaced its claims
//	enrolment refuses a host that never verified (unenrolled, key_mismatch,
//	app_not_allowed)                  -> removed at once; its next heartbeat is
//	                                    answered "announce"
//	no heartbeat for MissedHeartbeats intervals, or an active probe fails
//	                                  -> unhealthy; back to verified on recovery
//	signed, fresh leave               -> draining (no new requests; the proxy
//	                                    holds the in-flight ones)
//	announce while draining           -> still draining, checked; a pass ends
//	                                    the drain (a new run: a host that has
//	                                    begun to leave answers no challenge),
//	                                    a failure is retried every heartbeat
//	                                    interval while it heartbeats; its
//	                                    heartbeats are answered "announce"
//	no heartbeat for HostTTL          -> removed
//
// A verification checks the enrolment first (the key for host_id must equal
// the announced public_key and allow every claimed app), then challenges
// the announced address. It is re-run on every announce and every Reverify
// (an announce of the same claims less than a heartbeat interval after the
// last check began, at the end of that interval: one challenge an
// interval, however often anyone copies the announce).
//
// A re-announce keeps a verified host routed by the claims it proved while
// the new ones are checked: changed claims (a new address, scheme, key or
// app list) are routed to only once they verify, and if they fail the host
// keeps its proven claims (if the enrolment still allows them), so a
// forged announce on the bus can neither route to an address the key
// holder does not hold nor take a host out. Nor can it spare the proven
// claims their own checks: an announce does not cancel a check of them
// under way, they are checked and health-probed on their own when due
// while other claims are, and a failure takes the host out as ever.
//
// Hosts that never verified, which anyone on the bus can make up, are held
// to a tenth of MaxHosts and checked from a list of their own; a new one
// beyond that evicts the oldest of them, so they can delay a real host but
// never lock it out, nor displace a host that verified (unproven.go).
//
// A leave drains a host that verified once only when its sig verifies
// under the key it last proved (even if a later check failed, as one that
// reaches a host shutting down may), its ts is within a minute of the
// gateway's clock, newer than the last leave accepted for the host and
// not from before the host's current run began (leaveFloor: the gateway's
// clock when its claims passed, which an announce, being unsigned, can
// move by at most the clock window). Anything else (unsigned, another key,
// stale, a replay, a host that never verified or is not known) changes
// nothing and is counted as dropped, so a bus client without credentials
// cannot take a host out of rotation, nor keep it in.
//
// Every dropped message is counted in
// gatehouse_host_messages_dropped_total, but its warning is rate-limited,
// since a client without credentials can send them at bus speed: each
// reason logs 10 lines at once and then one every 6 s (10 a minute), and
// the sweeper writes one summary, at most once a minute, of how many lines
// each reason held back ("discovery: dropped bus messages not logged").
// Failed verifications, which a made-up id or a forged announce causes at
// will, are logged through buckets of their own, per failure reason, with
// their own summary ("discovery: host verification failures not logged"),
// and a new host's announce only at debug level.
//
// While the gateway's own bus connection is down, missing heartbeats say
// nothing about hosts: staleness and removal are suspended and resume with
// a fresh grace period on reconnect, so the gateway keeps serving from
// what it had (DESIGN §10).
//
// A flood of made-up ids cannot hold up the hosts that verified: the
// subscription's callback takes a verified host's heartbeat at once and
// sorts every other message into one of two bounded lanes, the verified
// hosts' and the others', each handled in order by a goroutine of its own;
// a message that finds its lane full is dropped and counted as queue_full
// (lanes.go).
//
// Concurrency: the subscription callback and the lanes only update the
// in-memory map and queue work; verifications and probes run on a fixed pool of workers,
// each bounded by VerifyTimeout, at most two verifications at one
// announced address at a time (peraddr.go); one flusher publishes batched
// changes to the builder; one sweeper (Run's own goroutine) ages hosts.
// All of them are owned by Run.
package discovery
