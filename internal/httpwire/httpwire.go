// Package httpwire holds the few HTTP/1.1 wire primitives that gatehouse
// reads and writes raw bytes with, outside net/http: the plaintext
// listener's framing guard (internal/gateway), the lane's response writer
// (internal/lane) and the proxy's fast path (internal/proxy). They must
// parse lengths and tokens, and write values, exactly as net/http does, so
// they share one definition.
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

// ParseLength reads a Content-Length as net/http does: digits only, at
// most 18 of them (so it fits an int64).
func ParseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
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
// becomes a space, as net/http writes it): values are short, and a plain
// loop takes ~40 % less time than strings.IndexAny, which builds its set
// of bytes on every call (BenchmarkIndexLineBreak).
func IndexLineBreak(v string) int {
	for i := range len(v) {
		if c := v[i]; c <= '\r' && (c == '\r' || c == '\n') {
			return i
		}
	}
	return -1
}
