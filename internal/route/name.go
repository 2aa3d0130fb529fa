package route

import (
	"net"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// MaxZoneName is the longest zone name, in characters without the trailing
// dot. The gateway serves and writes names under a zone that must be DNS
// names (253 characters at most) too: ns.{zone} and hostmaster.{zone} in
// its NS and SOA, and _acme-challenge.{zone}, the longest, where it proves
// *.{zone} (DESIGN §9). A longer zone would have those answers go out
// with a name past 255 octets, which resolvers cannot read.
const MaxZoneName = 253 - len("_acme-challenge.")

// PublicSuffix reports whether zone, a normalized name, is itself a
// public suffix of the ICANN section of the Public Suffix List: a
// top-level domain (com) or a registry's second level (co.uk), where
// anyone registers names and no operator is authoritative. {app}.{zone}
// would then route registrable domains of strangers, and the zone's
// wildcard answer them. Names outside the ICANN section are not: a
// platform's own domain listed in the private section (for cookie
// isolation of its apps, as app platforms do) is the zone such a platform
// serves, and a name the list does not know (localhost, test, internal)
// is a private network's. home.arpa is in the ICANN section but served
// by each home network itself (RFC 8375), so it is not one either.
func PublicSuffix(zone string) bool {
	if zone == "home.arpa" {
		return false
	}
	s, icann := publicsuffix.PublicSuffix(zone)
	return icann && s == zone
}

// NormalizeHost turns a Host header or SNI value into the name the table is
// keyed by: lower case, without port or trailing dot, in IDNA ASCII form.
// It reports false for anything that is not a valid host name, and for a
// name whose port is not one (BadPort).
//
// The common case, an already clean ASCII name, allocates nothing.
func NormalizeHost(h string) (string, bool) {
	if clean(h) {
		return h, true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		if hh, port, err := net.SplitHostPort(h); err == nil {
			if !digits(port) {
				return "", false
			}
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

// BadPort reports whether h, a Host field, has a port that is not one: a
// port is digits or nothing (RFC 9110 §7.2, RFC 3986 §3.2.3), so
// "app.zone:abc", "app.zone:-1" and "app.zone:+80" are malformed, not
// app.zone, and NormalizeHost refuses them. The route layer answers such
// a Host 400, as RFC 9112 §3.2 asks of a Host with an invalid value,
// rather than the 404 of a name it does not serve. An empty port
// ("app.zone:") is allowed and means no port (RFC 3986 §6.2.3); so is any
// run of digits, over 65535 too: the grammar has no bound, and the port
// is not read (routing is by name; the host gets the Host as it came).
func BadPort(h string) bool {
	i := strings.LastIndexByte(h, ':')
	if i < 0 || strings.Contains(h[i:], "]") {
		return false
	}
	_, port, err := net.SplitHostPort(h)
	return err == nil && !digits(port)
}

// digits reports whether s is ASCII digits only (or empty).
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

var idnaProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.StrictDomainName(true))

// clean reports whether h is already a normalized name: labels of
// [a-z0-9-], 1 to 63 bytes, not starting or ending in '-', no trailing dot.
// It is on every request's path, so a name of 8 to 64 bytes is checked
// eight bytes at a time.
func clean(h string) bool {
	if len(h) < 8 || len(h) > 64 {
		return cleanBytes(h)
	}
	// Bitmaps of the name's bytes, bit i for byte i: not one of
	// [a-z0-9.-], '.', '-'. The last word overlaps the one before it;
	// its bytes already seen are shifted out.
	var bad, dots, dashes uint64
	for i := 0; i < len(h); i += 8 {
		j := min(i, len(h)-8)
		w := load64(h, j)
		seen := uint(i-j) * 8
		bad |= gather(badBytes(w)>>seen) << i
		dots |= gather(eqBytes(w, '.')>>seen) << i
		dashes |= gather(eqBytes(w, '-')>>seen) << i
	}
	last := uint64(1) << (len(h) - 1)
	seps := dots | dashes
	return bad == 0 &&
		seps&(1|last) == 0 && // no empty first or last label, no '-' at either end
		seps&(dots>>1) == 0 && // no ".." or "-."
		dots&(dashes>>1) == 0 && // no ".-"
		(len(h) < 64 || dots != 0) // a label of at most 63 bytes
}

// cleanBytes is clean for any length, a byte at a time.
func cleanBytes(h string) bool {
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

const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
)

// load64 is the eight bytes of s from i, little-endian.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// gather turns a mask with only the high bit of some bytes set into one
// bit per byte: bit k for byte k.
func gather(m uint64) uint64 { return ((m >> 7) * 0x0102040810204080) >> 56 }

// badBytes has the high bit set in each byte of x that is not one of
// [a-z0-9.-], and no other bit set. Each step works on bytes below 0x80,
// so no sum carries into the next byte.
func badBytes(x uint64) uint64 {
	y := x &^ high
	lower := (y + (0x80-'a')*ones) &^ (y + (0x80-'z'-1)*ones) // 'a' <= b <= 'z'
	dd := (y + (0x80-'-')*ones) &^ (y + (0x80-'9'-1)*ones)    // '-' <= b <= '9': [-./0-9]
	slash := ^(y ^ '/'*ones + 0x7f*ones)                      // b == '/'
	return (x | ^((lower | dd) &^ slash)) & high
}

// eqBytes has the high bit set in each byte of x that is c (below 0x80),
// and no other bit set.
func eqBytes(x uint64, c byte) uint64 {
	y := x&^high ^ uint64(c)*ones
	return ^(x | (y + 0x7f*ones)) & high
}
