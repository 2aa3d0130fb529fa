package route

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
)

// The name index is what Lookup reads on every request. A Go map of a
// million entries misses cache several times per probe (group control
// word, slot, key bytes, value); this index is laid out so that a hit
// reads one slot, then the key bytes and the value, which do not depend on
// each other, and a miss usually reads one slot only.

// noEntry is an empty entry number: a domain that routes nowhere.
const noEntry = ^uint32(0)

// islot is one slot of a strIndex: 16 bytes, four to a cache line, and no
// pointers, so the garbage collector never scans the slot array.
type islot struct {
	tag uint32 // the key hash's high 32 bits: most mismatches stop here
	off uint32 // arena offset of the key; 0 marks an empty slot
	val uint32 // the key's entry number in its keyed.vals
	aux uint32 // the owner's: a domain's app entry, or noEntry
}

// strIndex maps strings to entry numbers by open addressing with linear
// probing. The keys are stored back to back in arena, each preceded by
// its length as a uvarint. Slots are never removed: a key whose value is
// deleted keeps its slot (its entry is nil) until the next rebuild.
//
// A published strIndex is immutable. The builder derives a changed copy
// with [strIndex.cloneSlots] and then inserts: the copy has its own slots
// but shares the arena, appending beyond the end of the arena the older
// copies can see; the builder is the single writer, so the copies form a
// line and no two of them append to the same bytes.
type strIndex struct {
	seed  maphash.Seed
	slots []islot
	arena []byte
	n     int // keys
}

// newStrIndex returns an index with room for n keys before it grows.
func newStrIndex(n, arenaBytes int) strIndex {
	x := strIndex{seed: maphash.MakeSeed(), arena: make([]byte, 1, arenaBytes+1)}
	x.slots = make([]islot, slotsFor(n))
	return x
}

// slotsFor is the slot count for n keys: a load of at most 5/8, where
// linear probing averages under two slots for a hit and three for a miss.
func slotsFor(n int) int { return max(16, n+n*3/5+1) }

// home is the first slot to probe for hash h, by a multiply-shift range
// reduction so that the slot count need not be a power of two.
func home(h uint64, n int) int { return int((uint64(uint32(h)) * uint64(n)) >> 32) }

// key returns the key stored at arena offset off.
func (x *strIndex) key(off uint32) []byte {
	a := x.arena[off:]
	if l := a[0]; l < 0x80 {
		return a[1 : 1+int(l)]
	}
	l, w := binary.Uvarint(a)
	return a[w : w+int(l)]
}

// find returns the slot of key, or nil. It allocates nothing.
func (x *strIndex) find(key string) *islot {
	n := len(x.slots)
	if n == 0 {
		return nil
	}
	h := maphash.String(x.seed, key)
	tag := uint32(h >> 32)
	for i := home(h, n); ; {
		s := &x.slots[i]
		if s.off == 0 {
			return nil
		}
		if s.tag == tag && string(x.key(s.off)) == key {
			return s
		}
		if i++; i == n {
			i = 0
		}
	}
}

// cloneSlots gives x its own copy of the slots, so that it may be changed
// without changing the index it was copied from.
func (x *strIndex) cloneSlots() { x.slots = slices.Clone(x.slots) }

// insert adds key, which must be absent, and returns its slot. The slots
// must be x's own (see cloneSlots); they may be replaced by larger ones.
func (x *strIndex) insert(key string, val, aux uint32) *islot {
	if len(x.slots) == 0 {
		*x = newStrIndex(0, len(key)+1)
	} else if (x.n+1)*4 > len(x.slots)*3 {
		x.rehash(2 * len(x.slots))
	}
	if len(x.arena) == 0 {
		x.arena = append(x.arena, 0) // offset 0 means empty
	}
	off := uint32(len(x.arena))
	if int(off) != len(x.arena) {
		panic("route: name index arena over 4 GiB")
	}
	x.arena = binary.AppendUvarint(x.arena, uint64(len(key)))
	x.arena = append(x.arena, key...)
	x.n++
	return x.place(maphash.String(x.seed, key), islot{off: off, val: val, aux: aux})
}

// place puts s in the first free slot from h's home.
func (x *strIndex) place(h uint64, s islot) *islot {
	s.tag = uint32(h >> 32)
	n := len(x.slots)
	for i := home(h, n); ; {
		if x.slots[i].off == 0 {
			x.slots[i] = s
			return &x.slots[i]
		}
		if i++; i == n {
			i = 0
		}
	}
}

// rehash moves every key into n new slots.
func (x *strIndex) rehash(n int) {
	old := x.slots
	x.slots = make([]islot, n)
	for _, s := range old {
		if s.off != 0 {
			x.place(maphash.Bytes(x.seed, x.key(s.off)), s)
		}
	}
}

// keyed is a set of values by string key: an index to entry numbers and
// the values by entry. A nil (zero) value is a deleted key. Published
// keyed values are immutable; see [strIndex] for how the builder derives
// changed copies.
type keyed[V comparable] struct {
	idx  strIndex
	vals []V
	live int // entries whose value is not zero
}

// owned returns a copy of k with its own vals, and its own slots too if
// slots is set: what a change to k must start from.
func (k keyed[V]) owned(slots bool) keyed[V] {
	vals := make([]V, len(k.vals), len(k.vals)+1)
	copy(vals, k.vals)
	k.vals = vals
	if slots {
		k.idx.cloneSlots()
	}
	return k
}

// get returns the value of key, or the zero V.
func (k *keyed[V]) get(key string) V {
	if s := k.idx.find(key); s != nil {
		return k.vals[s.val]
	}
	var zero V
	return zero
}

// all returns the values that are set, in entry order.
func (k *keyed[V]) all() []V {
	var zero V
	out := make([]V, 0, k.live)
	for _, v := range k.vals {
		if v != zero {
			out = append(out, v)
		}
	}
	return out
}

// entry returns the slot of key, inserting key with a zero value if it is
// absent. k's slots and vals must be its own.
func (k *keyed[V]) entry(key string) *islot {
	if s := k.idx.find(key); s != nil {
		return s
	}
	var zero V
	k.vals = append(k.vals, zero)
	return k.idx.insert(key, uint32(len(k.vals)-1), noEntry)
}

// set stores v (not zero) under key. k's slots and vals must be its own.
func (k *keyed[V]) set(key string, v V) *islot {
	s := k.entry(key)
	var zero V
	if k.vals[s.val] == zero {
		k.live++
	}
	k.vals[s.val] = v
	return s
}

// clear deletes key's value and reports whether it had one. k's vals must
// be its own.
func (k *keyed[V]) clear(s *islot) bool {
	var zero V
	if k.vals[s.val] == zero {
		return false
	}
	k.vals[s.val] = zero
	k.live--
	return true
}
