package store

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchHostKeys calls changed with the host id of every enrolment that is
// written or deleted from now on, until ctx ends. Discovery uses it to
// challenge a host again at once, so a revoked or replaced key takes the
// host out of the pool without waiting for the next periodic check. If
// the bus goes away it keeps retrying; it returns nil when ctx ends.
// changed is called from one goroutine, in order.
func (s *Store) WatchHostKeys(ctx context.Context, changed func(hostID string)) error {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		w, err := s.hostKeys.kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err == nil {
			backoff = 250 * time.Millisecond
			for e := range w.Updates() {
				if e == nil {
					continue
				}
				if id, err := parseNameKey(e.Key()); err == nil {
					changed(id)
				}
			}
			_ = w.Stop()
		} else {
			s.log.Warn("store: watch host keys", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
		}
	}
	return nil
}
