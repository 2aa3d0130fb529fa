package store

import (
	"context"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// catchUpWait bounds how long DomainsNaming waits for the routing table
// to apply what the domains bucket holds. Run applies a change within
// milliseconds; past this it is reloading, cut off from NATS or stuck,
// and the caller lists the bucket instead.
const catchUpWait = 2 * time.Second

// applied is how far the routing table Run keeps has followed each
// routing bucket: every change up to stream sequence seq of the stream
// created at created is in the table live holds. The follower sets it
// after each publish; DomainsNaming and the pages wait on it. Safe for
// concurrent use.
type applied struct {
	mu      sync.Mutex
	live    *route.Live // nil: Run has published no load, or has returned
	marks   map[string]mark
	waiting int           // callers waiting for a mark to move
	moved   chan struct{} // closed when a mark moves while some wait; then replaced
}

// mark is how far the table has followed one bucket's stream.
type mark struct {
	created time.Time
	seq     uint64
}

// publish records that live's table holds every change of feeds'
// streams, created at created, up to seq (per feed). It allocates only
// at a load and while a caller waits, so the follower's loop stays
// allocation-free otherwise.
func (a *applied) publish(live *route.Live, feeds []feed, created []time.Time, seq []uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.marks == nil {
		a.marks = make(map[string]mark, len(feeds))
	}
	moved := a.live != live
	for i, f := range feeds {
		m := mark{created[i], seq[i]}
		if old, ok := a.marks[f.bucket]; !ok || old != m {
			a.marks[f.bucket] = m
			moved = true
		}
	}
	a.live = live
	if moved {
		a.wakeLocked()
	}
}

// stop records that Run has returned: no table follows the bucket any
// more, and callers list it at once instead of waiting.
func (a *applied) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live = nil
	a.wakeLocked()
}

func (a *applied) wakeLocked() {
	if a.waiting > 0 && a.moved != nil {
		close(a.moved)
		a.moved = nil
	}
}

// wait returns the current table once it holds every change of
// bucket's stream created at created up to seq, or false if it does not
// within d, Run is not running, or ctx ends first.
func (a *applied) wait(ctx context.Context, bucket string, created time.Time, seq uint64, d time.Duration) (*route.Table, bool) {
	var timeout <-chan time.Time
	for {
		a.mu.Lock()
		if a.live == nil {
			a.mu.Unlock()
			return nil, false
		}
		if m := a.marks[bucket]; m.created.Equal(created) && m.seq >= seq {
			t := a.live.Load()
			a.mu.Unlock()
			return t, true
		}
		if a.moved == nil {
			a.moved = make(chan struct{})
		}
		moved := a.moved
		a.waiting++
		a.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		var done bool
		select {
		case <-moved:
		case <-timeout:
			done = true
		case <-ctx.Done():
			done = true
		}
		a.mu.Lock()
		a.waiting--
		a.mu.Unlock()
		if done {
			return nil, false
		}
	}
}

// caughtUp returns the routing table once it holds every change bucket
// held when called: it reads the bucket's stream state (no subject list)
// and waits, at most catchUpWait, for the follower to publish that far.
// ok false: it did not (Run not running, reloading, cut off from NATS,
// the stream made again), or ctx ended; the caller reads the bucket.
func (s *Store) caughtUp(ctx context.Context, bucket string) (t *route.Table, ok bool, err error) {
	if !s.applied.running() {
		return nil, false, nil
	}
	info, err := s.streamInfo(ctx, bucket)
	if err != nil {
		return nil, false, err
	}
	t, ok = s.applied.wait(ctx, bucket, info.Created, info.State.LastSeq, catchUpWait)
	if !ok {
		return nil, false, ctx.Err()
	}
	return t, true, nil
}

// DomainsNaming returns the names of the custom domain mappings that name
// app in the routing table Run keeps (verified or not, in no order), once
// that table holds every change the domains bucket had when it was
// called; ok is false if it does not within catchUpWait (Run is not
// running, is reloading or cut off from NATS) or ctx ends first, and the
// caller must list the bucket instead. It reads one stream's state and
// the table, not the bucket's values: the control API's app DELETE asks
// it, where listing a million mappings took seconds and gigabytes.
//
// A mapping written before the call is in the answer if it still names
// app in the table, which may be newer than the call (a later write may
// have moved or deleted it): so the caller reads each name back before
// it trusts it.
func (s *Store) DomainsNaming(ctx context.Context, app string) (names []string, ok bool, err error) {
	if err := s.domains.reachable("list", jetstream.AllKeys); err != nil {
		return nil, false, err // at once, as ListDomains fails
	}
	t, ok, err := s.caughtUp(ctx, bucketDomains)
	if !ok {
		return nil, false, err
	}
	return t.DomainsOf(app), true, nil
}

// running reports whether a table follows the bucket.
func (a *applied) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live != nil
}
