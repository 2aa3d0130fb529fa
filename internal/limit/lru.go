package limit

import (
	"math"
	"sync"
)

// nshards is the number of independently locked shards of a table: enough
// that a handful of cores rarely contend, few enough that a small MaxKeys
// still gives each shard room.
const nshards = 32

// tableKey is what a table is keyed by: a comparable value (the per-shard
// map compares keys whole, so the hash only spreads them) that picks its
// shard. Each limiter has its own key type: [Key] for [Window], [Subject]
// for [Subjects].
type tableKey interface {
	comparable
	hash() uint64
}

// table is a bounded map from K to V: nshards shards, each an LRU list
// over a slice of nodes (indexes, not pointers, so a million keys are one
// allocation per shard for the GC to scan, not a million).
type table[K tableKey, V any] struct {
	shards [nshards]shard[K, V]
}

type shard[K tableKey, V any] struct {
	mu    sync.Mutex
	max   int
	idx   map[K]int32
	nodes []node[K, V]
	head  int32    // most recently used; -1 when empty
	tail  int32    // least recently used; -1 when empty
	_     [72]byte // keep shards on separate cache lines
}

type node[K tableKey, V any] struct {
	key        K
	val        V
	prev, next int32
}

// newTable returns a table holding at most maxKeys keys (at least one per
// shard). pinned, when not nil, reports values that eviction should skip
// while it can (a subject with open connections).
func newTable[K tableKey, V any](maxKeys int) *table[K, V] {
	t := &table[K, V]{}
	// Rounded up without adding first: maxKeys+31 overflowed near the int
	// range, to one key per shard. Nodes are indexed by int32.
	per := maxKeys / nshards
	if maxKeys%nshards != 0 {
		per++
	}
	per = min(max(per, 1), math.MaxInt32)
	for i := range t.shards {
		s := &t.shards[i]
		s.max, s.head, s.tail = per, -1, -1
		s.idx = make(map[K]int32)
	}
	return t
}

// with runs f on k's value under k's shard lock, creating a zero value
// (fresh=true) if k is absent, evicting the least recently used key when
// the shard is full. pinned, when not nil, marks values eviction should
// pass over: it looks at no more than 8 candidates, then evicts the oldest
// anyway so memory stays bounded. The *V is valid only during f.
func with[K tableKey, V, R any](t *table[K, V], k K, pinned func(*V) bool, f func(v *V, fresh bool) R) R {
	s := &t.shards[k.hash()%nshards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.idx[k]; ok {
		s.touch(i)
		return f(&s.nodes[i].val, false)
	}
	var i int32
	if len(s.nodes) < s.max {
		s.nodes = append(s.nodes, node[K, V]{})
		i = int32(len(s.nodes) - 1)
	} else {
		i = s.victim(pinned)
		s.unlink(i)
		delete(s.idx, s.nodes[i].key)
	}
	s.nodes[i] = node[K, V]{key: k, prev: -1, next: -1}
	s.idx[k] = i
	s.pushFront(i)
	return f(&s.nodes[i].val, true)
}

// peek runs f on k's value if present, without creating it or touching its
// recency. It reports whether k was present.
func peek[K tableKey, V any](t *table[K, V], k K, f func(v *V)) bool {
	s := &t.shards[k.hash()%nshards]
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.idx[k]
	if ok {
		f(&s.nodes[i].val)
	}
	return ok
}

// len returns the number of keys held.
func (t *table[K, V]) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.idx)
		s.mu.Unlock()
	}
	return n
}

func (s *shard[K, V]) victim(pinned func(*V) bool) int32 {
	if pinned != nil {
		for i, n := s.tail, 0; i >= 0 && n < 8; i, n = s.nodes[i].prev, n+1 {
			if !pinned(&s.nodes[i].val) {
				return i
			}
		}
	}
	return s.tail
}

func (s *shard[K, V]) touch(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	s.pushFront(i)
}

func (s *shard[K, V]) unlink(i int32) {
	n := &s.nodes[i]
	if n.prev >= 0 {
		s.nodes[n.prev].next = n.next
	} else {
		s.head = n.next
	}
	if n.next >= 0 {
		s.nodes[n.next].prev = n.prev
	} else {
		s.tail = n.prev
	}
	n.prev, n.next = -1, -1
}

func (s *shard[K, V]) pushFront(i int32) {
	n := &s.nodes[i]
	n.prev, n.next = -1, s.head
	if s.head >= 0 {
		s.nodes[s.head].prev = i
	}
	s.head = i
	if s.tail < 0 {
		s.tail = i
	}
}
