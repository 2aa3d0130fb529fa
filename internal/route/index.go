package route

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"unsafe"
)

// The name index is what Lookup reads on every request. A Go map of a
// million entries misses cache several times per probe (group control
// word, slot, key bytes, value); in this index a hit on a key of up to 16
// bytes (most app ids) reads one slot, a longer key also its bytes in the
// arena, and a miss is usually decided by the few slots from its home.

// noEntry is an empty entry number: a domain that routes nowhere.
const noEntry = ^uint32(0)

// inlineKey is how many bytes of a key a slot holds: a key no longer
// than that is compared without reading anything but the slot.
const inlineKey = 16

// islot is one slot of a strIndex: 32 bytes, two to a cache line, with the
// value's pointer in it, so that a hit on a short key reads this slot and
// nothing else of the index.
type islot[V any] struct {
	// tag is 21 bits of the key's hash (bits 11-31), the unclean bit
	// (10), the overflow bit (9), a set bit 8 so that no used slot has
	// tag 0, and the key's length (255 for 255 and over) in bits 0-7:
	// most mismatches stop here.
	tag uint32
	aux uint32 // the owner's: an app's entry number, a domain's app entry
	// w0 and w1 are the key's first 16 bytes, zero padded, for a key of at
	// most inlineKey bytes; for a longer key w0 is its first 8 bytes and w1
	// the arena offset of the whole key.
	w0, w1 uint64
	v      *V // nil once the key's value is deleted
}

// strIndex maps strings to values by open addressing with linear probing.
// Keys longer than inlineKey are stored in full back to back in arena,
// each preceded by its length as a uvarint. Slots are never removed: a
// deleted key keeps its slot with a nil value until the next rebuild.
//
// A published strIndex is immutable. The builder derives a changed copy
// with [strIndex.cloneSlots] and then changes it: the copy has its own
// slots but shares the arena, appending beyond the end of the arena the
// older copies can see; the builder is the single writer, so the copies
// form a line and no two of them append to the same bytes.
type strIndex[V any] struct {
	seed  maphash.Seed
	slots []islot[V]
	arena []byte
	n     int // used slots
	live  int // used slots whose value is set
}

// newStrIndex returns an index with room for n keys before it grows, and
// arenaBytes of arena.
func newStrIndex[V any](n, arenaBytes int) strIndex[V] {
	return strIndex[V]{seed: maphash.MakeSeed(), arena: make([]byte, 1, arenaBytes+1), slots: make([]islot[V], slotsFor(n))}
}

// slotsFor is the slot count for n keys: a load of at most 5/8, where
// linear probing averages under two slots for a hit and three for a miss.
func slotsFor(n int) int { return max(16, n+n*3/5+1) }

// arenaFor is the arena bytes key takes.
func arenaFor(key string) int {
	if len(key) <= inlineKey {
		return 0
	}
	return len(key) + 2
}

// home is the first slot to probe for hash h, by a multiply-shift range
// reduction so that the slot count need not be a power of two.
func home(h uint64, n int) int { return int((uint64(uint32(h)) * uint64(n)) >> 32) }

// tagOf is the tag of a key of n bytes with hash h, without the unclean
// bit.
func tagOf(h uint64, n int) uint32 { return uint32(h>>32)&^0x7ff | 0x100 | uint32(min(n, 255)) }

// unclean is set in the tag of a slot whose key is not a clean name (see
// clean): upper case, a port, a bad label. Such a key is found by its
// exact bytes (find), but never by a host name (findName), so that a
// host need not be normalized before it is looked up: one that matches a
// key findName can find is already clean.
const unclean = 0x400

// overflow is set in the tag of a slot that is the home of a key placed
// window or more slots further on: without it, a key not found in the
// window from its home is not in the index.
const overflow = 0x200

// words is w0 and w1 of a slot for k, but for a long key only w0.
func words(k string) (uint64, uint64) {
	switch {
	case len(k) > inlineKey:
		return load64(k, 0), 0
	case len(k) == 16:
		return load64(k, 0), load64(k, 8)
	case len(k) > 8:
		return load64(k, 0), load64(k, len(k)-8) >> (8 * (16 - len(k)))
	case len(k) == 8:
		return load64(k, 0), 0
	}
	var w uint64
	for i := len(k) - 1; i >= 0; i-- {
		w = w<<8 | uint64(k[i])
	}
	return w, 0
}

// key returns the key of s, rebuilt in buf if it is short.
func (x *strIndex[V]) key(s *islot[V], buf *[inlineKey]byte) []byte {
	if s.tag&0xff > inlineKey {
		return x.arenaKey(s.w1)
	}
	binary.LittleEndian.PutUint64(buf[:8], s.w0)
	binary.LittleEndian.PutUint64(buf[8:], s.w1)
	return buf[:s.tag&0xff]
}

// arenaKey returns the key stored at arena offset off.
func (x *strIndex[V]) arenaKey(off uint64) []byte {
	a := x.arena[off:]
	if l := a[0]; l < 0x80 {
		return a[1 : 1+int(l)]
	}
	l, w := binary.Uvarint(a)
	return a[w : w+int(l)]
}

// window is how many slots from a key's home find checks without a branch
// that depends on what it reads.
const window = 4

// find returns the slot of key, or nil. It allocates nothing.
func (x *strIndex[V]) find(key string) *islot[V] { return x.findTag(key, unclean) }

// findName is find for a host name: it finds only a key that is a clean
// name, so a key it finds tells that name is clean too.
func (x *strIndex[V]) findName(name string) *islot[V] { return x.findTag(name, 0) }

// findTag returns the slot of key, or nil; ignore is the tag bits besides
// overflow that do not have to match key's (which has them clear).
//
// It reads the first window slots from key's home together and picks the
// match, if any, without branching on each: a branch that depends on a
// slot that missed cache and is mispredicted (whenever a key is not at its
// home) stalls the processor for the whole memory latency, where
// otherwise it overlaps the misses of the next lookups. The window decides
// unless its first slot has the overflow bit (or it would wrap around).
func (x *strIndex[V]) findTag(key string, ignore uint32) *islot[V] {
	n := len(x.slots)
	if n == 0 {
		return nil
	}
	h := maphash.String(x.seed, key)
	tag := tagOf(h, len(key))
	w0, w1 := words(key)
	long := len(key) > inlineKey
	ignore |= overflow
	i := home(h, n)
	if i+window <= n {
		// A bit for each slot that matches key (tag, w0 and, for a short
		// key, w1), computed with arithmetic rather than && and if, which
		// compile to branches. Each difference is in parentheses: | and ^
		// bind alike, and a|b^c is (a|b)^c.
		w1mask := ^uint64(0)
		if long {
			w1mask = 0
		}
		ws := (*[window]islot[V])(x.slots[i : i+window])
		var match uint
		for j := range window {
			s := &ws[j]
			match |= isZero(uint64((s.tag^tag)&^ignore)|(s.w0^w0)|(s.w1^w1)&w1mask) << j
		}
		hit := bits.TrailingZeros(match | 1<<window)
		if hit < window {
			if !long || string(x.arenaKey(ws[hit].w1)) == key {
				return &ws[hit]
			}
		} else if ws[0].tag&overflow == 0 {
			return nil
		}
	}
	return x.probe(key, tag, ignore, w0, w1, i)
}

// isZero is 1 if v is 0, else 0, without a branch.
func isZero(v uint64) uint { return uint(^(v | -v) >> 63) }

// probe is find's loop over every slot from i, for what the window does
// not decide.
func (x *strIndex[V]) probe(key string, tag, ignore uint32, w0, w1 uint64, i int) *islot[V] {
	n := len(x.slots)
	for {
		s := &x.slots[i]
		if (s.tag^tag)&^ignore == 0 && s.w0 == w0 {
			if len(key) <= inlineKey {
				if s.w1 == w1 {
					return s
				}
			} else if string(x.arenaKey(s.w1)) == key {
				return s
			}
		}
		if s.tag == 0 {
			return nil
		}
		if i++; i == n {
			i = 0
		}
	}
}

// get returns the value of key, or nil.
func (x *strIndex[V]) get(key string) *V {
	if s := x.find(key); s != nil {
		return s.v
	}
	return nil
}

// all returns the values that are set, in slot order.
func (x *strIndex[V]) all() []*V {
	out := make([]*V, 0, x.live)
	for i := range x.slots {
		if v := x.slots[i].v; v != nil {
			out = append(out, v)
		}
	}
	return out
}

// sortedNames returns name of every value that is set, sorted. It reads
// the slots in place, without all's slice of every value first (8 MB at
// a million).
func (x *strIndex[V]) sortedNames(name func(*V) string) []string {
	out := make([]string, 0, x.live)
	for i := range x.slots {
		if v := x.slots[i].v; v != nil {
			out = append(out, name(v))
		}
	}
	slices.Sort(out)
	return out
}

// any reports whether f is true of the key of a value that is set. The
// key is valid only during the call.
func (x *strIndex[V]) any(f func(key string) bool) bool {
	var buf [inlineKey]byte
	for i := range x.slots {
		if s := &x.slots[i]; s.v != nil {
			k := x.key(s, &buf)
			if f(unsafe.String(unsafe.SliceData(k), len(k))) {
				return true
			}
		}
	}
	return false
}

// cloneSlots gives x its own copy of the slots, so that it may be changed
// without changing the index it was copied from.
func (x *strIndex[V]) cloneSlots() { x.slots = slices.Clone(x.slots) }

// entry returns the slot of key, adding key with no value if it is
// absent; aux is a new slot's aux. x's slots must be its own.
//
// It probes once, for the key or the first free slot: building an index
// of a million keys is mostly these probes' cache misses.
func (x *strIndex[V]) entry(key string, aux uint32) *islot[V] {
	if len(x.slots) == 0 || (x.n+1)*4 > len(x.slots)*3 {
		if s := x.find(key); s != nil {
			return s
		}
		return x.insert(key, aux)
	}
	h := maphash.String(x.seed, key)
	tag := tagOf(h, len(key))
	w0, w1 := words(key)
	n := len(x.slots)
	at := home(h, n)
	for i, d := at, 0; ; d++ {
		s := &x.slots[i]
		if s.tag == 0 {
			x.fill(s, key, tag, aux)
			if d >= window {
				x.slots[at].tag |= overflow
			}
			return s
		}
		if (s.tag^tag)&^(overflow|unclean) == 0 && s.w0 == w0 {
			if len(key) <= inlineKey {
				if s.w1 == w1 {
					return s
				}
			} else if string(x.arenaKey(s.w1)) == key {
				return s
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// fill makes the free slot s key's, with no value.
func (x *strIndex[V]) fill(s *islot[V], key string, tag, aux uint32) {
	if !clean(key) {
		tag |= unclean
	}
	*s = islot[V]{tag: tag, aux: aux}
	s.w0, s.w1 = words(key)
	if len(key) > inlineKey {
		if len(x.arena) == 0 {
			x.arena = append(x.arena, 0) // no key starts at 0
		}
		s.w1 = uint64(len(x.arena))
		x.arena = binary.AppendUvarint(x.arena, uint64(len(key)))
		x.arena = append(x.arena, key...)
	}
	x.n++
}

// set stores v under key and returns its slot. x's slots must be its own.
func (x *strIndex[V]) set(key string, v *V) *islot[V] {
	s := x.entry(key, noEntry)
	if s.v == nil {
		x.live++
	}
	s.v = v
	return s
}

// clear deletes the value of s, a slot of x, and reports whether it had
// one. x's slots must be its own.
func (x *strIndex[V]) clear(s *islot[V]) bool {
	if s.v == nil {
		return false
	}
	s.v = nil
	x.live--
	return true
}

// insert adds key, which must be absent, with no value, and returns its
// slot. x's slots must be its own; they may be replaced by larger ones.
func (x *strIndex[V]) insert(key string, aux uint32) *islot[V] {
	if len(x.slots) == 0 {
		*x = newStrIndex[V](0, arenaFor(key))
	} else if (x.n+1)*4 > len(x.slots)*3 {
		x.rehash(2 * len(x.slots))
	}
	h := maphash.String(x.seed, key)
	var s islot[V]
	x.fill(&s, key, tagOf(h, len(key)), aux)
	return x.place(h, s)
}

// place puts s in the first free slot from h's home, and marks the home
// if that is window or more slots on.
func (x *strIndex[V]) place(h uint64, s islot[V]) *islot[V] {
	n := len(x.slots)
	s.tag &^= overflow
	at := home(h, n)
	for i, d := at, 0; ; d++ {
		if x.slots[i].tag == 0 {
			x.slots[i] = s
			if d >= window {
				x.slots[at].tag |= overflow
			}
			return &x.slots[i]
		}
		if i++; i == n {
			i = 0
		}
	}
}

// rehash moves every key into n new slots.
func (x *strIndex[V]) rehash(n int) {
	old := x.slots
	x.slots = make([]islot[V], n)
	var buf [inlineKey]byte
	for i := range old {
		if s := &old[i]; s.tag != 0 {
			x.place(maphash.Bytes(x.seed, x.key(s, &buf)), *s)
		}
	}
}
