package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// defaultLoadTimeout bounds one full load of every bucket; past it
	// the session fails and is retried, the table untouched.
	defaultLoadTimeout = 15 * time.Second
	// drainTimeout bounds draining a stopped watcher.
	drainTimeout = 2 * time.Second
	// retryMin and retryMax bound the back-off between failed sessions.
	retryMin = 250 * time.Millisecond
	retryMax = 5 * time.Second
)

// feed connects one bucket to the builder.
type feed struct {
	bucket string
	kv     jetstream.KeyValue
	// add decodes a live value into st (the full load).
	add func(st *route.State, key string, val []byte) error
	// apply applies one change, made at store revision rev, to b (the
	// watch); del means the key was deleted or purged.
	apply func(b *route.Builder, key string, val []byte, rev uint64, del bool) error
	// saw notes in rs that key was written or deleted at rev, for the
	// buckets that make up a zone (DNS serials); nil for the others.
	saw func(rs route.Revisions, key string, rev uint64)
}

// feedOf builds the feed of one kind from its decoder and builder calls.
//
// A value that does not decode (written around the API by another tool or
// a buggy peer) is logged and is not in the table, in a load as in the
// watch: a good value it was written over leaves the table at once, as
// the next load would drop it anyway. The table then holds what the
// store's lists show and what a gateway started later serves.
func feedOf[T any](k kind[T], bucket string, addTo func(*route.State, *T), put func(*route.Builder, *T, uint64), del func(*route.Builder, string, uint64) error) feed {
	return feed{bucket: bucket, kv: k.kv,
		add: func(st *route.State, key string, val []byte) error {
			v, err := k.decode(key, val)
			if err == nil {
				addTo(st, v)
			}
			return err
		},
		apply: func(b *route.Builder, key string, val []byte, rev uint64, deleted bool) error {
			if deleted {
				return del(b, key, rev)
			}
			v, err := k.decode(key, val)
			if err != nil {
				_ = del(b, key, rev) // a key that does not parse was never in the table
				return err
			}
			put(b, v, rev)
			return nil
		}}
}

func (s *Store) feeds() []feed {
	zones := feedOf(s.zones, bucketZones,
		func(st *route.State, z *route.Zone) { st.Zones = append(st.Zones, z) },
		(*route.Builder).PutZone,
		func(b *route.Builder, key string, rev uint64) error {
			name, err := parseNameKey(key)
			if err == nil {
				b.DeleteZone(name, rev)
			}
			return err
		})
	zones.saw = func(rs route.Revisions, key string, rev uint64) {
		if name, err := parseNameKey(key); err == nil {
			rs.SawZone(name, rev)
		}
	}
	records := feedOf(s.records, bucketRecords,
		func(st *route.State, r *route.Record) { st.Records = append(st.Records, r) },
		(*route.Builder).PutRecord,
		func(b *route.Builder, key string, rev uint64) error {
			zone, name, typ, err := parseRecordKey(key)
			if err == nil {
				b.DeleteRecord(zone, name, typ, rev)
			}
			return err
		})
	records.saw = func(rs route.Revisions, key string, rev uint64) {
		if zone, _, _, err := parseRecordKey(key); err == nil {
			rs.SawRecord(zone, rev)
		}
	}
	return []feed{
		feedOf(s.apps, bucketApps,
			func(st *route.State, a *route.App) { st.Apps = append(st.Apps, a) },
			func(b *route.Builder, a *route.App, _ uint64) { b.PutApp(a) },
			func(b *route.Builder, key string, _ uint64) error {
				id, err := parseNameKey(key)
				if err == nil {
					b.DeleteApp(id)
				}
				return err
			}),
		feedOf(s.domains, bucketDomains,
			func(st *route.State, d *route.Domain) { st.Domains = append(st.Domains, d) },
			func(b *route.Builder, d *route.Domain, _ uint64) { b.PutDomain(d) },
			func(b *route.Builder, key string, _ uint64) error {
				name, err := parseNameKey(key)
				if err == nil {
					b.DeleteDomain(name)
				}
				return err
			}),
		zones,
		records,
	}
}

// Run loads every routing bucket, publishes it with b.Replace, then
// applies each change to b as the watchers deliver it. Every Resync it
// checks the table against the store, and reloads in full (new
// watchers, b.Replace) when the check finds a difference and every
// FullResync regardless. On any error — NATS gone, a bucket unreachable
// — it logs, keeps the table as it is, and retries with back-off. It
// returns nil when ctx ends. Meanwhile it sweeps away old delete markers
// (sweep.go).
func (s *Store) Run(ctx context.Context, b *route.Builder) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.applied.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { s.sweeper(ctx) })
	wait := retryMin
	reason := reasonStart
	for {
		next, err := s.session(ctx, b, reason)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			wait = retryMin
			reason = next
			continue
		}
		reason = reasonRetry
		s.log.Warn("store watch failed; keeping the last table", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, retryMax)
	}
}

// Why a session loads in full, as Options.OnResync reports it.
const (
	reasonStart     = "start"
	reasonRetry     = "retry"
	reasonInterval  = "interval"
	reasonStalled   = "stalled"
	reasonKeys      = "keys"
	reasonSwept     = "swept"
	reasonRecreated = "recreated"
)

// session is one watch: full load (made for reason), Replace, then
// changes until a full reload is due (nil, and the reason for it), a
// watcher fails or checks keep failing (error) or ctx ends.
//
// Changes arrive twice: from an ordered consumer per bucket (in order,
// gap-free, but hosted on one server: if that server dies the library only
// notices after missed heartbeats, ~10 s) and from the buckets' republished
// plain messages (at most once, but delivered through whichever server
// this connection uses). Each key remembers the last revision applied,
// so whichever copy comes first is applied and the other is skipped.
func (s *Store) session(ctx context.Context, b *route.Builder, reason string) (string, error) {
	feeds := s.feeds()
	repub, stop, err := s.subscribeRepublished()
	if err != nil {
		return "", err
	}
	defer stop()

	watchers := make([]jetstream.KeyWatcher, 0, len(feeds))
	defer func() {
		for _, w := range watchers {
			stopWatch(s.js.Conn(), w)
		}
	}()
	loadCtx, cancel := context.WithTimeout(ctx, s.opts.loadTimeout())
	defer cancel()
	// The streams as they are before the watchers start: each watcher's
	// load reflects every message up to the stream's last sequence then.
	before := make([]*jetstream.StreamInfo, len(feeds))
	for i, f := range feeds {
		if before[i], err = s.streamInfo(loadCtx, f.bucket); err != nil {
			return "", err
		}
	}
	for _, f := range feeds {
		// The watcher lives as long as the session: a watcher created with
		// loadCtx would be closed by the library when the load timeout
		// passes, failing the session every 15 s.
		w, err := f.kv.WatchAll(ctx)
		if err != nil {
			return "", fmt.Errorf("store: watch %s: %w", f.bucket, err)
		}
		watchers = append(watchers, w)
	}
	st, revs, dead, err := s.loadState(loadCtx, feeds, watchers)
	if err != nil {
		return "", err
	}
	b.Replace(st)
	f := s.follower(b, feeds, revs, dead, before)
	f.published()
	s.syncOnce.Do(func() { close(s.synced) })
	s.log.Debug("store: loaded every routing bucket", "reason", reason)
	if s.opts.OnResync != nil {
		s.opts.OnResync(reason)
	}

	return f.run(ctx, watchers, repub)
}

// follower returns the follower of a load that read revs and dead, of
// streams that were as before says when its watchers started.
func (s *Store) follower(b *route.Builder, feeds []feed, revs []map[string]uint64, dead []map[string]bool, before []*jetstream.StreamInfo) *follower {
	n := len(feeds)
	f := &follower{s: s, b: b, feeds: feeds, revs: revs, dead: dead,
		seq: make([]uint64, n), top: make([]uint64, n), target: make([]uint64, n), mark: make([]uint64, n), created: make([]time.Time, n),
		snap: make([]tally, n), infos: make([]*jetstream.StreamInfo, n)}
	for i := range feeds {
		f.created[i] = before[i].Created
		f.seq[i] = before[i].State.LastSeq
		for _, rev := range revs[i] {
			f.seq[i] = max(f.seq[i], rev)
		}
		f.top[i] = f.seq[i]
	}
	return f
}

// streamInfo asks for the state of bucket's stream.
func (s *Store) streamInfo(ctx context.Context, bucket string) (*jetstream.StreamInfo, error) {
	st, err := s.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("store: stream of %s: %w", bucket, err)
	}
	return st.CachedInfo(), nil
}

// Bounds on the republished changes a session's subscription holds while
// the follower applies earlier ones. A burst of writes (an import, a
// script) arrives far faster than the table takes it: the channel
// subscription this replaced held 1,024 and dropped the rest with a
// "slow consumer" error in the log, harmless (the watch carries the same
// changes) but alarming. 65,536 changes cover a burst of 20,000 with room
// to spare, and 64 MiB bounds what they may hold (a routing value is a
// few hundred bytes; the bucket allows 1 MiB). Past either, NATS drops
// and reports a slow consumer again.
const (
	repubPendingMsgs  = 1 << 16
	repubPendingBytes = 64 << 20
)

// subscribeRepublished subscribes to the buckets' republished changes.
// The subscription's callback hands each to the follower on repub, the
// changes waiting in the subscription meanwhile, up to the bounds above.
// stop ends the subscription and releases a callback waiting on repub.
func (s *Store) subscribeRepublished() (repub <-chan *nats.Msg, stop func(), err error) {
	ch := make(chan *nats.Msg)
	done := make(chan struct{})
	sub, err := s.js.Conn().Subscribe(republishPrefix+">", func(m *nats.Msg) {
		select {
		case ch <- m:
		case <-done:
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: subscribe: %w", err)
	}
	stop = func() {
		close(done)
		_ = sub.Unsubscribe()
	}
	if err := sub.SetPendingLimits(repubPendingMsgs, repubPendingBytes); err != nil {
		stop()
		return nil, nil, fmt.Errorf("store: subscribe: %w", err)
	}
	return ch, stop, nil
}

// loadState reads the initial values of every feed from its watcher:
// the state to publish, and per feed the revision of every key seen and
// the keys whose last change was a delete.
func (s *Store) loadState(ctx context.Context, feeds []feed, watchers []jetstream.KeyWatcher) (route.State, []map[string]uint64, []map[string]bool, error) {
	st := route.State{Revisions: route.Revisions{}}
	revs := make([]map[string]uint64, len(feeds))
	dead := make([]map[string]bool, len(feeds))
	for i, f := range feeds {
		var err error
		if revs[i], dead[i], err = s.load(ctx, f, watchers[i], &st); err != nil {
			return route.State{}, nil, nil, err
		}
		if f.saw == nil {
			continue
		}
		// Every key counts, deleted ones and values that do not decode
		// too: the serial a load gives is then never below the one the
		// changes it replaces gave, so a resync cannot move it back. (A
		// change to a value that does not decode, written around the API,
		// reaches the serial of a gateway that follows it only then.)
		for key, rev := range revs[i] {
			f.saw(st.Revisions, key, rev)
		}
	}
	return st, revs, dead, nil
}

// load reads w's initial values (up to the nil marker) into st and
// returns the revision of every key seen, deleted ones included, and the
// deleted ones.
func (s *Store) load(ctx context.Context, f feed, w jetstream.KeyWatcher, st *route.State) (map[string]uint64, map[string]bool, error) {
	live := make(map[string]jetstream.KeyValueEntry)
	revs := make(map[string]uint64)
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("store: watch %s: closed during load", f.bucket)
			}
			if e == nil {
				for key, e := range live {
					if err := f.add(st, key, e.Value()); err != nil {
						s.logBad(err)
					}
				}
				dead := make(map[string]bool, len(revs)-len(live))
				for key := range revs {
					if _, ok := live[key]; !ok {
						dead[key] = true
					}
				}
				return revs, dead, nil
			}
			revs[e.Key()] = e.Revision()
			if isDelete(e) {
				delete(live, e.Key())
			} else {
				live[e.Key()] = e
			}
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("store: load %s: %w", f.bucket, ctx.Err())
		}
	}
}

// follower applies changes after a load. One goroutine (run) applies
// every change, so b sees them in revision order per key, and checks
// what it applied against the store (compare); only a check's requests
// to the store (fetch) run on a goroutine of their own.
type follower struct {
	s     *Store
	b     *route.Builder
	feeds []feed
	// Per feed:
	revs []map[string]uint64 // key -> last revision applied
	dead []map[string]bool   // keys whose last change applied was a delete
	// seq is the stream sequence up to which the watcher delivered every
	// change (an ordered consumer is gap-free); the republished copies
	// do not count, as one may come before the changes under it.
	seq []uint64
	// top is the highest revision applied, from either copy: never past
	// the stream's last sequence, unless a copy came from elsewhere than
	// the server (compare).
	top []uint64
	// target is the stream's last sequence at a check that found the
	// watcher behind, mark what it had delivered then; 0: none.
	target, mark []uint64
	created      []time.Time // the stream's creation time at the load
	// The check in flight (one at a time): snap is what f had applied
	// when it started, infos the streams' state it read (written by the
	// check's goroutine, read by run once the check has reported).
	snap  []tally
	infos []*jetstream.StreamInfo
	// failed counts the checks that failed in a row.
	failed int
}

// tally is what a follower had applied of one feed when a check began.
type tally struct {
	seq, top    uint64 // the follower's seq and top
	known, dead uint64 // keys known, and of them deleted
}

// published tells DomainsNaming and the pages how far the table just
// published has followed each bucket; nothing while another Hold keeps
// the edits unpublished (the next burst tells it then).
func (f *follower) published() {
	if f.b.Unsent() {
		return
	}
	f.s.applied.publish(f.b.Live(), f.feeds, f.created, f.seq)
}

// burst is how many changes the follower applies under one Hold of the
// builder: the ones already waiting when it takes the first, so a burst
// of writes is published (and its part of the table copied) once per
// burst instead of once per change, while a lone change is published at
// once. The bound keeps each snapshot's delay short.
const burst = 4096

// checkTimeout bounds one check's requests. They run on a goroutine of
// their own: changes are applied meanwhile.
const checkTimeout = 5 * time.Second

// checkAgain is how soon a watcher behind its stream at a check, or a
// check that failed, is looked at again: a stalled watcher is then
// caught well within Resync.
func checkAgain(resync time.Duration) time.Duration {
	return max(min(resync/6, checkTimeout), 1)
}

// checkFailures is how many checks in a row, checkAgain apart, must fail
// for the session to end: as many as span a whole Resync.
//
// Not the first: a check fails on what the watch does not suffer from,
// for seconds (a stream leader election, a busy server's JetStream API),
// and ending the session then costs every gateway a full load (seconds
// of CPU at a million routes) at the moment NATS is least able to serve
// it. Not never: while checks fail, what they exist for (a watcher
// stalled, a change lost) goes unseen, and FullResync alone would leave
// it for up to 10 min. Once checks have failed for as long as one
// interval between checks, NATS is most likely out of reach, and the
// session ends for Run to retry: Run keeps the table meanwhile and
// reloads once NATS answers, bounding an unverified table to about two
// Resyncs, as when checks pass. The cost, one full load after an
// outage, is paid once per outage. A server whose API keeps failing
// while it still delivers changes then stalls the table until a load
// succeeds; the next FullResync would meet the same failure anyway, as
// a load reads the streams' state too.
func checkFailures(resync time.Duration) int {
	return max(int(resync/checkAgain(resync)), 1)
}

// run applies changes until a full reload is due (its reason), a watcher
// closes or checks keep failing (error), or ctx ends. It waits for one
// change, then takes those already waiting (up to burst) before it
// publishes them together. Every Resync it starts a check: it notes
// what it applied (snapshot), reads the streams on a goroutine of its
// own (fetch) while it goes on applying changes, and compares them when
// they arrive (checked).
func (f *follower) run(ctx context.Context, ws []jetstream.KeyWatcher, repub <-chan *nats.Msg) (string, error) {
	// Fixed selects over the four buckets keep this allocation-free.
	if len(ws) != 4 {
		return "", errors.New("store: internal: want 4 watchers")
	}
	full := time.NewTimer(f.s.opts.fullResync())
	defer full.Stop()
	check := time.NewTimer(f.s.resync)
	defer check.Stop()
	// A check in flight ends with run, whichever way run returns.
	checkCtx, cancelCheck := context.WithCancel(ctx)
	var checking sync.WaitGroup
	defer checking.Wait()
	defer cancelCheck()
	// check is not reset while a check is in flight, so there is at most
	// one: its result never waits for room.
	checkDone := make(chan error, 1)
	for {
		var (
			e  jetstream.KeyValueEntry
			m  *nats.Msg
			ok bool
			i  int
		)
		select {
		case <-ctx.Done():
			return "", nil
		case <-full.C:
			return reasonInterval, nil
		case <-check.C:
			f.snapshot()
			checking.Go(func() { checkDone <- f.fetch(checkCtx) })
			continue
		case err := <-checkDone:
			reason, next, err := f.checked(ctx, err)
			if err != nil || reason != "" {
				return reason, err
			}
			check.Reset(next)
			continue
		case m = <-repub:
		case e, ok = <-ws[0].Updates():
			i = 0
		case e, ok = <-ws[1].Updates():
			i = 1
		case e, ok = <-ws[2].Updates():
			i = 2
		case e, ok = <-ws[3].Updates():
			i = 3
		}
		release := f.b.Hold()
		err := f.one(i, e, ok, m)
	drain:
		for n := 1; err == nil && n < burst; n++ {
			e, m = nil, nil
			select {
			case m = <-repub:
			case e, ok = <-ws[0].Updates():
				i = 0
			case e, ok = <-ws[1].Updates():
				i = 1
			case e, ok = <-ws[2].Updates():
				i = 2
			case e, ok = <-ws[3].Updates():
				i = 3
			default:
				break drain
			}
			err = f.one(i, e, ok, m)
		}
		release()
		if err != nil {
			return "", err
		}
		f.published()
	}
}

// checked takes the result of the check in flight (err: its requests
// failed): why the table must be reloaded ("" if nothing says so), or
// the error that ends the session, and otherwise when to check next.
func (f *follower) checked(ctx context.Context, err error) (reason string, next time.Duration, _ error) {
	again := checkAgain(f.s.resync)
	if err != nil {
		f.failed++
		if f.failed >= checkFailures(f.s.resync) {
			return "", 0, fmt.Errorf("store: %d checks in a row failed: %w", f.failed, err)
		}
		f.s.log.Warn("store: a check of the table failed; checking again shortly",
			"err", err, "failures", f.failed, "retry_in", again)
		return "", again, nil
	}
	f.failed = 0
	reason, behind := f.compare(ctx)
	switch {
	case reason != "":
		return reason, 0, nil
	case behind:
		return "", again, nil
	}
	return "", f.s.resync, nil
}

// snapshot notes what f has applied of each feed, for the check it
// starts to compare with the streams.
func (f *follower) snapshot() {
	for i := range f.feeds {
		f.snap[i] = tally{seq: f.seq[i], top: f.top[i], known: uint64(len(f.revs[i])), dead: uint64(len(f.dead[i]))}
	}
}

// fetch reads each routing bucket's stream state into f.infos, within
// checkTimeout. It touches nothing else of f, so it may run while f
// applies changes.
func (f *follower) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	for i, fd := range f.feeds {
		if f.s.checking != nil {
			if err := f.s.checking(ctx, fd.bucket); err != nil {
				return fmt.Errorf("store: stream of %s: %w", fd.bucket, err)
			}
		}
		info, err := f.s.streamInfo(ctx, fd.bucket)
		if err != nil {
			return err
		}
		f.infos[i] = info
	}
	return nil
}

// compare compares each routing bucket's stream, as fetch read it, with
// what f had applied when the check began (snapshot), and returns why
// the table must be reloaded in full ("" if nothing says so), and
// whether a watcher is behind its stream, to be looked at again
// shortly. f went on applying changes while the streams were read: the
// snapshot, taken before, is what the streams are compared with.
//
// A key is one subject of the stream, its messages the key's history (a
// delete leaves a marker), so a table that missed nothing has applied
// the stream's last sequence and knows as many keys, deleted ones
// included, as the stream holds subjects. Subjects, not messages: a
// bucket made by another tool may keep more than the one message per key
// Open asks for, and Open keeps it as it is. Whatever else is found
// reloads:
//   - recreated: the stream's creation time changed, or its last sequence
//     is below what was applied (a bucket deleted and made again; or a
//     copy published under republishPrefix by someone with the bus's
//     rights, not by the server, at a revision the stream has not
//     reached: applied, it would hide every real change to its key
//     below that revision, and no count shows it);
//   - stalled: a watcher behind at the last check has delivered nothing
//     since (what the watch was for then is missing);
//   - keys: the stream holds another number of subjects than keys known
//     (a change lost on both paths; messages removed around the store);
//   - swept: it holds fewer, by no more than the deleted keys known: the
//     sweep (sweep.go) removed old markers. Most likely harmless, but a
//     count cannot tell it from a live key's message removed.
//
// A watcher behind (changes in flight) is no difference yet: its count
// is compared at a check that finds it caught up. The counts compare
// only when the stream's last sequence is the snapshot's: a key known
// was applied at a revision no later than that (the republished copy of
// a change is sent after the stream stored it), and every change up to
// it was delivered. What no count shows, a change received and
// misapplied, is left to FullResync.
func (f *follower) compare(ctx context.Context) (reason string, behind bool) {
	for i, fd := range f.feeds {
		info, snap := f.infos[i], f.snap[i]
		last, subjects := info.State.LastSeq, info.State.NumSubjects
		switch {
		case !info.Created.Equal(f.created[i]) || last < snap.top:
			reason = reasonRecreated
		case f.target[i] > f.seq[i] && f.seq[i] == f.mark[i]:
			// Nothing delivered since the last check: f.seq now, not
			// the snapshot, so a delivery while this one ran counts.
			reason = reasonStalled
		case snap.seq < last:
			f.target[i], f.mark[i] = last, f.seq[i]
			behind = true
			continue
		case subjects == snap.known:
			f.target[i] = 0
			continue
		case subjects < snap.known && snap.known-subjects <= snap.dead:
			reason = reasonSwept
		default:
			reason = reasonKeys
		}
		level := slog.LevelWarn
		if reason == reasonSwept {
			level = slog.LevelInfo // the sweep's doing, expected after each one
		}
		f.s.log.Log(ctx, level, "store: the table differs from the store; reloading every bucket",
			"reason", reason, "bucket", fd.bucket,
			"applied_seq", snap.seq, "applied_top", snap.top, "stream_last_seq", last, "behind_since_seq", f.target[i],
			"known_keys", snap.known, "deleted_keys", snap.dead, "stream_keys", subjects,
			"created", f.created[i], "stream_created", info.Created)
		return reason, false
	}
	if behind {
		f.s.log.Debug("store: a watcher is behind its bucket; checking again shortly")
	} else {
		f.s.log.Debug("store: the table matches the store")
	}
	return "", behind
}

// one applies what a select took: a republished message m, or else the
// entry e of watcher i (ok false: the watcher closed; e nil: the end of
// its initial values, nothing to apply).
func (f *follower) one(i int, e jetstream.KeyValueEntry, ok bool, m *nats.Msg) error {
	switch {
	case m != nil:
		f.republished(m)
	case !ok:
		return fmt.Errorf("store: watch %s: closed", f.feeds[i].bucket)
	case e != nil:
		if f.s.lose != nil && f.s.lose(f.feeds[i].bucket, e.Key(), e.Revision()) {
			return nil
		}
		f.seq[i] = max(f.seq[i], e.Revision())
		f.apply(i, e.Key(), e.Value(), e.Revision(), isDelete(e))
	}
	return nil
}

// apply applies one change to feed i unless a newer or equal revision of
// the key was applied already.
func (f *follower) apply(i int, key string, val []byte, rev uint64, del bool) {
	if rev <= f.revs[i][key] {
		return
	}
	f.revs[i][key] = rev
	f.top[i] = max(f.top[i], rev)
	if del {
		f.dead[i][key] = true
	} else if f.dead[i][key] {
		delete(f.dead[i], key)
	}
	if err := f.feeds[i].apply(f.b, key, val, rev, del); err != nil {
		f.s.logBad(err)
	}
}

// republished applies a message the server republished from a bucket:
// subject republishPrefix+bucket+"."+key, the stream sequence in
// Nats-Sequence, the KV operation in its headers.
func (f *follower) republished(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, republishPrefix)
	if !ok {
		return
	}
	for i, fd := range f.feeds {
		key, ok := strings.CutPrefix(rest, fd.bucket+".")
		if !ok {
			continue
		}
		rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil || rev == 0 {
			f.s.log.Warn("dropping republished change without a sequence", "subject", m.Subject)
			return
		}
		if f.s.lose != nil && f.s.lose(fd.bucket, key, rev) {
			return
		}
		f.apply(i, key, m.Data, rev, deleteHeader(m.Header))
		return
	}
}

// deleteHeader reports whether a republished KV message is a delete,
// purge or expiry marker, reading its headers exactly as jetstream's
// watcher and Get do: a KV-Operation header, if any, decides alone, and
// only the marker reasons the library knows are deletes. A message
// written around the store with other headers is a put to every other
// reader of the bucket (a load, the API, the watch); read otherwise here,
// its republished copy, which usually comes first, would drop the key
// from the running gateways alone.
func deleteHeader(h nats.Header) bool {
	if op := h.Get("KV-Operation"); op != "" {
		return op == "DEL" || op == "PURGE"
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}
