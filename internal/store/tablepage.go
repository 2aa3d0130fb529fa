package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// A page of apps or domains listed every key of the bucket (stream info
// with its subjects, then a sort): at a million apps ~1 s and 100+ MB
// per page, and the dashboard asks for one every 5 s while it is open.
// The routing table holds the same names; once it holds every change the
// bucket held when the page was asked (Store.caughtUp), its names, sorted
// once per version of the table's apps (domains) and kept, give the page
// by a binary search, and only the page's values are read, as before.
// Zones, records and host keys are few and keep the list.

// sortedNames is one kind's names from the routing table, sorted, as of
// one version of them: 16 bytes a name (the strings are the table's).
type sortedNames struct {
	// pick is the names and their version from a table.
	pick func(t *route.Table) (version func() uint64, names func() []string)

	mu      sync.Mutex // held while sorting: one sort per version
	valid   bool
	version uint64
	names   []string
}

// of returns t's names, sorted: the kept ones if t's version of them is
// the one they were sorted at.
func (c *sortedNames) of(t *route.Table) []string {
	version, names := c.pick(t)
	v := version()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || c.version != v {
		c.names, c.version, c.valid = names(), v, true
	}
	return c.names
}

func appNames(t *route.Table) (func() uint64, func() []string) {
	return t.AppsVersion, t.AppIDs
}

func domainNames(t *route.Table) (func() uint64, func() []string) {
	return t.DomainsVersion, t.DomainNames
}

// tablePage is kind k's page (see page) from the routing table's names;
// ok false when the table cannot give it now, and the caller lists the
// bucket instead. Each name's value is read from the store: a name the
// store no longer holds (deleted since) is skipped, as page skips it,
// and one whose value does not read is skipped and logged.
func tablePage[T any](ctx context.Context, s *Store, k kind[T], bucket string, c *sortedNames, after string, limit int) (out []*T, more, ok bool, err error) {
	if limit < 1 || limit > MaxPage {
		return nil, false, false, fmt.Errorf("store: page of %s: limit must be 1 to %d, got %d", k.what, MaxPage, limit)
	}
	if err := k.reachable("list", jetstream.AllKeys); err != nil {
		return nil, false, false, err // at once, as page fails, not after a stream state's timeout
	}
	t, ok, err := s.caughtUp(ctx, bucket)
	if !ok {
		return nil, false, false, streamGone(err)
	}
	names := c.of(t)
	i := sort.SearchStrings(names, after)
	if i < len(names) && names[i] == after {
		i++
	}
	names = names[i:]
	type value struct {
		v    *T
		err  error
		skip bool // not a name the store keeps; page could not list it either
	}
	read := func(ctx context.Context, i int) value {
		key, err := nameKey(names[i])
		if err != nil {
			return value{skip: true}
		}
		v, err := k.get(ctx, key)
		return value{v: v, err: err}
	}
	out = make([]*T, 0, min(limit, len(names)))
	var failed error
	err = readInOrder(ctx, len(names), limit+1, read, func(r value) int {
		switch {
		case r.skip, errors.Is(r.err, ErrNotFound):
		case errors.Is(r.err, ErrBadValue):
			s.logBad(r.err)
		case r.err != nil:
			failed = r.err
			return 0
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
		return nil, false, true, fmt.Errorf("store: list %s: %w", k.what, failed)
	}
	return out, more, true, nil
}
