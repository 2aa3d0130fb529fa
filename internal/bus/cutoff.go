package bus

import (
	"context"
	"time"
)

// How LeaveCutOff finds a server cut off from its cluster and how often
// it may move. cutOffAfter is longer than a JetStream leader election
// (a few seconds), which also fails every probe, on every server: a
// healthy cluster electing leaders is no reason to move. moveEvery keeps
// a cluster with no quorum anywhere (every server fails the probe) from
// sending the connection round its servers. A probe is one JetStream
// request, every probeEvery while they pass: at 0.2 a second a gateway,
// nothing to a NATS cluster.
const (
	cutOffAfter       = 10 * time.Second
	moveEvery         = 30 * time.Second
	probeEvery        = 5 * time.Second
	probeFailingEvery = 2 * time.Second
	probeTimeout      = 3 * time.Second
)

// cutOffTimes are LeaveCutOff's bounds (the constants above; tests
// shorten them).
type cutOffTimes struct {
	after, every, probe, probeFailing, timeout time.Duration
}

var defaultCutOffTimes = cutOffTimes{after: cutOffAfter, every: moveEvery, probe: probeEvery, probeFailing: probeFailingEvery, timeout: probeTimeout}

// LeaveCutOff moves the connection to another server of the cluster when
// the one it is connected to has failed probe, without a pass, for
// cutOffAfter, at most once per moveEvery, until ctx ends. It returns at
// once for the embedded bus, which is the one server there is.
//
// A server cut off from the rest of its cluster (a partition that left it
// its clients but not its routes) keeps the connection up and answers its
// PINGs, so nats.go stays; but it answers no JetStream request for a
// replicated bucket (no quorum: requests time out, or JetStream says it
// is temporarily unavailable), and messages published on the other
// servers (the hosts' heartbeats) no longer reach it. The gateway answered
// 503 to every control write and, after missed heartbeats, for every app,
// while the majority of the cluster worked.
//
// probe is a request that a server serving the routing buckets answers;
// it returns an error only when the server could not serve it (not for an
// answer that refuses). A move is made only while connected and with at
// least one other URL known (bus.url and the servers the cluster
// announced): nats.go's reconnect then dials the servers of its pool in
// order, the one it leaves last. A server cut off announces only itself,
// so with one URL the other is its own address: the move lands on it
// again. Not called concurrently with itself.
func (b *Bus) LeaveCutOff(ctx context.Context, probe func(context.Context) error) error {
	if b.Embedded() || b.nc == nil {
		return nil
	}
	w := cutOffWatch{times: b.cutOff}
	t := time.NewTimer(w.times.probe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		b.probeOnce(ctx, &w, probe)
		t.Reset(w.next())
	}
}

// probeOnce probes the server the connection is on, if there is another
// to move to, and moves when w says so.
func (b *Bus) probeOnce(ctx context.Context, w *cutOffWatch, probe func(context.Context) error) {
	nc := b.nc
	server := nc.ConnectedServerId()
	if !nc.IsConnected() || len(nc.Servers()) < 2 {
		w.reset()
		return
	}
	began := time.Now()
	pctx, cancel := context.WithTimeout(ctx, w.times.timeout)
	err := probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if !nc.IsConnected() || nc.ConnectedServerId() != server {
		// Moved meanwhile: the failure, if any, was the old server's or
		// the move's.
		w.reset()
		return
	}
	now := time.Now()
	failed, move := w.probed(server, began, err != nil, now)
	if !move {
		return
	}
	b.log.Warn("bus: server cut off from its cluster; moving to another server",
		"server", connectedURL(nc), "server_name", nc.ConnectedServerName(), "for", failed.Round(time.Second), "err", err)
	if err := nc.ForceReconnect(); err != nil {
		b.log.Warn("bus: could not move to another server", "err", err)
	}
}

// cutOffWatch is LeaveCutOff's state: which server it probes, since when
// its probes fail, and when it last moved.
type cutOffWatch struct {
	times  cutOffTimes
	server string    // the server the last probe was of
	since  time.Time // when its probes began to fail; zero while they pass
	moved  time.Time // the last move; zero before the first
}

// probed takes a probe of server, begun at began, that failed or not,
// and says for how long the server has failed them and whether to move
// now.
func (w *cutOffWatch) probed(server string, began time.Time, failed bool, now time.Time) (time.Duration, bool) {
	if server != w.server {
		w.server, w.since = server, time.Time{}
	}
	if !failed {
		w.since = time.Time{}
		return 0, false
	}
	if w.since.IsZero() {
		w.since = began
	}
	d := now.Sub(w.since)
	if d < w.times.after || !w.moved.IsZero() && now.Sub(w.moved) < w.times.every {
		return d, false
	}
	w.moved, w.since = now, time.Time{}
	return d, true
}

// reset forgets a run of failures: the connection is down or moved, or
// there is nowhere to move.
func (w *cutOffWatch) reset() { w.server, w.since = "", time.Time{} }

// next is how long to wait before the next probe: sooner while they fail.
func (w *cutOffWatch) next() time.Duration {
	if w.since.IsZero() {
		return w.times.probe
	}
	return w.times.probeFailing
}
