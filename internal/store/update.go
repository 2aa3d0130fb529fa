package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// maxUpdateTries bounds UpdateRecord's read-modify-write loop: each lost
// race means another writer succeeded, so many in a row mean a livelock
// or a misbehaving writer, not bad luck.
const maxUpdateTries = 50

// UpdateRecord changes the record set (zone, name, typ) atomically. fn
// gets the current set (nil when there is none) and returns the new one,
// or nil to delete it; it may return cur itself, changed. The write is
// conditional on the revision fn saw, so a concurrent writer (another
// gateway adding its own ACME challenge value to the same name) makes
// UpdateRecord read again and call fn again, and neither write is lost.
// fn's error is returned as is, with nothing written.
//
// The set fn returns must keep zone, name and type. Names are stored as
// given, like PutRecord's.
func (s *Store) UpdateRecord(ctx context.Context, zone, name, typ string, fn func(cur *route.Record) (*route.Record, error)) error {
	key, err := recordKey(zone, name, typ)
	if err != nil {
		return fmt.Errorf("store: update %v", err)
	}
	kv := s.records.kv
	for range maxUpdateTries {
		var (
			cur *route.Record
			rev uint64
		)
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return fmt.Errorf("store: update record %s: %w", key, err)
		default:
			rev = e.Revision()
			if cur, err = s.records.decode(key, e.Value()); err != nil {
				return err // a bad stored value is not silently replaced
			}
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		switch {
		case next == nil && cur == nil:
			return nil
		case next == nil:
			err = kv.Purge(ctx, key, jetstream.LastRevision(rev))
		default:
			if err := s.records.valid(next); err != nil {
				return fmt.Errorf("store: update record %s: %v", key, err)
			}
			if k, err := s.records.key(next); err != nil || k != key {
				return fmt.Errorf("store: update record %s: the new set is %s %s %s", key, next.Zone, next.Name, next.Type)
			}
			b, merr := json.Marshal(next)
			if merr != nil {
				return fmt.Errorf("store: update record %s: %v", key, merr)
			}
			if cur == nil {
				_, err = kv.Create(ctx, key, b)
			} else {
				_, err = kv.Update(ctx, key, b, rev)
			}
		}
		if err == nil {
			return nil
		}
		if !contended(err) {
			return fmt.Errorf("store: update record %s: %w", key, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: update record %s: %w", key, err)
		}
	}
	return fmt.Errorf("store: update record %s: lost %d races in a row to other writers", key, maxUpdateTries)
}
