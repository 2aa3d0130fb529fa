package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
)

// The names a host's Connection field lists are hop-by-hop (RFC 9110
// §7.6.1): a proxy removes the fields they name. net/http's HTTP/1.1
// client deletes a response's whole Connection field when it says close
// (shouldClose), before ReverseProxy reads it to remove what it names, so
// "Connection: close, X-Foo" let X-Foo through on the ReverseProxy path
// (the fast path reads its heads itself). No net/http hook sees a head
// before that; so the h1 transport's connections are wrapped in a
// headConn, which notes the names each response head's Connection lists
// as the transport reads it, and modifyResponse (and bound1xx, for a 1xx)
// removes them.
//
// The same reading refuses a head with both Content-Length and
// Transfer-Encoding (errFastFraming), which net/http's client reads as
// chunked, dropping Content-Length, and then reuses the connection: the
// head's last line end is never handed over, and the read after the
// bytes before it fails, so the transport never sees an answer and
// closes the connection (ReverseProxy: 502). Failing a read is what
// keeps the connection out of the pool: an answer without a body (to a
// HEAD, a 204) is back in it before ModifyResponse runs. And not the
// first read of the answer: net/http takes a failure there, on a
// kept-alive connection, for the host having closed it, and sends a GET
// again on a new one. A head with a field name holding a space (before
// its colon, say) is refused the same way (errFieldSpace): net/http's
// client keeps it as another field, which a "Content-Length : 7" then
// does not frame.

// connFields is what a headConn noted of one exchange's response heads:
// the names each head's Connection listed, the 1xx ones first. Written
// only by the connection's reader before net/http parses the bytes, so
// read after the transport handed the head on: no lock.
type connFields struct {
	heads  [][]string // per head read, in order; the last is the final one once done
	status int        // the final head's status code, once done
	done   bool       // the final head (not a 1xx, or a 101) was read whole
	used   int        // heads of 1xx taken by take1xx
}

// final returns the names the final head's Connection listed when it had
// status code: nil if the head read was not that response's (see scan).
func (f *connFields) final(status int) []string {
	if f == nil || !f.done || f.status != status {
		return nil
	}
	return f.heads[len(f.heads)-1]
}

// take1xx returns the names the next 1xx head's Connection listed.
func (f *connFields) take1xx() []string {
	if f == nil || f.used >= len(f.heads) || (f.done && f.used == len(f.heads)-1) {
		return nil
	}
	f.used++
	return f.heads[f.used-1]
}

// headConn is a connection of the h1 transport. begin (from the GotConn
// trace, before the request is written) starts a record; the reads that
// follow scan the response heads into it, up to the final head's end,
// and everything after (the body) passes unscanned.
type headConn struct {
	net.Conn
	mu   sync.Mutex
	cur  *connFields // the record being written; nil: not scanning
	line []byte      // a line begun in an earlier read
	// In the head being scanned: whether its status line was read, its
	// status code, the names its Connection listed so far, and whether
	// the last field line was a Connection (for an obs-fold).
	started bool
	status  int
	names   []string
	inConn  bool
	// The head being scanned has a Content-Length, a Transfer-Encoding,
	// a field name with white space before its colon.
	length, coding, spaced bool
	// Where the answers end (unsolicited.go): phase, and in it the body
	// bytes left (a length, a chunk's data or its CRLF); the head being
	// scanned's framing (its version, Content-Length, whether its coding
	// is chunked alone, the request's method); begin's record, which the
	// request's first Write arms (await); whether an answer ended on c.
	phase   phase
	left    int64
	http1x  int // 0: HTTP/1.0; 1: any later version (read as 1.1); -1: 0.x
	clen    int64
	clenBad bool
	chunked int // Transfer-Encoding fields: -1 when one is not "chunked"
	method  string
	next    *connFields
	await   bool
	reused  bool
	raw     net.Conn // the TCP connection (under a TLS one), for look
	look    sockLook
	dirty   bool // over TLS: the host sent records while no request was out
	// rawN is how many bytes were read from raw (counted by rawWatch
	// over TLS, by Read otherwise), endN what it was when the last
	// answer ended.
	rawN, endN uint64
	tls        bool
	// Over TLS: whether, since the last answer's end, net/http's reader
	// asked the TLS layer for more and it had to read the socket (so it
	// held nothing decoded); whether a request's first write waits for
	// that (awaitReader); whether c was closed. cond (L: &mu) tells of
	// each, and of a refusal.
	drained, waiting, closed bool
	cond                     sync.Cond
	// Over TLS: where the bytes read from raw are in their records (the
	// header bytes seen of the next, its length so far, what is left of
	// its body): a record begun but not whole when the answer is known
	// to have ended came after it.
	recHdr, recLen, recLeft int

	// refused: a head was, and every read fails with why
	// (errFastFraming, errFieldSpace), written before refused is set.
	refused atomic.Bool
	why     error
}

// begin starts the record of the exchange about to run on c, a request
// of method. While c follows where answers end (unsolicited.go) the
// scan of its heads starts when the request goes out, and bytes before
// that are no answer to it.
func (c *headConn) begin(method string) *connFields {
	f := new(connFields)
	c.mu.Lock()
	c.method = method
	if c.phase == phaseIdle {
		c.next, c.await = f, true
	} else {
		// An answer c did not see end (or does not follow): the heads
		// are scanned from here, as before the tracking.
		c.phase = phaseLost
		c.arm(f)
	}
	c.mu.Unlock()
	return f
}

// arm starts the scan of the heads into f. Under mu.
func (c *headConn) arm(f *connFields) {
	c.cur, c.line, c.started, c.names, c.inConn, c.length, c.coding, c.spaced = f, c.line[:0], false, nil, false, false, false, false
	c.http1x, c.clen, c.clenBad, c.chunked = -1, -1, false, 0
}

func (c *headConn) Read(p []byte) (int, error) {
	if c.refused.Load() {
		return 0, c.why
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if !c.tls {
			c.rawN += uint64(n)
		}
		cut := c.scan(p[:n])
		c.mu.Unlock()
		if cut == 0 {
			return 0, c.why
		}
		if cut > 0 {
			// The refused head's bytes less its end, or the answer's
			// bytes without what came after it: the next read fails.
			return cut, nil
		}
	}
	return n, err
}

// CloseWrite half-closes the connection under c (TCP, or TLS with its
// close_notify). ReverseProxy's tunnel of an upgraded connection asks for
// it when the client ends its side: without it the tunnel took the
// failure for its end and closed both ways, and what the host still had
// to send after the client's end (an exec's output, a reply) was lost.
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", errors.ErrUnsupported)
}

// scan runs b, the next bytes read, through the record and the answer's
// framing. It returns where in b the line end is that ended a head it
// refused, or where bytes no request asked for begin, or -1.
func (c *headConn) scan(b []byte) int {
	off := 0
	for len(b) > 0 {
		if c.cur == nil {
			k, done := c.body(b)
			if k < 0 {
				return off // unsolicited
			}
			off, b = off+k, b[k:]
			if done {
				continue
			}
		}
		// A line of a head, a chunk's size or a trailer section.
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(c.line)+len(b) > maxFastHead {
				// The transport refuses such a head itself, and such a
				// chunk line or trailer section.
				c.cur, c.phase = nil, phaseLost
				break
			}
			c.line = append(c.line, b...)
			break
		}
		line := b[:i]
		if len(c.line) > 0 {
			c.line = append(c.line, line...)
			line = c.line
		}
		b = b[i+1:]
		if c.cur != nil {
			c.headLine(bytes.TrimSuffix(line, []byte("\r")))
			if c.cur == nil && c.phase == phaseHead {
				c.phase = c.framing()
			}
		} else {
			c.bodyLine(line)
		}
		c.line = c.line[:0]
		if c.refused.Load() {
			return off + i
		}
		off += i + 1
	}
	if c.cur == nil && cap(c.line) > readSize {
		c.line = nil // a rare long line's room is not kept with the connection
	}
	return -1
}

// headLine takes one line of a head, as net/http's client reads it.
func (c *headConn) headLine(line []byte) {
	f := c.cur
	switch {
	case !c.started:
		// A line not shaped as net/http's ReadResponse needs ("HTTP/d.d",
		// one or more spaces, three bytes of code) fails the exchange
		// there: nothing is noted. One it takes and statusLine
		// does not ("HTTP/1.1  200", "HTTP/2.0 200") is refused here, as
		// the fast path refuses it; it is never empty, so never the
		// answer's first read (see refuse).
		proto, rest, _ := bytes.Cut(line, []byte(" "))
		code, _, _ := bytes.Cut(bytes.TrimLeft(rest, " "), []byte(" "))
		if !httpVersion(proto) || len(code) != 3 {
			c.cur, c.phase = nil, phaseLost
			return
		}
		status, ok := statusLine(line)
		if !ok {
			c.refuse(errStatusLine)
			return
		}
		// net/http's client reads every 1.x past 1.0 as 1.1 (chunked,
		// kept alive): following only 1.1 left such a host's connection
		// in the pool unfollowed.
		c.started, c.status, c.http1x = true, status, 1
		if line[7] == '0' {
			c.http1x = 0
		}
	case len(line) == 0: // the head's end
		switch {
		case c.length && c.coding:
			c.refuse(errFastFraming)
			return
		case c.spaced:
			c.refuse(errFieldSpace)
			return
		}
		f.heads = append(f.heads, c.names)
		if c.status < 100 || c.status > 199 || c.status == http.StatusSwitchingProtocols {
			f.status, f.done = c.status, true
			c.cur = nil // the body follows: scan reads its framing from the fields below
			return
		}
		c.started, c.names, c.inConn, c.length, c.coding = false, nil, false, false, false
		c.http1x, c.clen, c.clenBad, c.chunked = -1, -1, false, 0
	case line[0] == ' ' || line[0] == '\t': // obs-fold: more of the last field
		if c.inConn {
			c.names = addNames(c.names, line)
		}
	default:
		k, v, ok := bytes.Cut(line, []byte(":"))
		// net/http's client takes a name with a space as another field
		// (a tab fails the exchange already). A peer gateway's head is
		// read no differently: its server (net/http's) drops a field
		// with such a name rather than write it, so a peer that sends one
		// is no gatehouse gateway, and what it framed is no answer.
		c.spaced = c.spaced || ok && bytes.IndexByte(k, ' ') >= 0
		if ok && httpwire.EqualFold(k, "content-length") {
			c.length = true
			// net/http's client takes any number of leading zeros.
			cl := httpwire.TrimOWS(v)
			for len(cl) > 1 && cl[0] == '0' {
				cl = cl[1:]
			}
			n, valid := httpwire.ParseLength(cl)
			c.clenBad = c.clenBad || !valid || c.clen >= 0 && n != c.clen
			c.clen = n
		}
		if ok && httpwire.EqualFold(k, "transfer-encoding") {
			c.coding = true
			if c.chunked >= 0 && httpwire.EqualFold(httpwire.TrimOWS(v), "chunked") {
				c.chunked++
			} else {
				c.chunked = -1
			}
		}
		c.inConn = ok && httpwire.EqualFold(k, "connection")
		if c.inConn {
			c.names = addNames(c.names, v)
		}
	}
}

// refuse ends the scan: the read that ends the head fails with why, and
// every read after it.
func (c *headConn) refuse(why error) {
	if !c.refused.Load() { // the first reason stands: reads outside mu return it
		c.why = why
		c.refused.Store(true)
	}
	c.cur = nil
	c.cond.Broadcast() // a write waiting for the reader fails (awaitReader)
}

// httpVersion reports whether v is a version net/http's client takes
// (http.ParseHTTPVersion): "HTTP/" and a digit, a dot and a digit.
func httpVersion(v []byte) bool {
	return len(v) == len("HTTP/1.1") && bytes.HasPrefix(v, []byte("HTTP/")) &&
		isDigit(v[5]) && v[6] == '.' && isDigit(v[7])
}

// addNames appends the field names a Connection value lists, canonical.
func addNames(names []string, v []byte) []string {
	for _, tok := range bytes.Split(v, []byte(",")) {
		if tok = bytes.TrimSpace(tok); len(tok) > 0 {
			names = append(names, textproto.CanonicalMIMEHeaderKey(string(tok)))
		}
	}
	return names
}

// headDial wraps dial's connections in a headConn.
func headDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &headConn{Conn: conn, raw: conn}, nil
	}
}

// headDialTLS is the h1 transport's DialTLSContext: dial, then the TLS
// handshake net/http's transport would make (the server name from the
// URL's host, the handshake bounded by timeout, conf's NextProtos
// offered), then a headConn over the TLS connection, where the heads are
// plaintext. A connection that negotiated HTTP/2 (a peer gateway's, see
// FramingDialTLS) is returned as the *tls.Conn, which net/http's
// transport needs to speak HTTP/2 on it: its streams frame themselves.
func headDialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error), conf *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		name, _, err := net.SplitHostPort(addr) // the URL's, before pinnedDial moves addr
		if err != nil {
			return nil, err
		}
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := conf.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName = name
		}
		hc := &headConn{raw: raw, tls: true}
		hc.cond.L = &hc.mu
		tc := tls.Client(rawWatch{Conn: raw, c: hc}, cfg)
		hctx := ctx
		if timeout > 0 { // zero is none, as the transport's TLSHandshakeTimeout
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			if hctx.Err() != nil && ctx.Err() == nil {
				// The bound's, not the caller's: the transport's own
				// handshake said "TLS handshake timeout", and the bare
				// context error names neither TLS nor the host.
				return nil, fmt.Errorf("TLS handshake timeout with %s after %s: %w", addr, timeout, err)
			}
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return tc, nil
		}
		hc.Conn = tc
		return hc, nil
	}
}

// FramingDial wraps dial's connections for the HTTP/1.1 exchanges of a
// transport to servers a host's answer passes through (the gateway's to
// peer gateways): in an exchange WatchFraming was called for, a response
// head with both Content-Length and Transfer-Encoding fails the round
// trip, and the connection is closed, as on the h1 transport to hosts.
func FramingDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return headDial(dial)
}

// FramingDialTLS is FramingDial for a transport's DialTLSContext: dial,
// the TLS handshake with conf (the server name from the address when conf
// has none; its NextProtos offered), bounded by timeout, and the wrapper
// over the TLS connection, unless HTTP/2 was negotiated: then it is the
// *tls.Conn, for net/http's transport to speak HTTP/2 on. The transport
// ignores its TLSClientConfig and TLSHandshakeTimeout then.
func FramingDialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error), conf *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return headDialTLS(dial, conf, timeout)
}

// WatchFraming has r's exchange checked on a FramingDial connection: the
// trace's GotConn, which runs for each connection the transport takes
// for r, starts the reading of its heads. The trace is the one
// ReverseProxy made for r alone; call it once per RoundTrip, as
// LimitInterim.
func WatchFraming(r *http.Request) {
	tr := httptrace.ContextClientTrace(r.Context())
	if tr == nil {
		return
	}
	prev := tr.GotConn
	tr.GotConn = func(info httptrace.GotConnInfo) {
		if prev != nil {
			prev(info)
		}
		if hc, ok := info.Conn.(*headConn); ok {
			hc.begin(r.Method)
		}
	}
}

// noteConnFields has the attempt's exchanges on the h1 transport
// recorded (connFields): the trace's GotConn, which runs for each
// connection the transport takes for r (a retry's too) before it writes
// r, begins a record on it. The trace is the one ReverseProxy made for r
// alone.
func (a *attempt) noteConnFields(r *http.Request) {
	tr := httptrace.ContextClientTrace(r.Context())
	if tr == nil {
		return
	}
	prev := tr.GotConn
	tr.GotConn = func(info httptrace.GotConnInfo) {
		if prev != nil {
			prev(info)
		}
		if hc, ok := info.Conn.(*headConn); ok {
			a.fields = hc.begin(r.Method)
		} else {
			a.fields = nil
		}
	}
}
