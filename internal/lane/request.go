package lane

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"golang.org/x/net/http/httpguts"
)

// head is one request head the lane takes, with every string a view of
// one copy of the head's bytes.
type head struct {
	method string
	target string
	host   string
	close  bool  // Connection: close
	length int64 // Content-Length; -1 while parsing finds none
	url    *url.URL
	nv     int // how many of the parse's vals hold this head's values
	// u is the URL's memory when the target needs no parsing: a request's
	// URL is not used after its response.
	u *url.URL
}

// headEnd returns the length of the head at the start of b (through the
// blank line), 0 while it is incomplete, or -1 for a head the lane never
// takes whatever follows: one with a bare LF line ending, which net/http
// reads and the lane leaves to it. from is how much of b was scanned
// before.
func headEnd(b []byte, from int) int {
	for i := max(from, 0); i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j
		if i == 0 || b[i-1] != '\r' {
			return -1
		}
		if i >= 3 && b[i-2] == '\n' {
			return i + 1
		}
		i++
	}
	return 0
}

// Why a connection goes to net/http: the reasons parse gives (the
// gatehouse_fast_path_handoffs_total label), besides reasonSize and
// reasonLineEnding from the read loop.
const (
	reasonMethod     = "method"      // not one of the seven methods the lane serves
	reasonVersion    = "version"     // not HTTP/1.1 (1.0, h2c preface, garbage)
	reasonTarget     = "target"      // not origin-form (nor "OPTIONS *"), or one net/http refuses
	reasonHeader     = "header"      // a malformed field line, name or value
	reasonHost       = "host"        // no Host, several, or an invalid one
	reasonFraming    = "framing"     // Transfer-Encoding, or a Content-Length that is not one plain number
	reasonUpgrade    = "upgrade"     // Upgrade, or Connection naming a header
	reasonExpect     = "expect"      // Expect (100-continue), TE or Trailer
	reasonSize       = "size"        // a head over the lane's buffer or MaxHeaderBytes
	reasonLineEnding = "line_ending" // a bare LF, which net/http reads and the lane does not
)

// parse reads the head text (through its blank line) into h and the
// header map hdr (cleared first), with one value slice per field from
// vals. It returns "" when the lane takes the request, else the reason it
// does not; then h and hdr hold nothing of use and the connection goes to
// net/http untouched.
func parse(text string, h *head, hdr http.Header, vals []string) (reason string) {
	clear(hdr)
	clear(vals[:min(h.nv, len(vals))]) // a pipelined head before this one's
	u := h.u
	*h = head{u: u, length: -1}
	line, rest, ok := strings.Cut(text, "\r\n")
	if !ok {
		return reasonLineEnding
	}
	switch {
	case strings.HasPrefix(line, "GET "):
		h.method, line = http.MethodGet, line[4:]
	case strings.HasPrefix(line, "HEAD "):
		h.method, line = http.MethodHead, line[5:]
	case strings.HasPrefix(line, "POST "):
		h.method, line = http.MethodPost, line[5:]
	case strings.HasPrefix(line, "PUT "):
		h.method, line = http.MethodPut, line[4:]
	case strings.HasPrefix(line, "PATCH "):
		h.method, line = http.MethodPatch, line[6:]
	case strings.HasPrefix(line, "DELETE "):
		h.method, line = http.MethodDelete, line[7:]
	case strings.HasPrefix(line, "OPTIONS "):
		h.method, line = http.MethodOptions, line[8:]
	default:
		if !strings.HasSuffix(line, " HTTP/1.1") {
			return reasonVersion
		}
		return reasonMethod
	}
	target, proto, ok := strings.Cut(line, " ")
	if !ok || proto != "HTTP/1.1" {
		return reasonVersion
	}
	if len(target) == 0 || target[0] != '/' && (target != "*" || h.method != http.MethodOptions) {
		return reasonTarget // "OPTIONS *" alone of the other forms: see conn.serve
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return reasonTarget // net/http refuses control bytes; non-ASCII is left to it
		}
	}
	h.target = target
	h.url = requestURL(target, h)
	if h.url == nil {
		return reasonTarget
	}
	hosts := 0
	var seen uint64 // bit n: the field common numbers n is in hdr
	for {
		line, rest, _ = strings.Cut(rest, "\r\n")
		if line == "" {
			break
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return reasonHeader
		}
		name := line[:colon]
		key, n, ok := canonical(name)
		if !ok {
			return reasonHeader
		}
		v := httpwire.TrimOWS(line[colon+1:])
		if !httpwire.ValidValue(v) {
			return reasonHeader // a control byte: net/http's rule
		}
		switch key {
		case "Host":
			hosts++
			h.host = v
			continue // net/http keeps Host out of the map
		case "Content-Length":
			n, ok := httpwire.ParseLength(v)
			if !ok || h.length >= 0 {
				return reasonFraming // repeated or not a plain number: net/http's rules
			}
			h.length = n
		case "Transfer-Encoding":
			return reasonFraming
		case "Upgrade":
			return reasonUpgrade
		case "Expect", "Te", "Trailer":
			return reasonExpect
		case "Connection":
			for tok := range strings.SplitSeq(v, ",") {
				tok = textproto.TrimString(tok)
				switch {
				case tok == "":
				case strings.EqualFold(tok, "close"):
					h.close = true
				case strings.EqualFold(tok, "keep-alive"):
				default:
					return reasonUpgrade // a header named hop-by-hop: net/http's path removes it
				}
			}
		}
		var vs []string
		if nv := h.nv; nv < len(vals) {
			vals[nv] = v
			vs = vals[nv : nv+1 : nv+1]
			h.nv++
		} else {
			vs = []string{v}
		}
		// A common field seen for the first time is new to the map: no
		// lookup for a value to append to.
		if n > 0 && seen&(1<<n) == 0 {
			seen |= 1 << n
			hdr[key] = vs
		} else if old, ok := hdr[key]; ok {
			hdr[key] = append(old, vs...)
		} else {
			hdr[key] = vs
		}
	}
	h.length = max(h.length, 0)
	if hosts != 1 || !httpguts.ValidHostHeader(h.host) {
		return reasonHost
	}
	return ""
}

// requestURL is the URL net/http's server would build for an origin-form
// target: Path and RawQuery straight from the text when the path has
// nothing to unescape or re-escape, url.ParseRequestURI otherwise; nil
// when that fails (net/http answers 400).
func requestURL(target string, h *head) *url.URL {
	path, query, hasQuery := strings.Cut(target, "?")
	if !hasQuery || query != "" {
		simple := true
		for i := 0; i < len(path) && simple; i++ {
			simple = pathByte[path[i]]
		}
		if simple {
			if h.u == nil {
				h.u = new(url.URL)
			}
			*h.u = url.URL{Path: path, RawQuery: query}
			return h.u
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil
	}
	return u
}

// pathByte marks the bytes url.URL keeps in Path unescaped and writes back
// the same (EscapedPath == Path, RawPath empty): unreserved and the
// reserved characters a path may hold as they are.
var pathByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~$&+,/:;=@" {
		t[c] = true
	}
	return t
}()

// canonical returns the canonical form of a header name (interned when it
// is a common one) and its number from common (0 if it is not one), or
// false when the name is not a token.
func canonical(name string) (string, int, bool) {
	var buf [64]byte
	if len(name) > len(buf) {
		for i := 0; i < len(name); i++ {
			if !httpguts.IsTokenRune(rune(name[i])) {
				return "", 0, false
			}
		}
		return textproto.CanonicalMIMEHeaderKey(name), 0, true
	}
	b := buf[:len(name)]
	upper := true
	same := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !httpguts.IsTokenRune(rune(c)) {
			return "", 0, false
		}
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		same = same && c == name[i]
		b[i] = c
		upper = c == '-'
	}
	if k, n := common(b); n > 0 {
		return k, n, true
	}
	if same {
		return name, 0, true
	}
	return string(b), 0, true
}

// common returns the interned form of a name most requests carry, so
// that a client's lower-case spelling costs no allocation, and its number
// (1-63) for parse's record of the fields it has seen; "" and 0 for any
// other name. A switch on string(b) compares without converting.
func common(b []byte) (string, int) {
	switch string(b) {
	case "Accept":
		return "Accept", 1
	case "Accept-Charset":
		return "Accept-Charset", 2
	case "Accept-Encoding":
		return "Accept-Encoding", 3
	case "Accept-Language":
		return "Accept-Language", 4
	case "Authorization":
		return "Authorization", 5
	case "Cache-Control":
		return "Cache-Control", 6
	case "Connection":
		return "Connection", 7
	case "Content-Length":
		return "Content-Length", 8
	case "Content-Type":
		return "Content-Type", 9
	case "Cookie":
		return "Cookie", 10
	case "Dnt":
		return "Dnt", 11
	case "Expect":
		return "Expect", 12
	case "Forwarded":
		return "Forwarded", 13
	case "Host":
		return "Host", 14
	case "If-Match":
		return "If-Match", 15
	case "If-Modified-Since":
		return "If-Modified-Since", 16
	case "If-None-Match":
		return "If-None-Match", 17
	case "If-Range":
		return "If-Range", 18
	case "If-Unmodified-Since":
		return "If-Unmodified-Since", 19
	case "Keep-Alive":
		return "Keep-Alive", 20
	case "Origin":
		return "Origin", 21
	case "Pragma":
		return "Pragma", 22
	case "Priority":
		return "Priority", 23
	case "Proxy-Connection":
		return "Proxy-Connection", 24
	case "Range":
		return "Range", 25
	case "Referer":
		return "Referer", 26
	case "Sec-Ch-Ua":
		return "Sec-Ch-Ua", 27
	case "Sec-Ch-Ua-Mobile":
		return "Sec-Ch-Ua-Mobile", 28
	case "Sec-Ch-Ua-Platform":
		return "Sec-Ch-Ua-Platform", 29
	case "Sec-Fetch-Dest":
		return "Sec-Fetch-Dest", 30
	case "Sec-Fetch-Mode":
		return "Sec-Fetch-Mode", 31
	case "Sec-Fetch-Site":
		return "Sec-Fetch-Site", 32
	case "Sec-Fetch-User":
		return "Sec-Fetch-User", 33
	case "Te":
		return "Te", 34
	case "Trailer":
		return "Trailer", 35
	case "Transfer-Encoding":
		return "Transfer-Encoding", 36
	case "Upgrade":
		return "Upgrade", 37
	case "Upgrade-Insecure-Requests":
		return "Upgrade-Insecure-Requests", 38
	case "User-Agent":
		return "User-Agent", 39
	case "Via":
		return "Via", 40
	case "X-Forwarded-For":
		return "X-Forwarded-For", 41
	case "X-Forwarded-Host":
		return "X-Forwarded-Host", 42
	case "X-Forwarded-Proto":
		return "X-Forwarded-Proto", 43
	case "X-Real-Ip":
		return "X-Real-Ip", 44
	case "X-Request-Id":
		return "X-Request-Id", 45
	case "X-Requested-With":
		return "X-Requested-With", 46
	case "Traceparent":
		return "Traceparent", 47
	case "Tracestate":
		return "Tracestate", 48
	}
	return "", 0
}
