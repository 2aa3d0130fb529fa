package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// maxUpdateTries bounds update's read-modify-write loop: each lost race
// means another writer succeeded, so many in a row mean a livelock or a
// misbehaving writer, not bad luck.
const maxUpdateTries = 50

// update changes the value under key atomically. fn gets the current
// value (nil when there is none) and returns the new one, or nil to
// delete it; it may return cur itself, changed. The write is conditional
// on the revision fn saw, so a concurrent writer makes update read again
// and call fn again, and neither write is lost. fn's error is returned as
// is, with nothing written. The value fn returns must keep key.
func (k kind[T]) update(ctx context.Context, key string, fn func(cur *T) (*T, error)) error {
	if err := k.reachable("update", key); err != nil {
		return err
	}
	for range maxUpdateTries {
		var (
			cur *T
			rev uint64
		)
		e, err := k.latest(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return fmt.Errorf("store: update %s %s: %w", k.what, key, err)
		default:
			rev = e.Revision()
			if cur, err = k.decode(key, e.Value()); err != nil {
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
			err = k.kv.Purge(ctx, key, jetstream.LastRevision(rev))
		default:
			if err := k.valid(next); err != nil {
				return fmt.Errorf("store: update %s %s: %v", k.what, key, err)
			}
			if nk, err := k.key(next); err != nil || nk != key {
				return fmt.Errorf("store: update %s %s: the new value is stored under another key", k.what, key)
			}
			b, merr := json.Marshal(next)
			if merr != nil {
				return fmt.Errorf("store: update %s %s: %v", k.what, key, merr)
			}
			if merr := checkSize(b); merr != nil {
				return fmt.Errorf("store: update %s %s: %w", k.what, key, merr)
			}
			if cur == nil {
				_, err = k.kv.Create(ctx, key, b)
			} else {
				_, err = k.kv.Update(ctx, key, b, rev)
			}
		}
		if err == nil {
			return nil
		}
		if !contended(err) {
			return fmt.Errorf("store: update %s %s: %w", k.what, key, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: update %s %s: %w", k.what, key, err)
		}
	}
	return fmt.Errorf("store: update %s %s: %w: %d compare-and-sets in a row refused", k.what, key, errLostRaces, maxUpdateTries)
}

// errLostRaces is update giving up. Other writers winning every time is
// one cause; a stream leader without quorum is another: it refuses every
// compare-and-set after a write it took and cannot commit ("wrong last
// sequence"), while reads still show the revision before it. Either way
// the store cannot take the write now and a later try may: Unavailable
// (the control API's 503 with Retry-After), not a failure.
var errLostRaces = errors.New("lost every race to other writers, or the stream cannot commit")

// UpdateRecord changes the record set (zone, name, typ) atomically, as
// update does: fn gets the current set (nil when there is none) and
// returns the new one, or nil to delete it. A concurrent writer (another
// gateway adding its own ACME challenge value to the same name) makes it
// read again and call fn again, and neither write is lost.
//
// The set fn returns must keep zone, name and type. Names are stored as
// given, like PutRecord's.
func (s *Store) UpdateRecord(ctx context.Context, zone, name, typ string, fn func(cur *route.Record) (*route.Record, error)) error {
	key, err := recordKey(zone, name, typ)
	if err != nil {
		return fmt.Errorf("store: update %v", err)
	}
	return s.records.update(ctx, key, fn)
}

// UpdateDomain changes the mapping of domain atomically, as update does:
// fn gets the current mapping (nil when there is none) and returns the
// new one, or nil to delete it. A verify that read a mapping before a
// move to another app never writes the old one back (DESIGN §7).
func (s *Store) UpdateDomain(ctx context.Context, domain string, fn func(cur *route.Domain) (*route.Domain, error)) error {
	key, err := nameKey(domain)
	if err != nil {
		return fmt.Errorf("store: update domain %q: %v", domain, err)
	}
	return s.domains.update(ctx, key, fn)
}

// UpdateApp changes the app with id atomically, as update does: fn gets
// the current app (nil when there is none) and returns the new one, or
// nil to delete it. The control API's conditional writes (If-Match) are
// checked in fn, so a write made on an app as it was read never replaces
// a change made since.
func (s *Store) UpdateApp(ctx context.Context, id string, fn func(cur *route.App) (*route.App, error)) error {
	key, err := nameKey(id)
	if err != nil {
		return fmt.Errorf("store: update app %q: %v", id, err)
	}
	return s.apps.update(ctx, key, fn)
}

// UpdateZone changes the zone name atomically, as update does. Its
// records are not touched.
func (s *Store) UpdateZone(ctx context.Context, name string, fn func(cur *route.Zone) (*route.Zone, error)) error {
	key, err := nameKey(name)
	if err != nil {
		return fmt.Errorf("store: update zone %q: %v", name, err)
	}
	return s.zones.update(ctx, key, fn)
}

// UpdateHostKey changes the enrolment of hostID atomically, as update
// does.
func (s *Store) UpdateHostKey(ctx context.Context, hostID string, fn func(cur *route.HostKey) (*route.HostKey, error)) error {
	key, err := nameKey(hostID)
	if err != nil {
		return fmt.Errorf("store: update host key %q: %v", hostID, err)
	}
	return s.hostKeys.update(ctx, key, fn)
}
