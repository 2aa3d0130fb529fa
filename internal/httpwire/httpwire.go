// Package httpwire holds the few HTTP/1.1 wire primitives that gatehouse
// reads and writes raw bytes with, outside net/http: the plaintext
// listener's framing guard and hygiene (internal/gateway), the lane's
// parser and response writer (internal/lane), the proxy's fast path
// (internal/proxy), and the Date value the lane and the HTTP/2 server
// (internal/h2) write. They must parse lengths and tokens, check field
// values, and write values exactly as net/http does, so they share one
// definition.
package httpwire

// EqualFold reports whether b equals s under ASCII case folding, as header
// names and the tokens "chunked", "close" and "keep-alive" compare.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// HasFieldPrefix reports whether field name k begins with prefix (lower
// case, '-' between words) in any case and with '_' for '-': the
// spellings a CGI-style server reads as the same name (X_Gatehouse_Sub
// as X-Gatehouse-Sub), so a check of names the gateway owns, on a
// client's request or a host's answer, must catch them all. No
// allocation: it runs on every field of every exchange.
func HasFieldPrefix(k, prefix string) bool {
	if len(k) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		} else if c == '_' {
			c = '-'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// ParseLength reads a Content-Length as net/http does: digits only, at
// most 18 of them (so it fits an int64).
func ParseLength[T ~string | ~[]byte](b T) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for i := range len(b) {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// TrimOWS is v without the optional white space (spaces and tabs) a field
// value may have around it.
func TrimOWS[T ~string | ~[]byte](v T) T {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// ParseChunkSize reads a chunk size as net/http does: 1 to 15 hex digits
// (so it fits an int64), no extensions (the caller cuts them off).
func ParseChunkSize(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// IndexLineBreak returns the index of the first CR or LF in v, or -1.
// Every header value gatehouse writes is checked with it (a line break
// becomes a space, as net/http writes it), so it reads eight bytes at a
// time and looks at single bytes only in a word that holds a control
// byte (BenchmarkIndexLineBreak: long values, a cookie or a user agent,
// are where the time goes).
func IndexLineBreak[T ~string | ~[]byte](v T) int {
	i := 0
	for ; i+8 <= len(v); i += 8 {
		if below(load(v, i), '\r'+1) != 0 {
			break // a control byte in this word; the loop below finds which
		}
	}
	for ; i < len(v); i++ {
		if c := v[i]; c <= '\r' && (c == '\r' || c == '\n') {
			return i
		}
	}
	return -1
}

// ValidValue reports whether v may be a field value: no control byte
// but horizontal tab, and no DEL, as httpguts.ValidHeaderFieldValue
// (net/http's rule) decides, eight bytes at a time.
func ValidValue[T ~string | ~[]byte](v T) bool {
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := load(v, i)
		if below(x, ' ')|zero(x^0x7f*ones) != 0 {
			break // a control byte or DEL here, or a tab; the loop below decides
		}
	}
	for ; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
)

// load is the eight bytes of v from i, little-endian (one load: the
// compiler merges the pattern).
func load[T ~string | ~[]byte](v T, i int) uint64 {
	w := v[i : i+8] // one bounds check for the eight
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// below is non-zero when some byte of x is less than n (n <= 128): a
// byte at or above n neither sets its high bit here nor borrows from the
// next, so the answer is exact, though which bits are set need not be.
func below(x uint64, n byte) uint64 { return (x - uint64(n)*ones) &^ x & high }

// zero is non-zero when some byte of x is 0.
func zero(x uint64) uint64 { return below(x, 1) }
