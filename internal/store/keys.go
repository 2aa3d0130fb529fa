package store

import (
	"errors"
	"fmt"
	"strings"
)

// NATS KV keys may hold only [-/_=.a-zA-Z0-9], and dots separate subject
// tokens (no leading, trailing or doubled dot). gatehouse's keys are names
// (domains, zone names, record owner names such as "*" or "_acme-challenge",
// certmagic paths), so every key is escaped reversibly:
//
//   - [A-Za-z0-9-] stand for themselves;
//   - every other byte, '_' included, becomes "_XX" (upper-case hex);
//   - a '.' stays a '.' in a name key (so "www.shop.test" reads as itself)
//     unless it is first, last, or followed by another '.'; inside a token
//     of a composite key it is always escaped, because '.' separates tokens.
//
// Decoding is strict: only the canonical encoding of some string decodes,
// so decode(encode(s)) == s and encode(decode(k)) == k.

var errEmptyKey = errors.New("empty name")

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

const hexDigits = "0123456789ABCDEF"

// escape encodes s. With keepDots, safe dots stay dots (a name key);
// without, every dot is escaped (one token of a composite key).
func escape(s string, keepDots bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '.' && keepDots && i > 0 && i < len(s)-1 && s[i+1] != '.':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unescape reverses escape(s, keepDots), refusing anything escape would
// not have produced.
func unescape(k string, keepDots bool) (string, error) {
	if k == "" {
		return "", errEmptyKey
	}
	var b strings.Builder
	b.Grow(len(k))
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(k) {
			return "", fmt.Errorf("key %q: truncated escape", k)
		}
		hi, ok1 := unhex(k[i+1])
		lo, ok2 := unhex(k[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("key %q: bad escape", k)
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	s := b.String()
	if escape(s, keepDots) != k {
		return "", fmt.Errorf("key %q: not canonical", k)
	}
	return s, nil
}

// nameKey is the key of a single name (app id, domain, zone, host id).
func nameKey(s string) (string, error) {
	if s == "" {
		return "", errEmptyKey
	}
	return escape(s, true), nil
}

func parseNameKey(k string) (string, error) { return unescape(k, true) }

// tokensKey joins escaped parts with dots: a composite key (a record's
// zone, name and type; a certificate path's components) whose parts can
// be filtered by subject wildcards.
func tokensKey(parts ...string) (string, error) {
	enc := make([]string, len(parts))
	for i, p := range parts {
		if p == "" {
			return "", errEmptyKey
		}
		enc[i] = escape(p, false)
	}
	return strings.Join(enc, "."), nil
}

func parseTokensKey(k string) ([]string, error) {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		s, err := unescape(p, false)
		if err != nil {
			return nil, err
		}
		parts[i] = s
	}
	return parts, nil
}

// recordKey is "zone.name.type", each part a token.
func recordKey(zone, name, typ string) (string, error) {
	k, err := tokensKey(zone, name, typ)
	if err != nil {
		return "", fmt.Errorf("record %q %q %q: zone, name and type are required", zone, name, typ)
	}
	return k, nil
}

func parseRecordKey(k string) (zone, name, typ string, err error) {
	p, err := parseTokensKey(k)
	if err != nil {
		return "", "", "", err
	}
	if len(p) != 3 {
		return "", "", "", fmt.Errorf("key %q: want zone.name.type", k)
	}
	return p[0], p[1], p[2], nil
}

// pathKey encodes a certmagic path ("a/b/c.crt") as tokens ("a.b.c_2Ecrt").
// Leading, trailing and doubled slashes are refused: certmagic keys have
// none.
func pathKey(path string) (string, error) {
	if path == "" {
		return "", errEmptyKey
	}
	k, err := tokensKey(strings.Split(path, "/")...)
	if err != nil {
		return "", fmt.Errorf("path %q: empty component", path)
	}
	return k, nil
}

func parsePathKey(k string) (string, error) {
	p, err := parseTokensKey(k)
	if err != nil {
		return "", err
	}
	return strings.Join(p, "/"), nil
}
