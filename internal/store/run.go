package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// loadTimeout bounds one full load of every bucket; past it the
	// session fails and is retried, the table untouched.
	loadTimeout = 15 * time.Second
	// drainTimeout bounds draining a stopped watcher.
	drainTimeout = 2 * time.Second
	// retryMin and retryMax bound the back-off between failed sessions.
	retryMin = 250 * time.Millisecond
	retryMax = 5 * time.Second
)

func newTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }

// feed connects one bucket to the builder.
type feed struct {
	name string
	kv   jetstream.KeyValue
	// add decodes a live value into st (the full load).
	add func(st *route.State, key string, val []byte) error
	// apply applies one change to b (the watch).
	apply func(b *route.Builder, e jetstream.KeyValueEntry) error
}

func (s *Store) feeds() []feed {
	return []feed{
		{name: "apps", kv: s.apps.kv,
			add: func(st *route.State, key string, val []byte) error {
				a, err := s.apps.decode(key, val)
				if err == nil {
					st.Apps = append(st.Apps, a)
				}
				return err
			},
			apply: func(b *route.Builder, e jetstream.KeyValueEntry) error {
				if isDelete(e) {
					id, err := parseNameKey(e.Key())
					if err == nil {
						b.DeleteApp(id)
					}
					return err
				}
				a, err := s.apps.decode(e.Key(), e.Value())
				if err == nil {
					b.PutApp(a)
				}
				return err
			}},
		{name: "domains", kv: s.domains.kv,
			add: func(st *route.State, key string, val []byte) error {
				d, err := s.domains.decode(key, val)
				if err == nil {
					st.Domains = append(st.Domains, d)
				}
				return err
			},
			apply: func(b *route.Builder, e jetstream.KeyValueEntry) error {
				if isDelete(e) {
					name, err := parseNameKey(e.Key())
					if err == nil {
						b.DeleteDomain(name)
					}
					return err
				}
				d, err := s.domains.decode(e.Key(), e.Value())
				if err == nil {
					b.PutDomain(d)
				}
				return err
			}},
		{name: "zones", kv: s.zones.kv,
			add: func(st *route.State, key string, val []byte) error {
				z, err := s.zones.decode(key, val)
				if err == nil {
					st.Zones = append(st.Zones, z)
				}
				return err
			},
			apply: func(b *route.Builder, e jetstream.KeyValueEntry) error {
				if isDelete(e) {
					name, err := parseNameKey(e.Key())
					if err == nil {
						b.DeleteZone(name)
					}
					return err
				}
				z, err := s.zones.decode(e.Key(), e.Value())
				if err == nil {
					b.PutZone(z)
				}
				return err
			}},
		{name: "records", kv: s.records.kv,
			add: func(st *route.State, key string, val []byte) error {
				r, err := s.records.decode(key, val)
				if err == nil {
					st.Records = append(st.Records, r)
				}
				return err
			},
			apply: func(b *route.Builder, e jetstream.KeyValueEntry) error {
				if isDelete(e) {
					zone, name, typ, err := parseRecordKey(e.Key())
					if err == nil {
						b.DeleteRecord(zone, name, typ)
					}
					return err
				}
				r, err := s.records.decode(e.Key(), e.Value())
				if err == nil {
					b.PutRecord(r)
				}
				return err
			}},
	}
}

// Run loads every routing bucket, publishes it with b.Replace, then
// applies each change to b as the watchers deliver it. Every Resync it
// reloads in full (new watchers, b.Replace). On any error — NATS gone, a
// bucket unreachable — it logs, keeps the table as it is, and retries
// with back-off. It returns nil when ctx ends.
func (s *Store) Run(ctx context.Context, b *route.Builder) error {
	wait := retryMin
	for {
		err := s.session(ctx, b)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			wait = retryMin
			continue
		}
		s.log.Warn("store watch failed; keeping the last table", "err", err, "retry_in", wait)
		t := newTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, retryMax)
	}
}

// session is one watch: full load, Replace, then changes until the resync
// is due (nil), a watcher fails (error) or ctx ends.
func (s *Store) session(ctx context.Context, b *route.Builder) error {
	feeds := s.feeds()
	watchers := make([]jetstream.KeyWatcher, 0, len(feeds))
	defer func() {
		for _, w := range watchers {
			stopWatch(w)
		}
	}()
	loadCtx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	for _, f := range feeds {
		w, err := f.kv.WatchAll(loadCtx)
		if err != nil {
			return fmt.Errorf("store: watch %s: %w", f.name, err)
		}
		watchers = append(watchers, w)
	}
	var st route.State
	for i, f := range feeds {
		if err := s.load(loadCtx, f, watchers[i], &st); err != nil {
			return err
		}
	}
	b.Replace(st)
	s.syncOnce.Do(func() { close(s.synced) })

	resync := newTimer(s.resync)
	defer resync.Stop()
	return s.follow(ctx, b, feeds, watchers, resync.C)
}

// load reads w's initial values (up to the nil marker) into st.
func (s *Store) load(ctx context.Context, f feed, w jetstream.KeyWatcher, st *route.State) error {
	live := make(map[string]jetstream.KeyValueEntry)
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("store: watch %s: closed during load", f.name)
			}
			if e == nil {
				for key, e := range live {
					if err := f.add(st, key, e.Value()); err != nil {
						s.logBad(err)
					}
				}
				return nil
			}
			if isDelete(e) {
				delete(live, e.Key())
			} else {
				live[e.Key()] = e
			}
		case <-ctx.Done():
			return fmt.Errorf("store: load %s: %w", f.name, ctx.Err())
		}
	}
}

// follow applies changes until resync fires, a watcher closes, or ctx
// ends. One goroutine applies every change, so b sees them in order per
// bucket.
func (s *Store) follow(ctx context.Context, b *route.Builder, feeds []feed, ws []jetstream.KeyWatcher, resync <-chan time.Time) error {
	// A fixed select over the four buckets keeps this allocation-free.
	if len(ws) != 4 {
		return errors.New("store: internal: want 4 watchers")
	}
	for {
		var (
			e  jetstream.KeyValueEntry
			ok bool
			i  int
		)
		select {
		case <-ctx.Done():
			return nil
		case <-resync:
			return nil
		case e, ok = <-ws[0].Updates():
			i = 0
		case e, ok = <-ws[1].Updates():
			i = 1
		case e, ok = <-ws[2].Updates():
			i = 2
		case e, ok = <-ws[3].Updates():
			i = 3
		}
		if !ok {
			return fmt.Errorf("store: watch %s: closed", feeds[i].name)
		}
		if e == nil {
			continue
		}
		if err := feeds[i].apply(b, e); err != nil {
			s.logBad(err)
		}
	}
}
