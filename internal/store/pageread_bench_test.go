//go:build unix

package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkPageReads measures a full page (MaxPage of 2000 apps, listing
// the keys) as page reads it, up to pageReaders at a time ("32"), and as
// it read it before, one after the other ("seq", pageOneByOne),
// alternately in each iteration, so that both see the same load on a
// shared machine: wall time, and CPU of the whole process (the embedded
// server's included).
//
//	go test -run '^$' -bench PageReads -benchtime 20x -count 5 ./internal/store/
func BenchmarkPageReads(b *testing.B) {
	s := resyncStore(b, 2000)
	k := s.apps
	pages := []func(context.Context, jetstream.JetStream, string, string, int, func(string) (string, error), func(error)) ([]*route.App, bool, error){
		k.pageOneByOne, k.page,
	}
	var costs [2]cost
	i := 0
	for b.Loop() {
		for j := range 2 {
			which := (i + j) % 2
			t0 := now(b)
			out, more, err := pages[which](b.Context(), s.js, jetstream.AllKeys, "", MaxPage, parseNameKey, func(err error) { b.Error(err) })
			costs[which].add(t0, now(b))
			if err != nil || !more || len(out) != MaxPage {
				b.Fatalf("page: %d apps, more %v, %v", len(out), more, err)
			}
		}
		i++
	}
	costs[0].report(b, "seq")
	costs[1].report(b, "32")
}

// pageOneByOne is page as it was before its reads ran pageReaders at a
// time: one after the other.
func (k kind[T]) pageOneByOne(ctx context.Context, js jetstream.JetStream, filter, after string, limit int, order func(key string) (string, error), bad func(error)) ([]*T, bool, error) {
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
	out := make([]*T, 0, min(limit, len(all)))
	for _, o := range all {
		e, err := k.latest(ctx, o.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("store: list %s: %w", k.what, err)
		}
		v, err := k.decode(o.key, e.Value())
		if err != nil {
			bad(err)
			continue
		}
		if len(out) == limit {
			return out, true, nil // read one past the page: "more" promises a value
		}
		out = append(out, v)
	}
	return out, false, nil
}
