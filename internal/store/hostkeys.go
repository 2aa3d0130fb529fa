package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WatchHostKeys calls changed with the host id of every enrolment that is
// written or deleted from now on, until ctx ends. Discovery uses it to
// challenge a host again at once, so a revoked or replaced key takes the
// host out of the pool without waiting for the next periodic check. If
// the bus goes away it keeps retrying, and picks up where it left off:
// a change made meanwhile is reported once the bus is back. It returns
// nil when ctx ends. changed is called from one goroutine, in order.
func (s *Store) WatchHostKeys(ctx context.Context, changed func(hostID string)) error {
	nc := s.js.Conn()
	// The library resumes a watch after a reconnect only once it misses
	// its consumer's heartbeats, some 20 s later; a reconnect restarts
	// the watch at once instead.
	up := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(up)
	var next uint64 // the first revision not reported yet; 0 until known
	backoff := retryMin
	for ctx.Err() == nil {
		err := s.watchHostKeys(ctx, up, &next, changed)
		if err == nil {
			backoff = retryMin
			continue
		}
		if ctx.Err() != nil {
			break
		}
		s.log.Warn("store: watch host keys failed; retrying", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, retryMax)
	}
	return nil
}

// watchHostKeys is one watch, from revision *next on (the bucket's next
// revision when *next is 0), advancing *next past each change reported.
// It returns nil when the connection came back (up) or ctx ended, and an
// error when the watch could not start or ended by itself.
func (s *Store) watchHostKeys(ctx context.Context, up <-chan nats.Status, next *uint64, changed func(string)) error {
	kv := s.hostKeys.kv
	if *next == 0 {
		st, err := kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("store: watch host keys: %w", err)
		}
		js, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok {
			return errors.New("store: watch host keys: no stream state")
		}
		*next = js.StreamInfo().State.LastSeq + 1
	}
	w, err := kv.WatchAll(ctx, jetstream.ResumeFromRevision(*next), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("store: watch host keys: %w", err)
	}
	defer stopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-up:
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("store: watch host keys: the watch ended")
			}
			if e == nil || e.Revision() < *next {
				continue
			}
			*next = e.Revision() + 1
			if id, err := parseNameKey(e.Key()); err == nil {
				changed(id)
			}
		}
	}
}
