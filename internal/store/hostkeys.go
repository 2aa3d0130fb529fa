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
// a change made meanwhile is reported once the bus is back. If the bucket
// is made again (deleted with the nats CLI, NATS's storage wiped), found
// when the watch starts or at a check every Options.Resync, every
// enrolment in the new bucket is reported; one that went with the old
// bucket waits for discovery's periodic check. It returns nil when ctx
// ends. changed is called from one goroutine, in order.
func (s *Store) WatchHostKeys(ctx context.Context, changed func(hostID string)) error {
	nc := s.js.Conn()
	// The library resumes a watch after a reconnect only once it misses
	// its consumer's heartbeats, some 20 s later; a reconnect restarts
	// the watch at once instead.
	up := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(up)
	var cur hostKeyCursor
	backoff := retryMin
	for ctx.Err() == nil {
		err := s.watchHostKeys(ctx, up, &cur, changed)
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

// hostKeyCursor is where a host key watch resumes.
type hostKeyCursor struct {
	// created is the creation time of the bucket's stream the watch
	// follows, next the first revision of it not reported yet; 0 until
	// known.
	created time.Time
	next    uint64
}

// hostKeyStream reads the state of the host key bucket's stream.
func (s *Store) hostKeyStream(ctx context.Context) (*jetstream.StreamInfo, error) {
	st, err := s.hostKeys.kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: watch host keys: %w", err)
	}
	js, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, errors.New("store: watch host keys: no stream state")
	}
	return js.StreamInfo(), nil
}

// madeAgain reports whether info is the state of another stream than the
// one cur follows: a bucket made again starts its revisions over, below
// cur.next, and the watch, resuming there, would skip them all.
func (cur *hostKeyCursor) madeAgain(info *jetstream.StreamInfo) bool {
	return !info.Created.Equal(cur.created) || info.State.LastSeq+1 < cur.next
}

// watchHostKeys is one watch, from revision cur.next on (the bucket's next
// revision when cur.next is 0; its first if the bucket was made again),
// advancing cur.next past each change reported. It returns nil when the
// connection came back (up), a check found the bucket made again, or ctx
// ended, and an error when the watch could not start or ended by itself.
//
// The check is needed because the library's watch of a deleted stream
// neither ends nor reports anything: it waits for a stream of that name
// and then resumes at the revision it had reached, which a new bucket
// reaches only after as many writes as the old one had.
func (s *Store) watchHostKeys(ctx context.Context, up <-chan nats.Status, cur *hostKeyCursor, changed func(string)) error {
	kv := s.hostKeys.kv
	info, err := s.hostKeyStream(ctx)
	if err != nil {
		return err
	}
	switch {
	case cur.next == 0:
		cur.created, cur.next = info.Created, info.State.LastSeq+1
	case cur.madeAgain(info):
		s.log.Warn("store: the host key bucket was made again; reporting every enrolment in it", "created", info.Created)
		cur.created, cur.next = info.Created, 1
	}
	w, err := kv.WatchAll(ctx, jetstream.ResumeFromRevision(cur.next), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("store: watch host keys: %w", err)
	}
	defer stopWatch(s.js.Conn(), w)
	check := time.NewTicker(s.resync)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-up:
			return nil
		case <-check.C:
			// A failed read says nothing about the watch: the next
			// check, or a reconnect, tries again.
			if info, err := s.hostKeyStream(ctx); err == nil && cur.madeAgain(info) {
				return nil
			}
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("store: watch host keys: the watch ended")
			}
			if e == nil || e.Revision() < cur.next {
				continue
			}
			cur.next = e.Revision() + 1
			if id, err := parseNameKey(e.Key()); err == nil {
				changed(id)
			}
		}
	}
}
