package discovery

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
)

// Anyone may publish on the hosts subjects, as fast as the bus carries
// messages, and each announce or heartbeat of a made-up id costs the
// gateway a parse, d.mu and more. One subscription handling them all in
// order queued a verified host's heartbeats behind every message sent
// before them: an unpaced flood of made-up ids held them seconds and
// more, and a host whose heartbeats come late is taken out as stale.
//
// So the subscription's callback (dispatch) only sorts messages by the
// host id they name, and does little else:
//
//   - a heartbeat of an id that proved a key here is taken at once, in
//     the callback: it is one parse of at most maxInlineHeartbeat bytes
//     and a few fields under d.mu;
//   - any other message of such an id (announce, leave) waits in the
//     proven lane, and everything else (made-up ids, hosts not verified
//     yet, malformed bodies) in the unproven lane; a goroutine each
//     handles its lane in order.
//
// Each lane holds one message per host MaxHosts allows (laneMsgs at the
// least) and laneBytes bytes (as the bus carried them, headers and all:
// see push): a fleet that reconnects at once announces once each, and
// those announces are kept. After a gateway's restart every host is new
// here, so the unproven lane takes them all: with 8192 messages it
// dropped the announces of a fleet of 10,000 past it, and those hosts
// stayed unroutable until a heartbeat had them announce again
// (BenchmarkDiscovery10kHosts: 9,833 of 10,000 after 60 s). A message
// that finds its lane full is dropped and counted (queue_full). A flood of made-up ids fills the
// unproven lane alone and costs the callback a scan a message, so the
// subscription's own backlog stays short and the proven hosts'
// heartbeats keep their time: with one subscription handling everything
// in order, an unpaced flood held them 2.5 to 6.6 s under -race
// (TestUnpacedFloodCannotDelayEnrolledHeartbeats), and 0.2 to 0.35 s
// with the lanes. Copies of a verified host's messages reach its lane,
// and its entry, as they always did; copies of its heartbeats are parsed
// in the callback, each, so a flood of them (which takes knowing a
// verified id) can still slow the callback as any flood did before.
const (
	laneMsgs  = 8192
	laneBytes = 64 << 20
)

// maxInlineHeartbeat bounds a heartbeat dispatch parses itself. The host
// package writes at most ~330 bytes (a 253-byte id and two integers);
// anyone else may write up to host.MaxMessageSize, and a flood of such
// bodies naming a verified id first, each parsed in the callback, held a
// verified host's heartbeats 3.5 s under -race
// (TestLongDecoyHeartbeatsCannotDelayEnrolledHeartbeats).
const maxInlineHeartbeat = 1 << 10

// dropQueueFull counts a message dropped because its lane was full.
const dropQueueFull = "queue_full"

type lane struct {
	name     string
	c        chan laneMsg
	maxBytes int64
	bytes    atomic.Int64 // of the messages in c, as push counts them
}

type laneMsg struct {
	m    *nats.Msg
	hb   *host.Heartbeat // parsed by dispatch already, for a heartbeat
	size int64           // what l.bytes counts for m (see push)
	// done, if not nil, is closed by the lane in m's stead: every message
	// queued before it has been handled (tests wait on it).
	done chan struct{}
}

func newLane(name string, msgs int, maxBytes int64) *lane {
	return &lane{name: name, c: make(chan laneMsg, msgs), maxBytes: maxBytes}
}

// push queues lm on l, or drops it if l is full; it never blocks. A
// flood drops most of what it sends here, so a drop costs a counter and
// the log's bucket, and its line is formatted only when it is written.
//
// A message is counted at its size as the bus carried it (Size: subject,
// reply, headers and body; the subscription's pending limit counts its
// headers too), not its body's: the body keeps the buffer its headers
// came in, up to the bus's max_payload (1 MiB by default) where the body
// alone is at most 64 KiB, and anyone may add headers. Their decoded map
// is let go: nothing here reads it, and many short headers take many
// times the bytes they came in.
func (d *Discovery) push(l *lane, lm laneMsg) {
	n := int64(lm.m.Size())
	lm.m.Header, lm.size = nil, n
	if l.bytes.Add(n) <= l.maxBytes {
		select {
		case l.c <- lm:
			return
		default:
		}
	}
	l.bytes.Add(-n)
	d.queueFull.Inc()
	if d.drops.allow(d.opts.Now(), dropQueueFull) {
		d.opts.Logger.Warn("discovery: dropped bus message", "reason", dropQueueFull, "subject", lm.m.Subject,
			"err", fmt.Sprintf("the %s lane is full (at most %d messages, %d bytes)", l.name, cap(l.c), l.maxBytes))
	}
}

// drain handles l's messages in order until ctx ends.
func (d *Discovery) drain(ctx context.Context, l *lane) {
	for {
		select {
		case <-ctx.Done():
			return
		case lm := <-l.c:
			if lm.done != nil {
				close(lm.done)
				continue
			}
			l.bytes.Add(-lm.size)
			d.handleMsg(lm.m, lm.hb)
		}
	}
}

// dispatch is the subscription callback: it sorts m into a lane, or
// handles a proven host's heartbeat itself; it never blocks on a lane.
// It reads the host id by a scan (scanHostID), not a parse: a parse of
// every message of a flood took the callback longer than the bus took to
// bring them, and the subscription's backlog, heartbeats and all, grew.
// The scan is only a hint, which the parse in the lane confirms.
func (d *Discovery) dispatch(m *nats.Msg) {
	if len(m.Data) > host.MaxMessageSize {
		d.drop("oversized", m.Subject, fmt.Errorf("%d bytes", len(m.Data)))
		return
	}
	id, ok := scanHostID(m.Data)
	if !ok || !d.isProven(id) {
		d.push(d.unprovenLane, laneMsg{m: m})
		return
	}
	if d.kind(m.Subject) != host.KindHeartbeat {
		d.push(d.provenLane, laneMsg{m: m})
		return
	}
	if len(m.Data) > maxInlineHeartbeat {
		// No heartbeat a host writes; perhaps a made-up id's, padded
		// behind a verified one's name: its parse must not hold up the
		// callback, so it waits with the rest (the parse there decides).
		d.push(d.unprovenLane, laneMsg{m: m})
		return
	}
	hb, err := host.ParseHeartbeat(m.Data)
	if err != nil {
		d.drop("malformed", m.Subject, err)
		return
	}
	if !bytes.Equal([]byte(hb.HostID), id) {
		// A decoy "host_id" before the one encoding/json reads.
		d.push(d.unprovenLane, laneMsg{m: m, hb: &hb})
		return
	}
	d.handleMsg(m, &hb)
}

// scanHostID returns the string after the first "host_id" key in b, as
// the host package and any JSON encoder write it: the key as is, white
// space around the colon, an id without escapes (a valid one needs none).
// Anything else is no hint, and the message goes to the unproven lane.
func scanHostID(b []byte) ([]byte, bool) {
	i := bytes.Index(b, []byte(`"host_id"`))
	if i < 0 {
		return nil, false
	}
	rest := bytes.TrimLeft(b[i+len(`"host_id"`):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return nil, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return nil, false
	}
	rest = rest[1:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return nil, false
	}
	return rest[:j], true
}

// isProven reports whether host id proved a key here (its entry's
// provenKey is set): its messages are kept apart from made-up ids'.
func (d *Discovery) isProven(id []byte) bool {
	d.provenMu.RLock()
	_, ok := d.provenIDs[string(id)]
	d.provenMu.RUnlock()
	return ok
}

// provenLocked records that e, host id's entry, proved a key. Called with
// d.mu held, as forgetProvenLocked is.
func (d *Discovery) provenLocked(id string) {
	d.provenMu.Lock()
	d.provenIDs[id] = struct{}{}
	d.provenMu.Unlock()
}

func (d *Discovery) forgetProvenLocked(id string) {
	d.provenMu.Lock()
	delete(d.provenIDs, id)
	d.provenMu.Unlock()
}
