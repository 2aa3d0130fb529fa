package httpwire

import "strings"

// PHPName is the name PHP gives a query parameter whose decoded name is k
// in $_GET, which Symfony, Laravel and most PHP hosts read: cut at a NUL
// (PHP reads the name as a C string), leading spaces dropped, each ' ' and
// '.' made '_', and a '[' with no ']' after it made '_' too, past which
// the rest is as written; with a ']' after it, k names an array, whose
// name ends at the '['. So ?.method=, ?+_method=, ?_method%00x= and
// ?_method[]= are each a PHP host's _method. The gateway reads the query's
// access_token (step 7) and _method (step 8) by it: a name it misses is a
// value the host takes and the edge never checked.
//
// It allocates only when it renames: a name with no NUL, ' ', '.' or '['
// is returned as it is.
func PHPName(k string) string {
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
	k = strings.TrimLeft(k, " ")
	i := strings.IndexAny(k, " .[")
	if i < 0 {
		return k
	}
	if k[i] == '[' && strings.IndexByte(k[i+1:], ']') >= 0 {
		return k[:i]
	}
	b := []byte(k)
	for ; i < len(b); i++ {
		switch b[i] {
		case ' ', '.':
			b[i] = '_'
		case '[':
			if strings.IndexByte(k[i+1:], ']') >= 0 {
				return string(b[:i])
			}
			b[i] = '_'
			return string(b)
		}
	}
	return string(b)
}

// PHPDecode is s, a query parameter's name as sent, decoded as PHP's
// urldecode decodes it for $_GET: '+' is a space and each %XX its byte,
// while a '%' without two hex digits after it stays as it is, where
// url.QueryUnescape refuses the whole name. So ?_method%00%zz= is a PHP
// host's _method (PHPName cuts at the NUL), which a strict decode would
// have skipped. Where the strict decode succeeds the two agree.
//
// It allocates only when it decodes: a name with no '%' or '+' is
// returned as it is.
func PHPDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
