package dns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

// ChallengeNotes is the seam ACMEZones keeps a note of each value it adds
// in, with the time it was added, so that a value whose removal never came
// (the gateway that added it crashed) is found and swept. It must be
// shared by every gateway, like the records: internal/store's CertKV (the
// certificate storage) satisfies it. Keys are slash-separated paths;
// Load of a missing key and List of a missing path return an error
// wrapping fs.ErrNotExist, and Delete of a missing key returns nil.
type ChallengeNotes interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, path string, recursive bool) ([]string, error)
}

// StaleChallengeAge is how long after it was added a challenge value is
// swept. An ACME client needs its value for minutes (certmagic waits up
// to 2 minutes for it to propagate, then the CA validates it and the
// client removes it); a value an hour old is one nobody removed.
const StaleChallengeAge = time.Hour

// notesPath is where ACMEZones keeps its notes: a path of its own beside
// certmagic's ("certificates", "acme", "ocsp", locks), one key per value.
const notesPath = "gatehouse-dns01-challenges"

// note is what ACMEZones keeps of one value it added.
type note struct {
	Zone  string    `json:"zone"`
	Name  string    `json:"name"`
	Value string    `json:"value"`
	Added time.Time `json:"added"`
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
//
// Each value it adds is also noted, with the time, in the shared
// ChallengeNotes, and the note goes when the value does. A gateway that
// crashes between adding a value and removing it leaves both behind;
// [ACMEZones.Sweep] removes such values, and only those: an operator's
// values at the same name have no note and are never swept. The record
// sets themselves hold no time, as their JSON is the control API's.
type ACMEZones struct {
	zones   func() []string
	records RecordStore
	notes   ChallengeNotes
	now     func() time.Time // when a value is added; tests set it
}

// Interface guards (STYLE §3.6).
var (
	_ libdns.RecordAppender = (*ACMEZones)(nil)
	_ libdns.RecordDeleter  = (*ACMEZones)(nil)
)

// NewACMEZones returns a provider over records for the zones that zones
// returns (names without a trailing dot; called on every write, so zones
// added later are served), noting the values it adds in notes.
func NewACMEZones(zones func() []string, records RecordStore, notes ChallengeNotes) (*ACMEZones, error) {
	if zones == nil || records == nil || notes == nil {
		return nil, errors.New("dns: acme zones: a zone source, a record store and a notes store are required")
	}
	return &ACMEZones{zones: zones, records: records, notes: notes, now: time.Now}, nil
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

// noteKey is the key of c's note: one per value of a set, so that
// gateways noting values of the same name never write the same key.
func noteKey(zone, name, value string) string {
	sum := sha256.Sum256([]byte(zone + "\n" + name + "\n" + value))
	return notesPath + "/" + hex.EncodeToString(sum[:16])
}

// AppendRecords adds each record's value to its TXT set and returns the
// records as stored (the TTL is the set's). Every record is checked before
// anything is written; when a write fails, the values already added by
// this call are removed again. Each value is noted before it is written,
// so that no value of ours is ever in the store without a note.
func (a *ACMEZones) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	cs, err := a.locateAll(zone, recs)
	if err != nil {
		return nil, err
	}
	out := make([]libdns.Record, 0, len(cs))
	for i, c := range cs {
		b, _ := json.Marshal(note{Zone: c.zone, Name: c.name, Value: c.value, Added: a.now().UTC()})
		err := a.notes.Store(ctx, noteKey(c.zone, c.name, c.value), b)
		var ttl uint32
		if err == nil {
			err = a.records.UpdateRecord(ctx, c.zone, c.name, "TXT", func(cur *Record) (*Record, error) {
				if cur == nil {
					cur = &Record{Name: c.name, Type: "TXT", TTL: uint32(min(max(c.ttl, 0), maxChallengeTTL) / time.Second)}
				}
				cur.Values = append(cur.Values, c.value)
				ttl = cur.TTL
				return cur, nil
			})
		}
		if err != nil {
			// c's own note, if stored, is left to Sweep: its value may
			// be in the set as another writer's.
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
// the record removed (nil when the value was not there). The value's note
// goes with its last occurrence.
func (a *ACMEZones) remove(ctx context.Context, c challenge) (libdns.Record, error) {
	var removed libdns.Record
	var left bool // an occurrence of the value is still in the set
	err := a.records.UpdateRecord(ctx, c.zone, c.name, "TXT", func(cur *Record) (*Record, error) {
		removed, left = nil, false
		if cur == nil {
			return nil, errUnchanged
		}
		i := slices.Index(cur.Values, c.value)
		if i < 0 {
			return nil, errUnchanged
		}
		removed = libdns.TXT{Name: c.rel, TTL: time.Duration(cur.TTL) * time.Second, Text: c.value}
		cur.Values = slices.Delete(cur.Values, i, i+1)
		left = slices.Contains(cur.Values, c.value)
		if len(cur.Values) == 0 {
			return nil, nil
		}
		return cur, nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	if err == nil && !left {
		err = a.notes.Delete(ctx, noteKey(c.zone, c.name, c.value))
	}
	return removed, err
}

// Sweep removes every value noted before cutoff from its set, with every
// occurrence of it, and the note: values that the gateway which added
// them never removed. internal/gatehouse calls it at start and then
// periodically with cutoff StaleChallengeAge ago. A note whose value is
// gone already (removed, or its zone deleted) just goes. Sweeping is safe
// from every gateway at once. The error names each note that could not
// be swept; the others are swept regardless.
func (a *ACMEZones) Sweep(ctx context.Context, cutoff time.Time) error {
	keys, err := a.notes.List(ctx, notesPath, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dns: acme zones: sweep: %w", err)
	}
	var errs []error
	for _, k := range keys {
		if err := a.sweepOne(ctx, k, cutoff); err != nil {
			errs = append(errs, fmt.Errorf("dns: acme zones: sweep %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

func (a *ACMEZones) sweepOne(ctx context.Context, key string, cutoff time.Time) error {
	b, err := a.notes.Load(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // another gateway swept it, or its value was removed
	}
	if err != nil {
		return err
	}
	var n note
	if err := json.Unmarshal(b, &n); err != nil || n.Added.IsZero() || key != noteKey(n.Zone, n.Name, n.Value) {
		return fmt.Errorf("not a challenge note, left alone: %.100q", b)
	}
	if !n.Added.Before(cutoff) {
		return nil
	}
	err = a.records.UpdateRecord(ctx, n.Zone, n.Name, "TXT", func(cur *Record) (*Record, error) {
		if cur == nil || !slices.Contains(cur.Values, n.Value) {
			return nil, errUnchanged
		}
		cur.Values = slices.DeleteFunc(cur.Values, func(v string) bool { return v == n.Value })
		if len(cur.Values) == 0 {
			return nil, nil
		}
		return cur, nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return err
	}
	return a.notes.Delete(ctx, key)
}

// errUnchanged makes UpdateRecord write nothing: the value to remove is
// not there.
var errUnchanged = errors.New("dns: acme zones: unchanged")
