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
