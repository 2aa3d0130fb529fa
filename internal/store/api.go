package store

import (
	"context"
	"fmt"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// The typed methods. Get and Delete return an error wrapping ErrNotFound
// for a missing key; List skips (and logs) values that do not decode.

func (s *Store) logBad(err error) { s.log.Warn("skipping bad stored value", "err", err) }

func keyOf(what, name string) (string, error) {
	k, err := nameKey(name)
	if err != nil {
		return "", fmt.Errorf("store: %s: name is required", what)
	}
	return k, nil
}

// GetApp returns the app with id.
func (s *Store) GetApp(ctx context.Context, id string) (*route.App, error) {
	k, err := keyOf("app", id)
	if err != nil {
		return nil, err
	}
	return s.apps.get(ctx, k)
}

// PutApp creates or replaces an app; a.ID must be a DNS label.
func (s *Store) PutApp(ctx context.Context, a *route.App) error { return s.apps.put(ctx, a) }

// DeleteApp deletes the app with id.
func (s *Store) DeleteApp(ctx context.Context, id string) error {
	k, err := keyOf("app", id)
	if err != nil {
		return err
	}
	return s.apps.del(ctx, k)
}

// ListApps returns every app, sorted by id.
func (s *Store) ListApps(ctx context.Context) ([]*route.App, error) {
	return s.apps.list(ctx, jetstream.AllKeys, s.logBad)
}

// GetDomain returns the mapping of a custom domain.
func (s *Store) GetDomain(ctx context.Context, domain string) (*route.Domain, error) {
	k, err := keyOf("domain", domain)
	if err != nil {
		return nil, err
	}
	return s.domains.get(ctx, k)
}

// PutDomain creates or replaces a custom domain mapping; d.Domain must be
// a normalized host name (route.NormalizeHost).
func (s *Store) PutDomain(ctx context.Context, d *route.Domain) error { return s.domains.put(ctx, d) }

// DeleteDomain deletes a custom domain mapping.
func (s *Store) DeleteDomain(ctx context.Context, domain string) error {
	k, err := keyOf("domain", domain)
	if err != nil {
		return err
	}
	return s.domains.del(ctx, k)
}

// ListDomains returns every custom domain mapping, sorted by name.
func (s *Store) ListDomains(ctx context.Context) ([]*route.Domain, error) {
	return s.domains.list(ctx, jetstream.AllKeys, s.logBad)
}

// GetZone returns a zone by name.
func (s *Store) GetZone(ctx context.Context, name string) (*route.Zone, error) {
	k, err := keyOf("zone", name)
	if err != nil {
		return nil, err
	}
	return s.zones.get(ctx, k)
}

// PutZone creates or replaces a zone; z.Name must be a normalized name.
func (s *Store) PutZone(ctx context.Context, z *route.Zone) error { return s.zones.put(ctx, z) }

// DeleteZone deletes a zone. Its records stay until deleted themselves.
func (s *Store) DeleteZone(ctx context.Context, name string) error {
	k, err := keyOf("zone", name)
	if err != nil {
		return err
	}
	return s.zones.del(ctx, k)
}

// ListZones returns every zone, sorted by name.
func (s *Store) ListZones(ctx context.Context) ([]*route.Zone, error) {
	return s.zones.list(ctx, jetstream.AllKeys, s.logBad)
}

// GetHostKey returns the enrolment of hostID.
func (s *Store) GetHostKey(ctx context.Context, hostID string) (*route.HostKey, error) {
	k, err := keyOf("host key", hostID)
	if err != nil {
		return nil, err
	}
	return s.hostKeys.get(ctx, k)
}

// PutHostKey creates or replaces a host's enrolment.
func (s *Store) PutHostKey(ctx context.Context, h *route.HostKey) error {
	return s.hostKeys.put(ctx, h)
}

// DeleteHostKey deletes a host's enrolment.
func (s *Store) DeleteHostKey(ctx context.Context, hostID string) error {
	k, err := keyOf("host key", hostID)
	if err != nil {
		return err
	}
	return s.hostKeys.del(ctx, k)
}

// ListHostKeys returns every enrolment, sorted by host id.
func (s *Store) ListHostKeys(ctx context.Context) ([]*route.HostKey, error) {
	return s.hostKeys.list(ctx, jetstream.AllKeys, s.logBad)
}

// PutRecord creates or replaces the record set (r.Zone, r.Name, r.Type).
// Names and types are stored as given ("*", "@", "_acme-challenge" are
// fine); callers normalize case.
func (s *Store) PutRecord(ctx context.Context, r *route.Record) error {
	return s.records.put(ctx, r)
}

// GetRecord returns one record set. A value that does not decode is an
// error wrapping ErrBadValue, as for every Get (ListRecords skips it).
func (s *Store) GetRecord(ctx context.Context, zone, name, typ string) (*route.Record, error) {
	k, err := recordKey(zone, name, typ)
	if err != nil {
		return nil, fmt.Errorf("store: get %v", err)
	}
	return s.records.get(ctx, k)
}

// DeleteRecord deletes one record set.
func (s *Store) DeleteRecord(ctx context.Context, zone, name, typ string) error {
	k, err := recordKey(zone, name, typ)
	if err != nil {
		return fmt.Errorf("store: delete %v", err)
	}
	return s.records.del(ctx, k)
}

// ListRecords returns the record sets of zone, sorted by key.
func (s *Store) ListRecords(ctx context.Context, zone string) ([]*route.Record, error) {
	z, err := tokensKey(zone)
	if err != nil {
		return nil, fmt.Errorf("store: list records: zone is required")
	}
	return s.records.list(ctx, z+".>", s.logBad)
}

// RecordsAt returns the record sets of zone at name, of every type,
// sorted by key: a write checks its neighbours at one name without
// reading the whole zone.
func (s *Store) RecordsAt(ctx context.Context, zone, name string) ([]*route.Record, error) {
	k, err := tokensKey(zone, name)
	if err != nil {
		return nil, fmt.Errorf("store: list records: zone and name are required")
	}
	return s.records.list(ctx, k+".*", s.logBad)
}

// DeleteRecords deletes every record set stored under zone, values that
// do not decode included (ListRecords skips those), so that a zone
// deleted and created again serves none of the old one's records. A
// zone without records is not an error.
func (s *Store) DeleteRecords(ctx context.Context, zone string) error {
	z, err := tokensKey(zone)
	if err != nil {
		return fmt.Errorf("store: delete records: zone is required")
	}
	keys, err := keysUnder(ctx, s.records.leader, s.records.kv, z+".>")
	if err != nil {
		return fmt.Errorf("store: delete records of %s: %w", zone, err)
	}
	for _, k := range keys {
		if err := s.records.kv.Purge(ctx, k); err != nil {
			return fmt.Errorf("store: delete records of %s: %w", zone, err)
		}
	}
	return nil
}
