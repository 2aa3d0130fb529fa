package route

import (
	"net"
	"strings"

	"golang.org/x/net/idna"
)

// NormalizeHost turns a Host header or SNI value into the name the table is
// keyed by: lower case, without port or trailing dot, in IDNA ASCII form.
// It reports false for anything that is not a valid host name.
//
// The common case, an already clean ASCII name, allocates nothing.
func NormalizeHost(h string) (string, bool) {
	if clean(h) {
		return h, true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		} else if strings.Count(h, ":") == 1 {
			return "", false
		}
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return "", false
	}
	a, err := idnaProfile.ToASCII(h)
	if err != nil || a == "" {
		return "", false
	}
	a = strings.ToLower(a)
	if !clean(a) {
		return "", false
	}
	return a, true
}

var idnaProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.StrictDomainName(true))

// clean reports whether h is already a normalized name: labels of
// [a-z0-9-], 1 to 63 bytes, not starting or ending in '-', no trailing dot.
func clean(h string) bool {
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	n := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			n++
		case c == '-':
			if n == 0 || i+1 == len(h) || h[i+1] == '.' {
				return false
			}
			n++
		case c == '.':
			if n == 0 {
				return false
			}
			n = 0
			continue
		default:
			return false
		}
		if n > 63 {
			return false
		}
	}
	return n > 0
}
