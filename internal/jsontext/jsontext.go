// Package jsontext refuses JSON text that encoding/json reads as other
// than it says: invalid UTF-8 and lone surrogate escapes (each read as
// U+FFFD), and objects with two keys the same but for case or escapes (the
// last one read wins, matched without regard to case). The control API
// refuses such bodies (internal/api) and the store such values written
// around it (internal/store): a gateway would otherwise serve a value
// other than another reader (an operator's tool, a case-sensitive parser)
// shows, as a deny rule under "policy" that a later "Policy": [] empties.
package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Valid refuses text that is not UTF-8, or that escapes half a UTF-16
// surrogate pair in a string (\ud800 without a \udc00-\udfff after it,
// or the low half alone). Text that is not JSON is left to the decoder.
func Valid(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8 (RFC 8259 §8.1)")
	}
	in := false
	for i := 0; i < len(b); i++ {
		switch {
		case !in:
			in = b[i] == '"'
		case b[i] == '"':
			in = false
		case b[i] == '\\':
			r, ok := escapedRune(b[i:])
			if !ok {
				i++ // \" \\ \n …: skip the escaped byte
				continue
			}
			i += 5
			if !utf16.IsSurrogate(r) {
				continue
			}
			if lo, ok := escapedRune(b[i+1:]); r >= 0xdc00 || !ok || lo < 0xdc00 || lo > 0xdfff {
				return errors.New(`a \u escape holds half a UTF-16 surrogate pair, which is no character`)
			}
			i += 6
		}
	}
	return nil
}

// Check is Valid, and refuses an object with two keys that are the same
// but for case or escapes. b must be JSON text json.Unmarshal accepts.
func Check(b []byte) error {
	if err := Valid(b); err != nil {
		return err
	}
	// The open objects and arrays, and the keys of the open objects:
	// slices of b, or of a copy for a key with escapes. A routing value's
	// objects have a few keys each, compared in place without
	// allocating; past manyKeys, one object's keys go in a map.
	var (
		stackBuf [8]frame
		keysBuf  [32][]byte
	)
	stack, keys := stackBuf[:0], keysBuf[:0]
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{':
			stack = append(stack, frame{object: true, wantKey: true, first: len(keys)})
		case '[':
			stack = append(stack, frame{first: len(keys)})
		case '}', ']':
			if n := len(stack); n > 0 {
				keys = keys[:stack[n-1].first]
				stack = stack[:n-1]
			}
		case ':':
			if n := len(stack); n > 0 {
				stack[n-1].wantKey = false
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = true
			}
		case '"':
			end, escaped, err := scanString(b, i)
			if err != nil {
				return err
			}
			if n := len(stack); n > 0 && stack[n-1].wantKey {
				key := b[i+1 : end]
				if escaped {
					var k string
					if err := json.Unmarshal(b[i:end+1], &k); err != nil {
						return err
					}
					key = []byte(k)
				}
				if keys, err = stack[n-1].add(keys, key); err != nil {
					return err
				}
			}
			i = end
		}
	}
	return nil
}

// manyKeys is how many keys of one object Check compares one by one
// before it puts them in a map: a value written around the API may hold
// an object of tens of thousands.
const manyKeys = 16

// frame is an object or array open in Check.
type frame struct {
	object  bool
	wantKey bool // the next string in it is a key
	first   int  // its first key in Check's keys
	// folded holds its keys, folded, once it has more than manyKeys.
	folded map[string]bool
}

// add adds key to f's keys, the tail of keys from f.first, or fails if f
// has it already, but for case (as encoding/json matches keys).
func (f *frame) add(keys [][]byte, key []byte) ([][]byte, error) {
	dup := func() error {
		return errors.New("key " + strconv.Quote(string(key)) + " appears twice in one object, the same but for case or escapes")
	}
	if f.folded != nil {
		k := FoldKey(string(key))
		if f.folded[k] {
			return keys, dup()
		}
		f.folded[k] = true
		return keys, nil
	}
	for _, k := range keys[f.first:] {
		if bytes.EqualFold(k, key) {
			return keys, dup()
		}
	}
	keys = append(keys, key)
	if len(keys)-f.first > manyKeys {
		f.folded = make(map[string]bool, 2*manyKeys)
		for _, k := range keys[f.first:] {
			f.folded[FoldKey(string(k))] = true
		}
		keys = keys[:f.first]
	}
	return keys, nil
}

// scanString returns the index of the quote that ends the string starting
// at b[start], and whether it holds escapes.
func scanString(b []byte, start int) (end int, escaped bool, err error) {
	for i := start + 1; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, escaped, nil
		case '\\':
			escaped = true
			i++ // \" \\ \n \u…: the byte after the backslash is never the end
		}
	}
	return 0, false, errors.New("unterminated string")
}

// escapedRune decodes the \uXXXX escape that b starts with.
func escapedRune(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return rune(n), err == nil
}

// FoldKey maps every rune of s to the least of its case-folding orbit
// (an ASCII letter to its lower case), so keys encoding/json would match
// to one field fold to one string.
func FoldKey(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	rs := []rune(s)
	for i, r := range rs {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		if 'A' <= least && least <= 'Z' {
			least += 'a' - 'A'
		}
		rs[i] = least
	}
	return string(rs)
}
