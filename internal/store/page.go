package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// A page is one bounded slice of a kind's values, in the order the
// control API lists them, read without loading the rest: the keys are
// listed (names only, no values), and only the page's values are read.
// A whole-bucket list holds every value, decoded and raw, at once; on a
// platform of a million apps that is gigabytes per call.
//
// The keys come from the server's count of messages per subject (stream
// info with a subject filter), one answer per 100,000 keys, not from a
// watcher: a watcher is sent every key as a message of its own, and
// listing 50,000 keys that way took 0.6 s where this takes a few
// hundredths. The count names keys whose last message is a delete
// marker too; their reads find nothing and they are skipped. Apps and
// domains take their names from the routing table instead while it
// follows the store (tablepage.go).

// MaxPage is the most values one page call returns.
const MaxPage = 1000

// page returns up to limit (1 to MaxPage) valid values under filter whose
// sort keys, as order derives them from the stored keys, come after after
// ("" for the first page), in that order, and whether a value follows
// the last one returned. Keys that order cannot read, values that do not
// decode (logged by bad) and keys deleted since they were listed are
// skipped, as list skips them.
func (k kind[T]) page(ctx context.Context, js jetstream.JetStream, filter, after string, limit int, order func(key string) (string, error), bad func(error)) ([]*T, bool, error) {
	if limit < 1 || limit > MaxPage {
		return nil, false, fmt.Errorf("store: page of %s: limit must be 1 to %d, got %d", k.what, MaxPage, limit)
	}
	if err := k.reachable("list", filter); err != nil {
		return nil, false, err
	}
	keys, err := subjectKeys(ctx, js, k.kv.Bucket(), filter)
	if err != nil {
		return nil, false, fmt.Errorf("store: list %s: %w", k.what, err)
	}
	type ordered struct{ sort, key string }
	all := make([]ordered, 0, len(keys))
	for _, key := range keys {
		s, err := order(key)
		if err != nil {
			bad(fmt.Errorf("store: %s %s: %w: %v", k.what, key, ErrBadValue, err))
			continue
		}
		if s > after {
			all = append(all, ordered{s, key})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].sort < all[j].sort })
	type value struct {
		v             *T
		err, badValue error
	}
	read := func(ctx context.Context, i int) value {
		e, err := k.latest(ctx, all[i].key)
		if err != nil {
			return value{err: err}
		}
		v, err := k.decode(all[i].key, e.Value())
		return value{v: v, badValue: err}
	}
	out := make([]*T, 0, min(limit, len(all)))
	var more bool
	var failed error
	err = readInOrder(ctx, len(all), limit+1, read, func(r value) int {
		switch {
		case errors.Is(r.err, jetstream.ErrKeyNotFound) || errors.Is(r.err, jetstream.ErrKeyDeleted):
		case r.err != nil:
			failed = r.err
			return 0
		case r.badValue != nil:
			bad(r.badValue)
		case len(out) == limit:
			more = true // read one past the page: "more" promises a value
			return 0
		default:
			out = append(out, r.v)
		}
		return limit + 1 - len(out)
	})
	if err != nil {
		failed = err
	}
	if failed != nil {
		return nil, false, fmt.Errorf("store: list %s: %w", k.what, failed)
	}
	return out, more, nil
}

// PageApps returns up to limit (1 to MaxPage) apps whose ids sort after
// after, by id, and whether more may follow.
//
// While Run's routing table follows the store, the ids come from it
// (tablePage), not from a list of the bucket's keys.
func (s *Store) PageApps(ctx context.Context, after string, limit int) ([]*route.App, bool, error) {
	if out, more, ok, err := tablePage(ctx, s, s.apps, bucketApps, &s.sortedApps, after, limit); ok || err != nil {
		return out, more, err
	}
	return s.apps.page(ctx, s.js, jetstream.AllKeys, after, limit, parseNameKey, s.logBad)
}

// PageDomains is PageApps for custom domain mappings, by domain.
func (s *Store) PageDomains(ctx context.Context, after string, limit int) ([]*route.Domain, bool, error) {
	if out, more, ok, err := tablePage(ctx, s, s.domains, bucketDomains, &s.sortedDomains, after, limit); ok || err != nil {
		return out, more, err
	}
	return s.domains.page(ctx, s.js, jetstream.AllKeys, after, limit, parseNameKey, s.logBad)
}

// PageZones is PageApps for zones, by name.
func (s *Store) PageZones(ctx context.Context, after string, limit int) ([]*route.Zone, bool, error) {
	return s.zones.page(ctx, s.js, jetstream.AllKeys, after, limit, parseNameKey, s.logBad)
}

// PageHostKeys is PageApps for host key enrolments, by host id.
func (s *Store) PageHostKeys(ctx context.Context, after string, limit int) ([]*route.HostKey, bool, error) {
	return s.hostKeys.page(ctx, s.js, jetstream.AllKeys, after, limit, parseNameKey, s.logBad)
}

// PageRecords is PageApps for the record sets of zone, ordered as the
// control API lists them: by name+" "+type, the form after takes too.
func (s *Store) PageRecords(ctx context.Context, zone, after string, limit int) ([]*route.Record, bool, error) {
	z, err := tokensKey(zone)
	if err != nil {
		return nil, false, fmt.Errorf("store: list records: zone is required")
	}
	order := func(key string) (string, error) {
		p, err := parseTokensKey(key)
		if err != nil {
			return "", err
		}
		if len(p) != 3 {
			return "", fmt.Errorf("record key %q: want zone, name and type", key)
		}
		return p[1] + " " + p[2], nil
	}
	return s.records.page(ctx, s.js, z+".>", after, limit, order, s.logBad)
}

// subjectKeys lists the keys of bucket matching filter that have a
// message, a delete marker included, from the server's per-subject count.
func subjectKeys(ctx context.Context, js jetstream.JetStream, bucket, filter string) ([]string, error) {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, streamGone(err)
	}
	prefix := "$KV." + bucket + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+filter))
	if err != nil {
		return nil, streamGone(err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if key, ok := strings.CutPrefix(subj, prefix); ok {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// streamGone makes a bucket deleted under a running gateway the store not
// answering (Unavailable), as leaderGets' reads of it are: a page answers
// 503, as a list or a get of that bucket does, not 500.
func streamGone(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: %w", jetstream.ErrNoStreamResponse, err)
	}
	return err
}
