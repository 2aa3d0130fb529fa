package h2

import (
	"context"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// newStream builds the stream and request a HEADERS frame opens, as
// net/http's HTTP/2 server would (the same Request fields), or returns the
// code to reset a malformed one with (RFC 9113 §8.1.1, §8.3).
func (cn *conn) newStream(f *http2.MetaHeadersFrame) (*stream, http2.ErrCode) {
	var method, scheme, authority, path string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":path":
			path = hf.Value
		default: // :protocol: extended CONNECT is not offered
			return nil, http2.ErrCodeProtocol
		}
	}
	if method == http.MethodConnect {
		if path != "" || scheme != "" || authority == "" {
			return nil, http2.ErrCodeProtocol
		}
	} else if method == "" || path == "" || scheme != "https" && scheme != "http" {
		return nil, http2.ErrCodeProtocol
	}
	// The method and target go into the HTTP/1.1 request line a host
	// reads: a method that is no token (RFC 9110 §9.1), or a target with a
	// space or a control byte (no request-target has one), would write a
	// line the host may split elsewhere than the gateway read it — the
	// policy checked /public of "/public?a /admin", a lenient host serves
	// /admin. An HTTP/1 client cannot send either; nginx refuses both.
	if !httpguts.ValidHeaderFieldName(method) || !targetBytes(path) {
		return nil, http2.ErrCodeProtocol
	}

	st := cn.spare.Swap(nil)
	if st == nil {
		st = new(stream)
	}
	*st = stream{cn: cn, id: f.StreamID}
	regular := f.RegularFields()
	header := cn.s.header(len(regular))
	// One backing array for the values, as net/textproto's reader does
	// (the stream's own when they fit): a field's first value is a full
	// slice of one, so a repeated name appends into a new array of its
	// own, never over the next name's.
	vals := st.vals[:]
	if len(regular) > len(vals) {
		vals = make([]string, len(regular))
	}
	// checked: a field the checks below look at came. Most requests
	// carry none, and skip their dozen map lookups; one "te: trailers",
	// which browsers send on every request, needs no check.
	checked, te := false, false
	for i, hf := range regular {
		k := textproto.CanonicalMIMEHeaderKey(hf.Name)
		switch {
		case k == "Te" && hf.Value == "trailers" && !te:
			te = true
		case checkedField(k):
			checked = true
		}
		if vs, ok := header[k]; ok {
			header[k] = append(vs, hf.Value)
			continue
		}
		vals[i] = hf.Value
		header[k] = vals[i : i+1 : i+1]
	}
	needsContinue, trailer, declLen := false, http.Header(nil), int64(-1)
	if checked {
		// A Host field is one name, the :authority's if both came (RFC
		// 9113 §8.3.1), and out of the map as net/http keeps it: the
		// gateway routes by r.Host and sends the host r.Host, and no
		// reader of r.Header may find another name. x/net's server and
		// the HTTP/1.1 listener refuse the same. Names that differ
		// in case only are one name (routing lowercases them).
		if hosts, ok := header["Host"]; ok {
			if len(hosts) != 1 || authority != "" && !strings.EqualFold(hosts[0], authority) {
				return nil, http2.ErrCodeProtocol
			}
			if authority == "" {
				authority = hosts[0]
			}
			delete(header, "Host")
		}
		var ok bool
		if needsContinue, trailer, declLen, ok = checkFields(header); !ok {
			return nil, http2.ErrCodeProtocol
		}
	}
	// The authority goes to the host as its Host, verbatim: bytes an
	// HTTP/1.1 Host may not hold (a space, a quote, markup after the
	// port, which routing does not read) are refused as the HTTP/1.1
	// listener refuses them, and userinfo is not an authority's (RFC
	// 9113 §8.3.1).
	if !httpguts.ValidHostHeader(authority) || strings.IndexByte(authority, '@') >= 0 {
		return nil, http2.ErrCodeProtocol
	}

	var u *url.URL
	requestURI := path
	if method == http.MethodConnect {
		u, requestURI = &url.URL{Host: authority}, authority
	} else {
		// "*" is the asterisk form, for OPTIONS alone (RFC 9113 §8.3.1;
		// RFC 9110 §7.1); ParseRequestURI takes it for any method.
		if path == "*" && method != http.MethodOptions {
			return nil, http2.ErrCodeProtocol
		}
		var err error
		if u, err = parseRequestURI(&st.url, path); err != nil {
			return nil, http2.ErrCodeProtocol
		}
	}

	// The body: none when HEADERS ends the stream; otherwise as long as
	// content-length says (checkFields), or until END_STREAM.
	ended := f.StreamEnded()
	if ended && declLen > 0 {
		return nil, http2.ErrCodeProtocol
	}

	cn.mu.Lock()
	sendWin := cn.peerInitWin
	cn.mu.Unlock()
	st.run = cn.s.opts.Handler
	st.sendWin, st.recvWin = sendWin, streamWindow
	if ended {
		st.recvWin, st.peerDone = 0, true // the client may send no DATA (see conn.closedWin)
	}
	st.declLen, st.remoteDone = declLen, ended
	st.header = header
	req := http.Request{
		Method:     method,
		URL:        u,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     header,
		Body:       http.NoBody,
		Host:       authority,
		RemoteAddr: cn.remote,
		RequestURI: requestURI,
		Trailer:    trailer,
	}
	// The connection says whether the request came over TLS, not the
	// client's :scheme (X-Forwarded-Proto is derived from TLS): net/http's
	// HTTP/2 server does the same.
	req.TLS = cn.tls
	if !ended {
		st.body = &reqBody{st: st, ready: make(chan struct{}, 1), needContinue: needsContinue, declared: trailer}
		req.Body, req.ContentLength = st.body, declLen
	}
	// The stream's cancellation is RequestContext's parent, so that the
	// handler is served with the very context RequestContext made (the
	// gateway finds its per-request state by that context's type, and
	// made a second one, with a copy of the Request, when a cancellable
	// context came between), and still sees the stream end.
	var ctx context.Context
	ctx, st.cancel = context.WithCancelCause(cn.ctx)
	if rc := cn.s.opts.RequestContext; rc != nil {
		ctx = rc(ctx)
	}
	// The Request lives in the stream, one allocation for both (a stream
	// is reused only once nothing holds its request: stream.serve);
	// WithContext's copy stays on the stack.
	st.reqv = *req.WithContext(ctx)
	st.req = &st.reqv
	st.w.init(st, method == http.MethodHead)

	switch {
	case f.Truncated:
		st.run = cn.s.tooLarge()
	case method == http.MethodOptions && path == "*" && !cn.s.opts.Server.DisableGeneralOptionsHandler:
		st.run = globalOptions // as net/http's serverHandler does, for HTTP/1 and HTTP/2
	}
	return st, 0
}

// parseRequestURI is url.ParseRequestURI(path), into u for a plain path
// (a '/', then bytes the path's escaping leaves as they are, then maybe a
// query without control bytes), which is then the whole URL: no scheme,
// authority or escapes to take apart. ParseRequestURI allocates its URL,
// and is a few per cent of a request's cost here; anything else goes to
// it.
func parseRequestURI(u *url.URL, path string) (*url.URL, error) {
	p, q, query := strings.Cut(path, "?")
	if len(p) == 0 || p[0] != '/' {
		return url.ParseRequestURI(path)
	}
	for i := 1; i < len(p); i++ {
		if !plainPathByte(p[i]) {
			return url.ParseRequestURI(path)
		}
	}
	for i := 0; i < len(q); i++ {
		if q[i] < ' ' || q[i] == 0x7f {
			return url.ParseRequestURI(path)
		}
	}
	*u = url.URL{Path: p, RawQuery: q, ForceQuery: query && q == ""}
	return u, nil
}

// targetBytes reports whether path holds no space, control byte or DEL.
func targetBytes(path string) bool {
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// plainPathByte reports whether c stands for itself in a URL's path, so
// url.URL's escaping of the path keeps it (RFC 3986's unreserved
// characters, and the reserved ones but '?').
func plainPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~/$&+,:;=@", c) >= 0
}

// globalOptions answers "OPTIONS *", which asks about the server, not a
// resource, as net/http's server does (its globalOptionsHandler): 200
// with no body, having read up to 4 KiB of a request body so the stream
// can end cleanly.
var globalOptions = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10))
	}
})

// checkedField reports whether checkFields looks at a field of this
// (canonical) name.
func checkedField(k string) bool {
	switch k {
	case "Host", "Expect", "Cookie", "Trailer", "Content-Length", "Te",
		"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// checkFields applies what a request's fields say beyond their values:
// whether it waits for 100-continue (Expect, then dropped), its cookies
// in one field, the trailers it declares (Trailer, then dropped) and its
// body's length (-1: none declared). ok is false for a request to refuse:
// connection-specific fields, or a content-length that is not exactly
// one number.
func checkFields(header http.Header) (needsContinue bool, trailer http.Header, declLen int64, ok bool) {
	needsContinue = httpguts.HeaderValuesContainsToken(header["Expect"], "100-continue")
	if needsContinue {
		delete(header, "Expect")
	}
	if cookies := header["Cookie"]; len(cookies) > 1 {
		header["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	for _, v := range header["Trailer"] {
		for key := range strings.SplitSeq(v, ",") {
			switch key = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(key)); key {
			case "Transfer-Encoding", "Trailer", "Content-Length", "":
			default:
				if trailer == nil {
					trailer = http.Header{}
				}
				trailer[key] = nil
			}
		}
	}
	delete(header, "Trailer")
	if badFields(header) {
		return false, nil, 0, false
	}
	// Exactly one, digits only: anything else is a request a host behind
	// an HTTP/1.1 hop could be made to read differently.
	declLen = -1
	if vs, ok := header["Content-Length"]; ok {
		if len(vs) != 1 {
			return false, nil, 0, false
		}
		n, err := strconv.ParseUint(vs[0], 10, 63)
		if err != nil || vs[0] == "" || vs[0][0] == '+' {
			return false, nil, 0, false
		}
		declLen = int64(n)
	}
	return needsContinue, trailer, declLen, true
}

// badFields reports a field that makes a request malformed (RFC 9113
// §8.2.2): a connection-specific one, or a TE other than "trailers".
// net/http answers such a request 400; the RFC and h2spec want the
// stream reset, and no client that speaks HTTP/2 sends one.
func badFields(h http.Header) bool {
	for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade"} {
		if _, ok := h[k]; ok {
			return true
		}
	}
	te := h["Te"]
	return len(te) > 0 && (len(te) > 1 || te[0] != "trailers")
}

func (s *Server) tooLarge() http.Handler {
	if s.opts.TooLarge != nil {
		return s.opts.TooLarge
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "request header fields too large", http.StatusRequestHeaderFieldsTooLarge)
	})
}
