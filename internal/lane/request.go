package lane

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

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
	reasonTarget     = "target"      // not origin-form, or one net/http refuses
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
	if len(target) == 0 || target[0] != '/' {
		return reasonTarget
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
	nv := 0
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
		key, ok := canonical(name)
		if !ok {
			return reasonHeader
		}
		v := trimOWS(line[colon+1:])
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
				return reasonHeader
			}
		}
		switch key {
		case "Host":
			hosts++
			h.host = v
			continue // net/http keeps Host out of the map
		case "Content-Length":
			n, ok := parseLength(v)
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
		if nv < len(vals) {
			vals[nv] = v
			vs = vals[nv : nv+1 : nv+1]
			nv++
		} else {
			vs = []string{v}
		}
		if old, ok := hdr[key]; ok {
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

// parseLength reads a Content-Length value: 1 to 18 digits.
func parseLength(v string) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
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

// trimOWS trims the optional white space around a field value.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// canonical returns the canonical form of a header name (interned when it
// is a common one), or false when the name is not a token.
func canonical(name string) (string, bool) {
	var buf [64]byte
	if len(name) > len(buf) {
		for i := 0; i < len(name); i++ {
			if !httpguts.IsTokenRune(rune(name[i])) {
				return "", false
			}
		}
		return textproto.CanonicalMIMEHeaderKey(name), true
	}
	b := buf[:len(name)]
	upper := true
	same := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !httpguts.IsTokenRune(rune(c)) {
			return "", false
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
	if k, ok := common[string(b)]; ok {
		return k, true
	}
	if same {
		return name, true
	}
	return string(b), true
}

// common interns the names most requests carry, so that a client's
// lower-case spelling costs no allocation.
var common = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Content-Length", "Content-Type", "Cookie", "Dnt", "Expect", "Forwarded", "Host",
		"If-Match", "If-Modified-Since", "If-None-Match", "If-Range", "If-Unmodified-Since", "Keep-Alive",
		"Origin", "Pragma", "Priority", "Proxy-Connection", "Range", "Referer", "Sec-Ch-Ua", "Sec-Ch-Ua-Mobile",
		"Sec-Ch-Ua-Platform", "Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User", "Te",
		"Trailer", "Transfer-Encoding", "Upgrade", "Upgrade-Insecure-Requests", "User-Agent", "Via",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id",
		"X-Requested-With", "Traceparent", "Tracestate",
	} {
		m[k] = k
	}
	return m
}()
