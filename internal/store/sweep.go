package store

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A delete leaves a purge marker under the key, so that watchers see it.
// Nothing else ever removes one: each deleted key would hold a marker for
// ever, and every load, every resync and every gateway start read them
// all. Run sweeps away the markers older than Options.MarkerAge, one
// gateway at a time (the lock sweepLock).
//
// Why a sweep and not a marker TTL on each delete (jetstream.PurgeTTL):
// it also removes the markers that deletes made before it, it needs no
// bucket setting that an external NATS older than 2.11 lacks, and it can
// keep the markers a zone's SOA serial is made of (sweepBucket), which a
// TTL would let expire.
//
// What a swept marker no longer does: a gateway whose watch missed it (cut
// off for longer than MarkerAge) still drops the key at its next resync,
// which builds the table from live keys only.
const sweepLock = "gatehouse_store_sweep"

// sweptBuckets are the buckets whose markers Run sweeps. The lock bucket
// needs none: its keys and markers carry a TTL. The host key bucket keeps
// its markers: a revocation is a delete there, and a host key watch
// resuming after an outage must still see it (WatchHostKeys), not leave a
// revoked host routable until discovery's periodic check; enrolments
// change seldom, so its markers stay few.
var sweptBuckets = []string{bucketApps, bucketDomains, bucketZones, bucketRecords, bucketCerts}

// sweeper sweeps every SweepEvery, the first time once the first load
// is done, until ctx ends.
func (s *Store) sweeper(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.synced:
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("store: sweeping delete markers failed; trying again later", "err", err, "retry_in", s.opts.sweepEvery())
		}
		t.Reset(s.opts.sweepEvery())
	}
}

// sweep removes the markers older than MarkerAge from every swept bucket,
// unless another gateway holds sweepLock (it is sweeping them).
func (s *Store) sweep(ctx context.Context) error {
	key, err := lockKey(sweepLock)
	if err != nil {
		return err
	}
	ok, err := s.certs.tryLock(ctx, sweepLock, key)
	if err != nil || !ok {
		return err
	}
	defer func() {
		// The lock expires by itself if this fails.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.certs.Unlock(uctx, sweepLock)
	}()
	cutoff := time.Now().Add(-s.opts.markerAge())
	for _, bucket := range sweptBuckets {
		var zoneOf func(string) (string, bool)
		if bucket == bucketRecords {
			zoneOf = func(key string) (string, bool) {
				zone, _, _, err := parseRecordKey(key)
				return zone, err == nil
			}
		}
		n, err := s.sweepBucket(ctx, bucket, cutoff, zoneOf)
		if n > 0 {
			s.log.Info("store: swept delete markers", "bucket", bucket, "markers", n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type marker struct {
	key     string
	rev     uint64
	created time.Time
}

// sweepBucket removes bucket's markers made before cutoff and returns how
// many it removed.
//
// zoneOf, for the records bucket, names the zone of a key. A zone's SOA
// serial counts its newest record set, a deleted one included
// (route.Revision): of each zone's markers, the newest one stays while no
// live record set of the zone is newer, so a gateway loading the bucket
// after the sweep computes the serial it computed before. One marker per
// zone name stays, at most. A zone's own marker needs no such care: the
// serial of a deleted zone is never served, and a zone written again gets
// a revision above it.
//
// Each purge removes the key's messages up to the marker only: a value
// written under the key since the scan stays.
func (s *Store) sweepBucket(ctx context.Context, bucket string, cutoff time.Time, zoneOf func(string) (string, bool)) (int, error) {
	kv, err := s.js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, fmt.Errorf("store: sweep %s: %w", bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return 0, fmt.Errorf("store: sweep %s: %w", bucket, err)
	}
	var markers []marker
	newestLive := map[string]uint64{}   // zone -> revision
	newestMarker := map[string]uint64{} // zone -> revision
	err = func() error {
		defer stopWatch(s.js.Conn(), w)
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return fmt.Errorf("store: sweep %s: watch closed", bucket)
				}
				if e == nil {
					return nil
				}
				del := isDelete(e)
				if del {
					markers = append(markers, marker{key: e.Key(), rev: e.Revision(), created: e.Created()})
				}
				if zoneOf == nil {
					continue
				}
				if zone, ok := zoneOf(e.Key()); ok {
					newest := newestLive
					if del {
						newest = newestMarker
					}
					newest[zone] = max(newest[zone], e.Revision())
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}()
	if err != nil {
		return 0, err
	}
	stream, err := s.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return 0, fmt.Errorf("store: sweep %s: %w", bucket, err)
	}
	n := 0
	for _, m := range markers {
		if !m.created.Before(cutoff) {
			continue
		}
		if zoneOf != nil {
			if zone, ok := zoneOf(m.key); ok && m.rev == newestMarker[zone] && m.rev > newestLive[zone] {
				continue
			}
		}
		err := stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+bucket+"."+m.key), jetstream.WithPurgeSequence(m.rev+1))
		if err != nil {
			return n, fmt.Errorf("store: sweep %s: purge %s: %w", bucket, m.key, err)
		}
		n++
	}
	return n, nil
}
