package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/lane"
	"github.com/gatehouse-dev/gatehouse/internal/pipe"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/sni"
	"github.com/gatehouse-dev/gatehouse/internal/sock"
)

// serveTLSConn owns c: it peeks the ClientHello, then pipes it to a
// passthrough host or terminates TLS and hands the connection to the L7
// server.
func (e *Edge) serveTLSConn(c net.Conn, l7 *chanListener, fast *lane.Server) {
	// One budget for the hello and the handshake (as net/http gives the
	// handshake its ReadHeaderTimeout once): a fresh one after the peek
	// would give a client that dribbles its hello twice the time.
	deadline := time.Now().Add(e.opts.ReadHeaderTimeout)
	src := e.conns.sourceOf(c.RemoteAddr()) // as counted at accept
	hello, pc, err := sni.Peek(c, e.opts.ReadHeaderTimeout)
	if err != nil {
		e.countHello(helloFailure(err))
		e.log.Debug("edge: client hello", "remote", c.RemoteAddr(), "err", err)
		e.refuseHello(c, err)
		c.Close()
		e.conns.doneRaw(c, src)
		return
	}
	posture := e.meetsPosture(hello)
	// A gateway's own host challenge is never piped on (httpwire.ChallengeALPN):
	// terminated here, it meets the L7 refusal of challenges.
	if hello.ServerName != "" && e.opts.Passthrough != nil && posture && !slices.Contains(hello.ALPN, httpwire.ChallengeALPN) {
		if dial, ok := e.opts.Passthrough(hello.ServerName); ok {
			e.passthrough(c, src, pc.Peeked(), hello.ServerName, dial)
			return
		}
	}
	// Below the posture, the handshake below refuses it (TLS's config
	// holds the same floor).
	if posture {
		e.countHello(HelloOK)
	} else {
		e.countHello(HelloRefusedPosture)
	}
	// Terminated from here on: no splice, so the raw system calls of a
	// sock.Conn serve it.
	pc.Conn = sock.Wrap(pc.Conn)
	tc := e.conns.wrapRaw(c, pc, src) // counted since accept; Close counts it done
	conn := tls.Server(tc, e.opts.TLS)
	_ = tc.SetDeadline(deadline)
	// The deadline on the socket bounds reads and writes only: a
	// GetCertificate that waits (for an on-demand order, up to 8 s) held the
	// client past it. A timer closes the connection when the deadline
	// runs out, whatever the handshake is doing (as HandshakeContext
	// would, without its goroutine and context on every handshake).
	cut := time.AfterFunc(time.Until(deadline), func() { _ = tc.Close() })
	err = conn.Handshake()
	if !cut.Stop() && err == nil {
		err = os.ErrDeadlineExceeded // closed under a handshake that then finished
	}
	if err != nil {
		e.log.Debug("edge: tls handshake", "remote", c.RemoteAddr(), "server_name", hello.ServerName, "err", err)
		conn.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	switch conn.ConnectionState().NegotiatedProtocol {
	case "acme-tls/1":
		conn.Close() // the challenge is the handshake; nothing follows
		return
	case "h2":
		if e.h2 != nil {
			e.h2.ServeConn(conn)
			return
		}
		l7.hand(conn) // HTTP/2 frames its own bodies: nothing to guard
		return
	}
	if fast != nil {
		fast.ServeConn(conn) // hands l7 what it does not serve, through wrapTLS
		return
	}
	l7.hand(e.wrapTLS(conn))
}

// Outcomes of a connection's ClientHello on the https listener, the
// values Options.Hello is given: one per connection.
const (
	HelloOK             = "ok"              // a whole hello, handed to the gateway's handshake or piped to a passthrough host
	HelloTimeout        = "timeout"         // no whole hello within ReadHeaderTimeout
	HelloMalformed      = "malformed"       // bytes that are no ClientHello (answered with an alert)
	HelloPlainHTTP      = "plain_http"      // a plain HTTP request (answered 400)
	HelloClosed         = "closed"          // the client closed or reset the connection, or sent an alert, before a whole hello
	HelloRefusedPosture = "refused_posture" // below the listener's floor (TLS 1.2; with PQOnly, X25519MLKEM768): the handshake refuses it
	HelloNoRoute        = "no_route"        // a passthrough app's name whose hosts could not be dialled: closed
)

// HelloOutcomes are every Hello* value, for a caller that sets up its
// counters ahead.
var HelloOutcomes = [...]string{HelloOK, HelloTimeout, HelloMalformed, HelloPlainHTTP, HelloClosed, HelloRefusedPosture, HelloNoRoute}

// helloFailure is the outcome of a hello sni.Peek refused with err.
func helloFailure(err error) string {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return HelloTimeout
	case errors.Is(err, sni.ErrPlainHTTP):
		return HelloPlainHTTP
	case errors.Is(err, sni.ErrTruncated), errors.Is(err, sni.ErrAlert):
		return HelloClosed
	case errors.Is(err, sni.ErrInvalid):
		return HelloMalformed
	}
	return HelloClosed // a read error: reset, or closed under us at drain
}

// countHello tells Options.Hello a hello's outcome.
func (e *Edge) countHello(outcome string) {
	if e.opts.Hello != nil {
		e.opts.Hello(outcome)
	}
}

// plainHTTPAnswer is the https listener's answer to a plain HTTP request:
// an http:// URL with the https port is a common mistake, and a bare
// close shows the user nothing (nginx answers 400 too).
var plainHTTPAnswer = problem.Raw(http.StatusBadRequest, "this port speaks TLS: use an https:// URL")

// withField returns answer, a whole HTTP/1.1 response, with the field
// name: value after its status line. value must be a valid field value
// (Options.Cluster is a cluster id, a DNS label).
func withField(answer []byte, name, value string) []byte {
	i := bytes.Index(answer, []byte("\r\n")) + 2
	b := make([]byte, 0, len(answer)+len(name)+len(value)+4)
	b = append(append(b, answer[:i]...), name+": "+value+"\r\n"...)
	return append(b, answer[i:]...)
}

// helloAlert is the fatal alert record (RFC 8446 §6.2) a TLS server
// sends for what sni.Peek refused as err, with the description RFC 8446
// names for the fault: decode_error for a ClientHello it cannot parse.
// Clients report it as such, where a bare close looks like a network
// fault.
func helloAlert(err error) []byte {
	desc := byte(50) // decode_error
	switch {
	case errors.Is(err, sni.ErrUnexpected):
		desc = 10 // unexpected_message
	case errors.Is(err, sni.ErrRecordOverflow):
		desc = 22 // record_overflow
	case errors.Is(err, sni.ErrSSLv2):
		desc = 70 // protocol_version
	}
	return []byte{21, 3, 3, 0, 2, 2, desc}
}

// refuseHello answers, before the close, a client whose first bytes were
// not a ClientHello: err is sni.Peek's. A hello cut short, a timeout or a
// reset get nothing: there is no one, or nothing whole, to answer; nor
// does an alert, which ends the connection (RFC 8446 §6.2).
func (e *Edge) refuseHello(c net.Conn, err error) {
	var answer []byte
	switch {
	case errors.Is(err, sni.ErrPlainHTTP):
		answer = problem.Dated(e.plainAnswer, time.Now())
	case errors.Is(err, sni.ErrTruncated), errors.Is(err, sni.ErrAlert):
		return
	case errors.Is(err, sni.ErrInvalid):
		answer = helloAlert(err)
	default:
		return
	}
	// Bounded: a client that does not read gets the close instead.
	if c.SetWriteDeadline(time.Now().Add(time.Second)) != nil {
		return
	}
	if _, err := c.Write(answer); err != nil {
		return
	}
	// Closed with bytes of the client's unread (a request's body), the
	// socket would answer a reset, which can reach the client before it
	// reads the answer, and which a client still sending reports instead
	// of it. So our side ends first, and what the client goes on sending
	// is read and dropped for a bounded while, as net/http's close after
	// an error and nginx's lingering close do.
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.SetReadDeadline(time.Now().Add(refuseLingerFor)) == nil {
		_, _ = io.CopyN(io.Discard, c, refuseLingerBytes)
	}
}

// refuseLingerFor and refuseLingerBytes bound how long, and how much of
// what a refused client goes on sending, refuseHello reads after its
// answer: a form a browser posts to the wrong port, not an upload.
const (
	refuseLingerFor   = 500 * time.Millisecond
	refuseLingerBytes = 256 << 10
)

// wrapTLS applies Options.WrapTLS to an HTTP/1 connection of the https
// listener before net/http reads it: net/http alone accepts a request with
// both Content-Length and chunked framing, which DESIGN §2 step 4 refuses.
func (e *Edge) wrapTLS(c net.Conn) net.Conn {
	if e.opts.WrapTLS == nil {
		return c
	}
	return e.opts.WrapTLS(c)
}

// meetsPosture reports whether a hello meets the https listener's TLS
// floor (DESIGN §3: TLS 1.2 minimum, X25519MLKEM768 with PQOnly), which
// holds for passthrough apps too: the gateway is the one door. One that
// does not is not piped; the gateway's own handshake refuses it.
func (e *Edge) meetsPosture(h *sni.Hello) bool {
	tls13 := slices.Contains(h.SupportedVersions, tls.VersionTLS13)
	if e.opts.PQOnly {
		return tls13 && slices.Contains(h.SupportedGroups, uint16(tls.X25519MLKEM768))
	}
	if len(h.SupportedVersions) > 0 {
		return tls13 || slices.Contains(h.SupportedVersions, tls.VersionTLS12)
	}
	return h.Version >= tls.VersionTLS12
}

// passthrough pipes the raw client connection to a host of the app. The
// client conn is passed unwrapped so the pipe splices; it is counted until
// the pipe ends.
func (e *Edge) passthrough(c net.Conn, src source, hello []byte, name string, dial Dial) {
	defer e.conns.doneRaw(c, src)
	ctx, cancel := context.WithTimeout(e.pipeCtx, e.opts.DialTimeout)
	host, held, err := dial(ctx)
	cancel()
	if err != nil {
		e.countHello(HelloNoRoute)
		// Said once per routed name: the client picks the spelling
		// (case, a trailing dot), and a key per spelling would give a
		// client that changes it at each connection a line each.
		key := name
		if n, ok := route.NormalizeHost(name); ok {
			key = n
		}
		if say, left := e.dialLog.say(key, time.Now()); say {
			e.log.Info("edge: passthrough dial", "server_name", name, "err", err, "not_logged_since", left)
		}
		c.Close()
		return
	}
	e.countHello(HelloOK)
	defer held.Release()
	st, err := pipe.Join(e.pipeCtx, c, host, hello, e.opts.PipeIdleTimeout)
	if errors.Is(err, pipe.ErrIdle) {
		e.log.Debug("edge: passthrough idle, closed", "server_name", name, "up", st.Up, "down", st.Down, "idle_timeout", e.opts.PipeIdleTimeout)
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		e.log.Debug("edge: passthrough", "server_name", name, "up", st.Up, "down", st.Down, "err", err)
	}
}

// A connection the TLS lane hands to net/http is no longer a *tls.Conn,
// which is how net/http knows to fill r.TLS; the connection still reports
// its ConnectionState, so the L7 server's ConnContext keeps it and
// withTLSState puts it back on the request.
type tlsStateKey struct{}

type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

func tlsStateContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*tls.Conn); ok {
		return ctx // net/http sets r.TLS itself
	}
	if cs, ok := c.(connectionStater); ok {
		st := cs.ConnectionState()
		return context.WithValue(ctx, tlsStateKey{}, &st)
	}
	return ctx
}

func withTLSState(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
				r.TLS = st
			}
		}
		next.ServeHTTP(w, r)
	})
}
