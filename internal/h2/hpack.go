package h2

import (
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// Literal fields (appendField, appendLowerField) are "without indexing":
// they leave the dynamic table as it is, so a block made of them (an
// interim response's, trailers) can be encoded outside the connection's
// write lock. Final response blocks go through the connection's encoder.

// staticName maps a lower-case field name to its index in HPACK's static
// table (RFC 7541 Appendix A), the first entry with that name.
var staticName = map[string]uint64{
	":authority": 1, ":method": 2, ":path": 4, ":scheme": 6, ":status": 8,
	"accept-charset": 15, "accept-encoding": 16, "accept-language": 17,
	"accept-ranges": 18, "accept": 19, "access-control-allow-origin": 20,
	"age": 21, "allow": 22, "authorization": 23, "cache-control": 24,
	"content-disposition": 25, "content-encoding": 26, "content-language": 27,
	"content-length": 28, "content-location": 29, "content-range": 30,
	"content-type": 31, "cookie": 32, "date": 33, "etag": 34, "expect": 35,
	"expires": 36, "from": 37, "host": 38, "if-match": 39,
	"if-modified-since": 40, "if-none-match": 41, "if-range": 42,
	"if-unmodified-since": 43, "last-modified": 44, "link": 45, "location": 46,
	"max-forwards": 47, "proxy-authenticate": 48, "proxy-authorization": 49,
	"range": 50, "referer": 51, "refresh": 52, "retry-after": 53, "server": 54,
	"set-cookie": 55, "strict-transport-security": 56, "transfer-encoding": 57,
	"user-agent": 58, "vary": 59, "via": 60, "www-authenticate": 61,
}

// staticStatus is the static table's fully indexed :status entries.
var staticStatus = map[int]uint64{200: 8, 204: 9, 206: 10, 304: 11, 400: 12, 404: 13, 500: 14}

// appendStatus appends the :status field.
func appendStatus(b []byte, code int) []byte {
	if i, ok := staticStatus[code]; ok {
		return appendInt(b, 7, 0x80, i)
	}
	var d [3]byte
	d[0], d[1], d[2] = byte('0'+code/100%10), byte('0'+code/10%10), byte('0'+code%10)
	b = appendInt(b, 4, 0x00, 8)
	return appendString(b, string(d[:]))
}

// appendField appends name: value as a literal without indexing; name is
// lower case. sensitive fields (cookies, credentials) are "never indexed",
// which tells intermediaries not to index them either (RFC 7541 §7.1.3).
func appendField(b []byte, name, value string, sensitive bool) []byte {
	first := byte(0x00)
	if sensitive {
		first = 0x10
	}
	if i, ok := staticName[name]; ok {
		b = appendInt(b, 4, first, i)
	} else {
		b = append(b, first)
		b = appendString(b, name)
	}
	return appendString(b, value)
}

// sensitiveName reports whether a field of this (lower-case) name carries
// credentials, whose values are never indexed, by us or by intermediaries.
func sensitiveName(wire string) bool {
	return wire == "set-cookie" || wire == "authorization" || wire == "proxy-authorization"
}

// appendLowerField is appendField for a name in canonical form; names
// outside the common set are lowered as they are copied, unhuffmaned.
func appendLowerField(b []byte, name, value string) []byte {
	if l, ok := lowerName(name); ok {
		return appendField(b, l, value, sensitiveName(l))
	}
	b = append(b, 0x00)
	b = appendInt(b, 7, 0x00, uint64(len(name)))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return appendString(b, value)
}

// appendString appends an HPACK string literal, Huffman-coded when that
// is shorter.
func appendString(b []byte, s string) []byte {
	if n := hpack.HuffmanEncodeLength(s); n < uint64(len(s)) {
		b = appendInt(b, 7, 0x80, n)
		return hpack.AppendHuffmanString(b, s)
	}
	b = appendInt(b, 7, 0x00, uint64(len(s)))
	return append(b, s...)
}

// appendInt appends i with an n-bit prefix, the byte's other bits first
// (RFC 7541 §5.1).
func appendInt(b []byte, n uint, first byte, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(b, first|byte(i))
	}
	b = append(b, first|byte(k))
	i -= k
	for ; i >= 128; i >>= 7 {
		b = append(b, byte(0x80|(i&0x7f)))
	}
	return append(b, byte(i))
}

// lowerNames maps the canonical form of common field names to their wire
// (lower-case) form, so that encoding them allocates nothing.
var lowerNames = func() map[string]string {
	m := map[string]string{}
	for n := range staticName {
		if n[0] != ':' {
			m[textproto.CanonicalMIMEHeaderKey(n)] = n
		}
	}
	for _, n := range []string{
		"access-control-allow-credentials", "access-control-allow-headers",
		"access-control-allow-methods", "access-control-expose-headers",
		"access-control-max-age", "alt-svc", "content-security-policy",
		"cross-origin-opener-policy", "cross-origin-resource-policy",
		"keep-alive", "origin", "permissions-policy", "referrer-policy",
		"trailer", "x-content-type-options", "x-forwarded-for",
		"x-forwarded-host", "x-forwarded-proto", "x-frame-options",
		"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
		"x-request-id", "x-xss-protection",
	} {
		m[textproto.CanonicalMIMEHeaderKey(n)] = n
	}
	return m
}()

func lowerName(canonical string) (string, bool) {
	l, ok := lowerNames[canonical]
	return l, ok
}

// Response header blocks are encoded with HPACK's dynamic table, under
// the connection's write lock and so in the order the client decodes them:
// a field a response repeats from an earlier one on the connection (the
// content type, the cluster, the rate-limit policy, the date within a
// second) costs one or two bytes instead of its literal, and no Huffman
// coding or validity check, as it was checked when it entered the table.
// Measured on the load harness, encoding every field as a literal was ~5 %
// of an HTTP/2 request's CPU. Interim (1xx) and trailer blocks are still
// literals without indexing, which leave the table as it is.

// field is one response field as the handler set it: k a canonical (or,
// when own, lower-case and valid) name.
type field struct {
	k, v string
	own  bool // set by the writer itself: k is the wire name, k and v valid
}

// maxTable is our table's size: the protocol's default, which every client
// allows until its SETTINGS says less.
const maxTable = 4096

// maxEntries is the most entries a table of maxTable holds (each costs its
// name, its value and 32 bytes).
const maxEntries = maxTable / 32

// maxNames bounds the field names the encoder remembers: past it, a new
// name is sent as a literal, never indexed.
const maxNames = 128

// encoder is a connection's HPACK encoder for response header blocks.
// Used under the connection's write lock only.
type encoder struct {
	max      int // the table's maximum size: maxTable, or less once the client asks
	size     int // the entries' sizes summed
	inserted uint64
	// live are the sizes of the entries in the table, oldest at first:
	// entry number inserted-n+i (n = count) is live[(first+i)%maxEntries].
	live  [maxEntries]uint16
	first int
	count int
	names map[string]*nameSlot // by the name as the header map spells it
	// held is the bytes the slots hold (names and values): past
	// maxHeld, the encoder forgets every name, so that a connection's
	// memory stays bounded whatever fields its responses carry.
	held int
}

const maxHeld = 2 * maxTable

// nameSlot is what the encoder knows of one field name.
type nameSlot struct {
	wire   string // the lower-case name, a copy
	static uint64 // its index in the static table, or 0
	// The newest entry with this name: its number and its value (a copy).
	// has: there was one; it may have been evicted since.
	id    uint64
	value string
	has   bool
	// sensitive values are never indexed; volatile ones (a request id)
	// only enter the table for the name's sake, when it has no entry.
	sensitive, volatile bool
	// misses counts the responses in a row whose value for the name was
	// not the entry's: from two on, the name's values are taken as
	// volatile too (a trace id, a length that varies), which saves the
	// table from churning and the encoder from copying each one.
	misses uint8
}

// evicted is the number of the oldest entry still in the table.
func (e *encoder) evicted() uint64 { return e.inserted - uint64(e.count) }

// index is entry id's index in the address space of RFC 7541 §2.3.3.
func (e *encoder) index(id uint64) uint64 { return 62 + (e.inserted - 1 - id) }

// shrink lowers the table's maximum size to limit, the client's
// SETTINGS_HEADER_TABLE_SIZE, when that is below it, and then appends the
// dynamic table size update the next block must start with (RFC 7541
// §4.2).
func (e *encoder) shrink(b []byte, limit uint32) []byte {
	if int64(limit) >= int64(e.max) {
		return b
	}
	e.max = int(limit)
	e.evictTo(e.max)
	return appendInt(b, 5, 0x20, uint64(e.max))
}

func (e *encoder) evictTo(size int) {
	for e.count > 0 && e.size > size {
		e.size -= int(e.live[e.first])
		e.first = (e.first + 1) % maxEntries
		e.count--
	}
}

// insert adds an entry of size n (its name and value are the slot's).
func (e *encoder) insert(n int) uint64 {
	e.evictTo(e.max - n)
	e.live[(e.first+e.count)%maxEntries] = uint16(n)
	e.count++
	e.size += n
	e.inserted++
	return e.inserted - 1
}

// slot returns what the encoder knows of name k, learning it (and checking
// it) on first sight; nil for a name that is not valid, and a slot not
// kept for a name past maxNames.
func (e *encoder) slot(k string) *nameSlot {
	if s, ok := e.names[k]; ok {
		return s
	}
	if !httpguts.ValidHeaderFieldName(k) {
		return nil
	}
	wire, ok := lowerName(k)
	if !ok {
		wire = strings.ToLower(k)
	}
	s := &nameSlot{wire: strings.Clone(wire), static: staticName[wire], sensitive: sensitiveName(wire)}
	switch wire {
	case "x-request-id", "ratelimit", "x-ratelimit-remaining":
		s.volatile = true
	}
	if e.names == nil {
		e.names = map[string]*nameSlot{}
	}
	if len(e.names) < maxNames {
		e.names[strings.Clone(k)] = s
		e.hold(len(k) + len(wire))
	}
	return s
}

// hold counts n more bytes held by the slots, forgetting them all past
// maxHeld (a slot in use goes on being used, unkept).
func (e *encoder) hold(n int) {
	e.held += n
	if e.held > maxHeld {
		clear(e.names)
		e.held = 0
	}
}

// survives reports whether entry id stays in the table when an entry of
// size n is inserted: a new entry may name one that its insertion evicts
// (RFC 7541 §4.4), but decoders are cautioned about exactly that, so the
// encoder spells the name out instead.
func (e *encoder) survives(id uint64, n int) bool {
	size, gone, i := e.size, e.evicted(), e.first
	for size > e.max-n && gone <= id {
		size -= int(e.live[i])
		i = (i + 1) % maxEntries
		gone++
	}
	return gone <= id
}

// appendField appends one field to block b.
func (e *encoder) appendField(b []byte, f field) []byte {
	s := e.slot(f.k) // an own field's lower-case name is a key of its own
	if s == nil {
		return b // net/http leaves out a field it cannot send
	}
	live := s.has && s.id >= e.evicted()
	if s.has && s.value == f.v {
		s.misses = 0
		if live && !s.sensitive {
			return appendInt(b, 7, 0x80, e.index(s.id))
		}
	} else if s.has && s.misses < 2 {
		s.misses++
	}
	if !f.own && !httpguts.ValidHeaderFieldValue(f.v) {
		return b
	}
	n := len(s.wire) + len(f.v) + 32
	name := s.static
	if name == 0 && live {
		name = e.index(s.id)
	}
	switch {
	case s.sensitive:
		b = appendInt(b, 4, 0x10, name)
	case n > e.max/4 || ((s.volatile || s.misses >= 2) && name != 0):
		b = appendInt(b, 4, 0x00, name)
	default:
		if s.static == 0 && live && !e.survives(s.id, n) {
			name = 0
		}
		b = appendInt(b, 6, 0x40, name)
		e.hold(len(f.v) - len(s.value))
		s.id, s.value, s.has = e.insert(n), strings.Clone(f.v), true
	}
	if name == 0 {
		b = appendString(b, s.wire)
	}
	return appendString(b, f.v)
}
