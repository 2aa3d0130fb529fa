package dns

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libdns/libdns"
)

// ErrNotOurZone is returned for a record name outside every zone the
// gateway serves: the gateway cannot answer a challenge there.
var ErrNotOurZone = errors.New("dns: name is not in the gateway's zones")

// ACMEChallengeLabel is the first label of every name ACMEZones writes
// (RFC 8555 §8.4).
const ACMEChallengeLabel = "_acme-challenge"

// RecordStore is the seam ACMEZones writes through: the shared store of
// the zones' explicit records, which every gateway's DNS server answers
// from (internal/gatehouse adapts internal/store to it).
type RecordStore interface {
	// UpdateRecord changes the record set (zone, name, typ) atomically:
	// fn gets the current set (nil when there is none) and returns the
	// new one, or nil to delete the set. A concurrent writer must not make
	// either write lost (compare-and-set, calling fn again). An error
	// from fn writes nothing and is returned, wrapped or as is. name is a
	// full name under zone, lower case, without the trailing dot, as the
	// control API stores it.
	UpdateRecord(ctx context.Context, zone, name, typ string, fn func(cur *Record) (*Record, error)) error
}

// ACMEZones is the DNS-01 provider certmagic drives (libdns's
// RecordAppender and RecordDeleter) for the gateway's own zones: it adds
// and removes the values of _acme-challenge TXT records in the store, the
// same record sets the control API's
// PUT /api/v3/dns/zones/{zone}/records/{name}/TXT writes, so every
// gateway of the cluster answers the challenge from the shared store.
//
// It writes only TXT records whose name starts with _acme-challenge and
// lies in one of the gateway's zones (the most specific one, which is the
// zone the DNS server answers it from); anything else is refused. A value
// is added to the set beside whatever values are already there (another
// gateway's concurrent challenge, an operator's record), and removing it
// takes away exactly that one value, deleting the set when it was the
// last. The TTL belongs to the set: a new set gets the appended record's
// TTL (zero: the zone's), an existing set keeps its own, and deleting
// matches a record by name and value only.
type ACMEZones struct {
	zones   func() []string
	records RecordStore
}

// Interface guards (STYLE §3.6).
var (
	_ libdns.RecordAppender = (*ACMEZones)(nil)
	_ libdns.RecordDeleter  = (*ACMEZones)(nil)
)

// NewACMEZones returns a provider over records for the zones that zones
// returns (names without a trailing dot; called on every write, so zones
// added later are served).
func NewACMEZones(zones func() []string, records RecordStore) (*ACMEZones, error) {
	if zones == nil || records == nil {
		return nil, errors.New("dns: acme zones: a zone source and a record store are required")
	}
	return &ACMEZones{zones: zones, records: records}, nil
}

// maxChallengeTTL caps the TTL a new challenge set gets.
const maxChallengeTTL = 24 * time.Hour

// challenge is one record of a call, located in the store.
type challenge struct {
	zone  string // the gateway zone that holds it
	name  string // full name, lower case, no trailing dot
	rel   string // the name relative to the caller's zone, for the result
	value string
	ttl   time.Duration
}

// locate checks rec and finds the gateway zone it belongs to.
func (a *ACMEZones) locate(zone string, rec libdns.Record) (challenge, error) {
	if rec == nil {
		return challenge{}, errors.New("dns: acme zones: nil record")
	}
	rr := rec.RR()
	if rr.Type != "TXT" {
		return challenge{}, fmt.Errorf("dns: acme zones: only TXT records, got %q for %q", rr.Type, rr.Name)
	}
	if rr.Data == "" || len(rr.Data) > 2048 {
		return challenge{}, fmt.Errorf("dns: acme zones: a TXT value holds 1 to 2048 bytes, got %d for %q", len(rr.Data), rr.Name)
	}
	z := strings.ToLower(strings.TrimSuffix(zone, "."))
	if z == "" {
		return challenge{}, errors.New("dns: acme zones: zone is required")
	}
	name := strings.ToLower(strings.TrimSuffix(libdns.AbsoluteName(rr.Name, z+"."), "."))
	if name != z && !strings.HasSuffix(name, "."+z) {
		return challenge{}, fmt.Errorf("dns: acme zones: %q is not in zone %q", rr.Name, zone)
	}
	if first, _, _ := strings.Cut(name, "."); first != ACMEChallengeLabel {
		return challenge{}, fmt.Errorf("dns: acme zones: %s: only %s names are written", name, ACMEChallengeLabel)
	}
	own := ""
	for _, gz := range a.zones() {
		gz = strings.ToLower(strings.TrimSuffix(gz, "."))
		if gz != "" && (name == gz || strings.HasSuffix(name, "."+gz)) && len(gz) > len(own) {
			own = gz
		}
	}
	if own == "" {
		return challenge{}, fmt.Errorf("%w: %s", ErrNotOurZone, name)
	}
	return challenge{zone: own, name: name, rel: libdns.RelativeName(name, z), value: rr.Data, ttl: rr.TTL}, nil
}

func (a *ACMEZones) locateAll(zone string, recs []libdns.Record) ([]challenge, error) {
	out := make([]challenge, 0, len(recs))
	for _, r := range recs {
		c, err := a.locate(zone, r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// AppendRecords adds each record's value to its TXT set and returns the
// records as stored (the TTL is the set's). Every record is checked before
// anything is written; when a write fails, the values already added by
// this call are removed again.
func (a *ACMEZones) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	cs, err := a.locateAll(zone, recs)
	if err != nil {
		return nil, err
	}
	out := make([]libdns.Record, 0, len(cs))
	for i, c := range cs {
		var ttl uint32
		err := a.records.UpdateRecord(ctx, c.zone, c.name, "TXT", func(cur *Record) (*Record, error) {
			if cur == nil {
				cur = &Record{Name: c.name, Type: "TXT", TTL: uint32(min(max(c.ttl, 0), maxChallengeTTL) / time.Second)}
			}
			cur.Values = append(cur.Values, c.value)
			ttl = cur.TTL
			return cur, nil
		})
		if err != nil {
			for _, done := range cs[:i] {
				_, _ = a.remove(context.WithoutCancel(ctx), done)
			}
			return nil, fmt.Errorf("dns: acme zones: add %s TXT: %w", c.name, err)
		}
		out = append(out, libdns.TXT{Name: c.rel, TTL: time.Duration(ttl) * time.Second, Text: c.value})
	}
	return out, nil
}

// DeleteRecords removes each record's value from its TXT set, once (the
// values of other challenges and records stay), and returns the records
// it removed; a value that is not there is skipped. A record must name
// its value: ACMEZones never deletes a whole set.
func (a *ACMEZones) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	cs, err := a.locateAll(zone, recs)
	if err != nil {
		return nil, err
	}
	var out []libdns.Record
	var errs []error
	for _, c := range cs {
		rec, err := a.remove(ctx, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("dns: acme zones: remove %s TXT: %w", c.name, err))
			continue
		}
		if rec != nil {
			out = append(out, rec)
		}
	}
	return out, errors.Join(errs...)
}

// remove takes one occurrence of c's value out of its set, and reports
// the record removed (nil when the value was not there).
func (a *ACMEZones) remove(ctx context.Context, c challenge) (libdns.Record, error) {
	var removed libdns.Record
	err := a.records.UpdateRecord(ctx, c.zone, c.name, "TXT", func(cur *Record) (*Record, error) {
		removed = nil
		if cur == nil {
			return nil, errUnchanged
		}
		i := slices.Index(cur.Values, c.value)
		if i < 0 {
			return nil, errUnchanged
		}
		removed = libdns.TXT{Name: c.rel, TTL: time.Duration(cur.TTL) * time.Second, Text: c.value}
		cur.Values = slices.Delete(cur.Values, i, i+1)
		if len(cur.Values) == 0 {
			return nil, nil
		}
		return cur, nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return removed, err
}

// errUnchanged makes UpdateRecord write nothing: the value to remove is
// not there.
var errUnchanged = errors.New("dns: acme zones: unchanged")
