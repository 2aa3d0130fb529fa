package h2

import (
	"net/textproto"

	"golang.org/x/net/http2/hpack"
)

// Response header blocks are encoded without HPACK's dynamic table, as
// nginx does: every field is a literal "without indexing" (its name
// indexed in the static table where it is there, its value Huffman-coded
// where that is shorter). So a block can be encoded by its handler,
// before it takes the connection's write lock and in any order with other
// streams' blocks, and the client's decoder table stays empty. The price
// is bytes: a repeated field costs its literal each time instead of an
// index (tens of bytes a response).

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

// appendLowerField is appendField for a name in canonical form; names
// outside the common set are lowered as they are copied, unhuffmaned.
func appendLowerField(b []byte, name, value string) []byte {
	if l, ok := lowerName(name); ok {
		return appendField(b, l, value, l == "set-cookie" || l == "authorization" || l == "proxy-authorization")
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
