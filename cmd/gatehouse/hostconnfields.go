package main

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
	"time"
)

// The fields an app's Connection names are hop-by-hop (RFC 9110 §7.6.1):
// a proxy removes them every time. net/http's HTTP/1.1 client deletes a
// response's whole Connection field when it says close, before
// ReverseProxy reads it for the names, so "Connection: close, X-Foo" let
// X-Foo through to the gateway (a 1xx's too). No net/http hook sees a
// head before that, so the sidecar's connections to the app are wrapped
// in a namesConn, which notes the names each response head's Connection
// lists as the transport reads the head, and connNamesTransport removes
// them from what the transport hands on.
//
// A small copy of internal/proxy's connfields.go, which the binary may
// not import (STYLE §6.1): the gateway's reading also refuses a head with
// both Content-Length and Transfer-Encoding, which the sidecar leaves to
// the gateway in front of it.

// connNames is what a namesConn noted of one exchange's response heads:
// the names each head's Connection listed, the 1xx ones first. Written by
// the connection's reader before net/http parses those bytes, and read
// after the transport handed the head on: no lock.
type connNames struct {
	heads  [][]string // per head, in order; the last is the final one once done
	status int        // the final head's status code, once done
	done   bool       // the final head (not a 1xx, or a 101) was read whole
	used   int        // 1xx heads taken by take1xx
}

// final returns the names the final head's Connection listed, if the
// head read had status: nil if the reading gave up (no head as net/http
// reads one, or a line too long for the transport to take).
func (f *connNames) final(status int) []string {
	if f == nil || !f.done || f.status != status {
		return nil
	}
	return f.heads[len(f.heads)-1]
}

// take1xx returns the names the next 1xx head's Connection listed.
func (f *connNames) take1xx() []string {
	if f == nil || f.used >= len(f.heads) || f.done && f.used == len(f.heads)-1 {
		return nil
	}
	f.used++
	return f.heads[f.used-1]
}

// maxAppHead is the longest response head the sidecar takes from its app
// (the transport's MaxResponseHeaderBytes): a line longer than that is
// not kept for the reading, as the transport refuses its head. 1 MiB, as
// the gateway bounds a host's head (it would refuse a longer one).
const maxAppHead = 1 << 20

// namesConn is a connection of the sidecar's HTTP/1 transport to the app.
// begin (the GotConn trace, before the request is written) starts a
// record; the reads that follow scan the response heads into it up to
// the final head's end, and the body passes unscanned.
type namesConn struct {
	net.Conn
	mu   sync.Mutex
	cur  *connNames // the record being written; nil: not scanning
	line []byte     // a line begun in an earlier read
	// In the head being scanned: whether its status line was read, its
	// status code, the names its Connection listed so far, and whether
	// the last field line was a Connection (for an obs-fold).
	started bool
	status  int
	names   []string
	inConn  bool
}

// begin starts the record of the exchange about to run on c.
func (c *namesConn) begin() *connNames {
	f := new(connNames)
	c.mu.Lock()
	c.cur, c.line, c.started, c.names, c.inConn = f, c.line[:0], false, nil, false
	c.mu.Unlock()
	return f
}

func (c *namesConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.scan(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes the connection under c (TCP, or TLS with its
// close_notify). ReverseProxy half-closes the app's side of a tunnel (a
// 101) when the gateway's side ends, through the transport's body, which
// asks the connection it holds, this one: without the method it took the
// half-close for a failure and closed the tunnel, the app's answer still
// to come.
func (c *namesConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", errors.ErrUnsupported)
}

// scan runs b, the next bytes read, through the record.
func (c *namesConn) scan(b []byte) {
	for len(b) > 0 && c.cur != nil {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(c.line)+len(b) > maxAppHead {
				c.cur = nil
			} else {
				c.line = append(c.line, b...)
			}
			break
		}
		line := b[:i]
		if len(c.line) > 0 {
			c.line = append(c.line, line...)
			line = c.line
		}
		b = b[i+1:]
		c.headLine(bytes.TrimSuffix(line, []byte("\r")))
		c.line = c.line[:0]
	}
	if c.cur == nil && cap(c.line) > 4<<10 {
		c.line = nil // a rare long line's room is not kept with the connection
	}
}

// headLine takes one line of a head, as net/http's client reads it.
func (c *namesConn) headLine(line []byte) {
	switch {
	case !c.started:
		// "HTTP/d.d", one or more spaces, three digits, as net/http's
		// ReadResponse takes a status line; anything else is no answer,
		// and nothing is noted.
		proto, rest, _ := bytes.Cut(line, []byte(" "))
		code, _, _ := bytes.Cut(bytes.TrimLeft(rest, " "), []byte(" "))
		if len(proto) != len("HTTP/1.1") || !bytes.HasPrefix(proto, []byte("HTTP/")) ||
			!isDigit(proto[5]) || proto[6] != '.' || !isDigit(proto[7]) || len(code) != 3 {
			c.cur = nil
			return
		}
		c.started, c.status = true, 0
		for _, d := range code {
			if !isDigit(d) {
				c.cur = nil
				return
			}
			c.status = c.status*10 + int(d-'0')
		}
	case len(line) == 0: // the head's end
		c.cur.heads = append(c.cur.heads, c.names)
		c.started, c.names, c.inConn = false, nil, false
		if c.status < 100 || c.status > 199 || c.status == http.StatusSwitchingProtocols {
			c.cur.status, c.cur.done = c.status, true
			c.cur = nil // the body follows
		}
	case line[0] == ' ' || line[0] == '\t': // obs-fold: more of the last field
		if c.inConn {
			c.names = appendNames(c.names, line)
		}
	default:
		k, v, ok := bytes.Cut(line, []byte(":"))
		// As net/http's client reads it: a name with a space before
		// its colon is another field.
		c.inConn = ok && bytes.EqualFold(k, []byte("connection"))
		if c.inConn {
			c.names = appendNames(c.names, v)
		}
	}
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// appendNames appends the field names a Connection value lists, canonical.
func appendNames(names []string, v []byte) []string {
	for tok := range bytes.SplitSeq(v, []byte(",")) {
		if tok = bytes.TrimSpace(tok); len(tok) > 0 {
			names = append(names, textproto.CanonicalMIMEHeaderKey(string(tok)))
		}
	}
	return names
}

// namesDial wraps dial's connections in a namesConn.
func namesDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &namesConn{Conn: conn}, nil
	}
}

// namesDialTLS is the transport's DialTLSContext for an https app: dial,
// the handshake net/http's transport would make (conf, the server name
// from the URL's host, h2 and http/1.1 offered, bounded by timeout, zero
// none), then a namesConn over the TLS connection, where the heads are
// plaintext. A connection that negotiated HTTP/2, which has no Connection
// field, is returned as the *tls.Conn the transport needs to speak HTTP/2
// on it.
func namesDialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error), conf *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		name, _, err := net.SplitHostPort(addr)
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
		cfg.NextProtos = []string{"h2", "http/1.1"}
		tc := tls.Client(raw, cfg)
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
				// context error names neither TLS nor the app.
				return nil, fmt.Errorf("TLS handshake timeout with %s after %s: %w", addr, timeout, err)
			}
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return tc, nil
		}
		return &namesConn{Conn: tc}, nil
	}
}

// connNamesTransport is the sidecar's transport to the app with the names
// its answers' Connection fields listed removed from them (namesConn).
type connNamesTransport struct{ http.RoundTripper }

func (t connNamesTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var f *connNames
	// Added to ReverseProxy's trace, whose hooks run after these: a 1xx
	// is passed on by its Got1xxResponse, once the names are gone.
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		// For each connection the transport takes for r (a retry's too),
		// before r is written.
		GotConn: func(info httptrace.GotConnInfo) {
			f = nil
			if c, ok := info.Conn.(*namesConn); ok {
				f = c.begin()
			}
		},
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			for _, k := range f.take1xx() {
				delete(h, k)
			}
			return nil
		},
	})
	res, err := t.RoundTripper.RoundTrip(r.WithContext(ctx))
	if err == nil && res.StatusCode != http.StatusSwitchingProtocols {
		// A 101's Connection names Upgrade, never close: it is kept for
		// checkAnswer's dropHopByHop, which keeps Upgrade.
		for _, k := range f.final(res.StatusCode) {
			delete(res.Header, k)
		}
	}
	return res, err
}
