package gateway

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// Hygiene at the connection: the HTTP/1 framing guard (DESIGN §2 step 4;
// the request-level checks are hygiene in layers.go).
//
// net/http accepts a request carrying both Content-Length and
// Transfer-Encoding: chunked (it drops Content-Length, as RFC 9112 §6.3
// allows an intermediary to), and leaves no trace of it for a handler to
// see; it answers an unknown transfer coding 501. DESIGN §2 step 4 wants
// both refused with 400 and the connection closed, above all on the
// plaintext hop from a TLS-terminating load balancer, where such requests
// are how front ends and back ends get desynchronized. The guard follows
// the framing of the client's byte stream beside net/http: it holds back
// each request head until it is complete, and a head that must be refused
// is replaced by one net/http itself answers "400 Bad Request" with
// Connection: close, after which the guard passes nothing more. net/http
// writes that answer in text/plain once it has answered every request
// before it, and the guard writes in its place the problem+json one
// (DESIGN §2) naming what was wrong, as it does for net/http's other
// error answers (see GuardServer). Anything it does not fully
// understand (HTTP/2 prior knowledge, an odd chunk line) ends its
// tracking and the bytes pass through untouched, to net/http's own
// checks.
//
// Bytes no request line begins with (RFC 9112 §3: a method is a token)
// are refused at once, unless a handler is answering, which may yet take
// the connection over and with it those bytes as its new protocol's:
// then once net/http waits for the next request. Above all a TLS
// ClientHello (0x16) sent to a plaintext listener, held back otherwise
// until read_header_timeout for a line end that a client awaiting its
// ServerHello never sends. A plaintext client reads why; a TLS client
// reads an answer that is no TLS record and says so at once ("wrong
// version number", "first record does not look like a TLS handshake"),
// as nginx's 400 has it say.
//
// A request line over the listener's limit (httpwire.LineLimit) is
// refused the same way, as soon as it is over, and answered 414: net/http
// would read a line up to its head limit and answer 431 (DESIGN §3 wants
// 414), and a line it reads whole edge answers 414 itself.
//
// A request with Upgrade, or a CONNECT, is tracked like any other: it
// switches protocols only if a handler takes the connection over
// (Hijack), which GuardServer tells the guard; only then does tracking
// end. A host that declines it (a 400, a 404, a 200 without the switch)
// leaves net/http reading requests on the connection, and the guard
// checking them, which it once stopped doing at the head.
//
// On a keep-alive connection net/http waits for the next request under
// the idle timeout and starts its read_header_timeout only once it has
// the request's first bytes: a head held back whole until its last field
// line would be bound by the idle timeout, and a client sending one field
// line every so often could hold the connection that long. So while
// net/http waits for a request (from GuardServer's StateIdle on) the
// guard passes its request line on as it comes and holds back the rest;
// the fields of such a head, if refused, are replaced by a line net/http
// answers 400 after the request line it already has. Not while a handler
// answers: what comes then (a pipelined head, or a client's first bytes
// of an upgraded protocol) stays with the guard until net/http asks for
// it, or is handed over whole to the handler that takes the connection.
// Nor while a pipelined head the guard passed then waits for its
// handler: net/http reads that one next, and what follows it may be the
// new protocol's bytes of an upgrade.

// GuardListener wraps every connection l accepts with [GuardConn]. Use it
// on plaintext HTTP/1 listeners (http serve mode). On https, where a
// *tls.Conn must stay unwrapped for net/http to negotiate HTTP/2, the edge
// guards each HTTP/1 connection after its handshake with [GuardTLSConn].
// The server that serves the connections must be prepared with
// [GuardServer].
func GuardListener(l net.Listener) net.Listener { return guardListener{l} }

type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return GuardConn(c), nil
}

// GuardConn wraps an HTTP/1 client connection with the framing guard. The
// caller gives c up: Close closes it. Read must not be called
// concurrently (net/http never does); Close may be. The server must be
// prepared with [GuardServer]: without it the guard never learns that a
// handler took the connection over, and goes on reading an upgraded
// stream as HTTP requests (it fails closed: the upgrade stalls).
func GuardConn(c net.Conn) net.Conn { return &guardConn{Conn: c} }

type guardConn struct {
	net.Conn
	f framer

	// hooked says GuardServer's hooks report on this connection. served
	// counts the handlers started on it; idle is served as it was when
	// net/http last finished an answer. A handler is answering while
	// served and idle differ.
	hooked       atomic.Bool
	served, idle atomic.Uint32
	// cluster is the X-Gatehouse-Cluster value of the answers the guard
	// writes (GuardServerOf); empty: none. Set before the connection's
	// goroutine starts.
	cluster string
}

// GuardTLSConn is [GuardConn] for an HTTP/1 connection of the https
// listener, after its handshake: the wrapper still reports c's
// ConnectionState, from which the edge restores r.TLS once net/http no
// longer sees a *tls.Conn. c must have that method (a *tls.Conn, or the
// lane's hand-over of one).
func GuardTLSConn(c net.Conn) net.Conn {
	cs, ok := c.(connectionStater)
	if !ok {
		return GuardConn(c)
	}
	return &guardTLSConn{guardConn: guardConn{Conn: c}, cs: cs}
}

type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

type guardTLSConn struct {
	guardConn
	cs connectionStater
}

func (c *guardTLSConn) ConnectionState() tls.ConnectionState { return c.cs.ConnectionState() }

func (c *guardConn) Read(p []byte) (int, error) { return c.f.read(c.Conn, p) }

// Write passes net/http's writes through, but for its own error answers
// (answerFor): a problem+json with the same status goes out instead, the
// refusal's naming the reason. Should net/http ever word an answer
// otherwise, it goes out as it is: the refusal and the close stand. While
// a handler answers the cost is three loads.
func (c *guardConn) Write(p []byte) (int, error) {
	if a := c.answerFor(p); a != nil {
		if _, err := c.Conn.Write(problem.Dated(a, time.Now())); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// withField returns answer with name: value after its status line.
func withField(answer []byte, name, value string) []byte {
	i := bytes.Index(answer, []byte("\r\n")) + 2
	b := make([]byte, 0, len(answer)+len(name)+len(value)+4)
	b = append(append(b, answer[:i]...), name...)
	b = append(append(append(b, ": "...), value...), "\r\n"...)
	return append(b, answer[i:]...)
}

// CloseWrite lets net/http half-close before it closes (its RST
// avoidance), when the wrapped connection can.
func (c *guardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection. After a refusal it first half-closes and
// drains what the client still sends, briefly, so that the kernel does not
// answer unread bytes with a reset that could destroy the 400 in flight.
func (c *guardConn) Close() error {
	if c.f.refused.Load() {
		_ = c.CloseWrite()
		_ = c.Conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c.Conn, 256<<10)
	}
	return c.Conn.Close()
}

// Framer states: where in the client's byte stream the guard is.
const (
	stHead      uint8 = iota // expecting a request head
	stBody                   // n bytes of a Content-Length body
	stChunkLine              // a chunk-size line
	stChunkData              // n bytes of chunk data
	stChunkEnd               // the CRLF after chunk data (n: bytes of it seen)
	stTrailer                // trailer lines, until an empty one
	stPass                   // tracking ended: bytes pass through
	stDone                   // refused: what follows is dropped
)

// maxGuardLine bounds a chunk or trailer line.
const maxGuardLine = 4 << 10

// guardHeadLimit bounds a held-back head for a server whose MaxHeaderBytes
// is maxHeaderBytes: past it the head is released unread and net/http
// answers 431 itself, so the bound must be above the longest head net/http
// would read. net/http reads a head until MaxHeaderBytes + 4 KiB have come
// off the connection (its initialReadLimitSize), on top of up to 4 KiB its
// buffer already held (zero or less: http.DefaultMaxHeaderBytes, as
// net/http takes it). A fixed bound below that let a larger configured
// max_header_bytes carry a refused framing past the guard.
func guardHeadLimit(maxHeaderBytes int) int {
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	return maxHeaderBytes + 16<<10
}

// refusal is the head handed to net/http in place of a refused one: a
// header name with a space, which net/http answers "400 Bad Request"
// with Connection: close. refusalFields is its fields alone, for a head
// whose request line net/http already has (any request line: net/http
// reads the fields before it checks anything else of the request).
// refusalLineEnd ends a request line net/http has part of: whatever that
// part is, net/http answers 400, for a malformed request line or for the
// field after it.
var (
	refusal        = []byte("GET / HTTP/1.1\r\nHost: refused.invalid\r\nRefused Framing: 1\r\n\r\n")
	refusalFields  = refusal[bytes.Index(refusal, []byte("Refused")):]
	refusalLineEnd = append([]byte("\r\n"), refusalFields...)
)

// Why a head is refused: the problem detail each reason is answered with.
const (
	passed uint8 = iota
	whyBothFramings
	whyLengths
	whyLength
	whyCoding
	whyCodingFields
	whyCodingHTTP10
	whyNameSpace
	whyObsFold
	whyRequestLine // not framing: a request line over the listener's limit (414)
	whyMethod      // not framing: bytes no request line starts with
	nReasons
)

var reasons = [nReasons]string{
	whyBothFramings: "both Content-Length and Transfer-Encoding",
	whyLengths:      "differing Content-Length values",
	whyLength:       "invalid Content-Length",
	whyCoding:       "unknown transfer coding",
	whyCodingFields: "more than one Transfer-Encoding field",
	whyCodingHTTP10: "Transfer-Encoding on an HTTP/1.0 request",
	whyNameSpace:    "whitespace between a header field name and its colon",
	whyObsFold:      "obsolete line folding of Content-Length or Transfer-Encoding",
	whyRequestLine:  "the request line is over the listener's limit", // edge's words for its own 414
	whyMethod:       "the request does not begin with a method",
}

// refusals holds each reason's whole answer, built once, so that refusing
// allocates nothing.
var refusals = func() (a [nReasons][]byte) {
	for why, detail := range reasons {
		switch why {
		case int(passed):
		case int(whyRequestLine):
			a[why] = problem.Raw(http.StatusRequestURITooLong, detail)
		default:
			a[why] = problem.Raw(http.StatusBadRequest, detail)
		}
	}
	return a
}()

// framer tracks HTTP/1 request framing over a byte stream. Only the
// reading goroutine touches it, except refused, and why and refusedAt
// once refused is set.
type framer struct {
	state     uint8
	why       uint8  // the refusal's reason; written before refused
	heads     uint32 // heads passed, but OPTIONS * when it has no handler (star)
	refusedAt uint32 // heads at the refusal; written before refused
	n         int64  // bytes left of a body or chunk; CRLF bytes seen
	held      []byte // a head being held back, or the line being parsed
	sent      int    // bytes of held passed on already: the request line
	maxHead   int    // guardHeadLimit of the server; 0: of net/http's default
	maxLine   int    // the listener's request-line limit (httpwire.LineLimit); 0: none
	out       []byte // bytes released and not yet read
	obuf      []byte // out's backing array, kept across refills
	buf       []byte // read buffer
	refused   atomic.Bool
	// hijacked is set (by GuardServer's ConnState hook, on the handler's
	// goroutine, with no Read in progress) once a handler has taken the
	// connection over.
	hijacked atomic.Bool
	// await says net/http waits for the next request: set by GuardServer
	// at StateIdle (no Read in progress) when every head passed has had
	// its handler, cleared once a head is whole.
	await atomic.Bool
	// star says "OPTIONS *" gets a handler like any request (the server's
	// DisableGeneralOptionsHandler, which the edge sets on every server):
	// it is counted then, as GuardServer counts the handler.
	star bool
}

// errRefusedThenHijacked ends reads of a connection a handler took over
// after the guard had refused what followed its request: the client sent
// the refused head, not the new protocol's bytes.
var errRefusedThenHijacked = errors.New("gateway: connection taken over after the framing guard refused its next request")

func (f *framer) read(src io.Reader, p []byte) (int, error) {
	for {
		if f.state != stPass && f.hijacked.Load() {
			if f.state == stDone {
				f.out = nil
				return 0, errRefusedThenHijacked
			}
			f.handOver()
		}
		if f.state == stHead && len(f.held) > f.sent && f.await.Load() {
			if f.sent == 0 && !tokenByte(f.held[0]) {
				f.refuse(whyMethod, refusal) // see feedHead
			} else {
				f.passLine() // a head begun while a handler answered
			}
		}
		if len(f.out) > 0 {
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		}
		if f.state == stPass {
			return src.Read(p)
		}
		// After a refusal (stDone) reads go on, and feed drops what
		// comes: net/http's background read while it answers the
		// requests before the stand-in must wait as on any live
		// connection, as an end of stream would tell it the client left
		// and cancel them.
		if f.buf == nil {
			f.buf = make([]byte, 4<<10)
		}
		f.out = f.obuf[:0]
		n, err := src.Read(f.buf)
		f.feed(f.buf[:n])
		f.obuf = f.out[:0]
		if err != nil && len(f.out) == 0 {
			if err == io.EOF && f.state == stHead && len(f.held) > 0 {
				f.out, f.held, f.sent = append(f.out, f.held[f.sent:]...), f.held[:0], 0 // a truncated head: net/http judges it
				continue
			}
			// Not sticky: net/http aborts a background read with a past
			// deadline and then reads on.
			return 0, err
		}
	}
}

// handOver ends tracking once a handler has taken the connection over: a
// head held back (bytes a client sent right behind its upgrade request,
// before the 101) goes on as it came, and so does everything after it.
func (f *framer) handOver() {
	if f.state == stHead {
		f.out = append(f.out, f.held[f.sent:]...)
	}
	f.held, f.sent, f.state = nil, 0, stPass
}

// feed runs b through the state machine, appending what may be released
// to f.out.
func (f *framer) feed(b []byte) {
	for len(b) > 0 {
		switch f.state {
		case stPass:
			f.out = append(f.out, b...)
			return
		case stDone:
			return
		case stHead:
			b = f.feedHead(b)
		case stBody, stChunkData:
			k := int(min(int64(len(b)), f.n))
			f.out = append(f.out, b[:k]...)
			b, f.n = b[k:], f.n-int64(k)
			if f.n == 0 {
				if f.state == stBody {
					f.state = stHead
				} else {
					f.state = stChunkEnd
				}
			}
		case stChunkEnd:
			if want := "\r\n"[f.n]; b[0] != want {
				f.state = stPass
				continue
			}
			f.out = append(f.out, b[0])
			b = b[1:]
			if f.n++; f.n == 2 {
				f.state = stChunkLine
			}
		case stChunkLine, stTrailer:
			b = f.feedLine(b)
		}
	}
}

// feedHead passes the request line on and holds back the rest of a head
// until it is complete, then judges it. It returns what follows the head
// in b.
func (f *framer) feedHead(b []byte) []byte {
	if len(f.held) == 0 { // CR/LF between requests: net/http's to skip or refuse
		i := 0
		for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
			i++
		}
		f.out = append(f.out, b[:i]...)
		if b = b[i:]; len(b) == 0 {
			return nil
		}
		if (f.heads == 0 || f.await.Load()) && !tokenByte(b[0]) {
			f.refuse(whyMethod, refusal)
			return nil
		}
	}
	start := len(f.held)
	f.held = append(f.held, b...)
	if f.lineOver() {
		// Refused as soon as the line is over the limit: net/http would
		// read on to its head limit and answer 431, and with no limit
		// of the guard's own a line could be as long as that. While
		// net/http awaits the line, part of it may be out already
		// (passLine): it gets the line's first maxLine+1 bytes, however
		// they came, and the stand-in ends the line.
		standIn := refusal
		if f.sent > 0 || f.await.Load() {
			f.out = append(f.out, f.held[f.sent:f.maxLine+1]...)
			standIn = refusalLineEnd
		}
		f.refuse(whyRequestLine, standIn)
		return nil
	}
	if f.await.Load() {
		f.passLine()
	}
	end := headEnd(f.held, start)
	if end < 0 {
		if len(f.held) > f.headLimit() {
			f.out, f.held, f.sent, f.state = append(f.out, f.held[f.sent:]...), f.held[:0], 0, stPass
		}
		return nil
	}
	rest := b[end-start:]
	f.await.Store(false)
	next, n, why := inspectHead(f.held[:end])
	if why != passed {
		standIn := refusal
		if f.sent > 0 { // the whole request line: it ends before the head
			standIn = refusalFields
		}
		f.refuse(why, standIn)
		return nil
	}
	if f.star || f.held[0] != 'O' || !optionsStar(f.held) {
		f.heads++
	}
	f.out = append(f.out, f.held[f.sent:end]...) // the line ends before the head: sent < end
	f.held, f.sent, f.state, f.n = f.held[:0], 0, next, n
	return rest
}

// refuse drops the held head and what follows it, and hands net/http
// standIn, which it answers 400, in its place; GuardServer's guard
// writes the refusal for why instead of that 400.
func (f *framer) refuse(why uint8, standIn []byte) {
	f.out, f.state, f.why, f.refusedAt = append(f.out, standIn...), stDone, why, f.heads
	f.refused.Store(true)
	f.held, f.sent = nil, 0
}

// lineOver reports whether the held head's request line, as far as it
// has come, is over maxLine (not counting its CRLF, as edge counts it).
// A line passed whole was checked before it was passed, and no more than
// maxLine+1 bytes of one are passed before it is found over.
func (f *framer) lineOver() bool {
	if f.maxLine <= 0 || f.sent > 0 && f.held[f.sent-1] == '\n' {
		return false
	}
	i := bytes.IndexByte(f.held[:min(len(f.held), f.maxLine+2)], '\n')
	if i < 0 {
		return len(f.held) > f.maxLine+1 // a CR at the end might yet be the line's
	}
	if i > 0 && f.held[i-1] == '\r' {
		i--
	}
	return i > f.maxLine
}

// headLimit is the bound on a held-back head.
func (f *framer) headLimit() int {
	if f.maxHead == 0 {
		return guardHeadLimit(0)
	}
	return f.maxHead
}

// passLine passes on the bytes of the held head's request line not yet
// passed, up to its LF. With a request line alone net/http can do
// nothing but wait for the fields, so passing it changes nothing the
// guard decides; but it starts net/http's header clock.
func (f *framer) passLine() {
	if f.sent > 0 && f.held[f.sent-1] == '\n' {
		return // the whole line is out
	}
	from := f.sent
	if i := bytes.IndexByte(f.held[from:], '\n'); i >= 0 {
		f.sent += i + 1
	} else {
		f.sent = len(f.held)
	}
	f.out = append(f.out, f.held[from:f.sent]...)
}

// feedLine passes a chunk-size or trailer line through while collecting
// it, and moves on when it is complete.
func (f *framer) feedLine(b []byte) []byte {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		f.out, f.held = append(f.out, b...), append(f.held, b...)
		if len(f.held) > maxGuardLine {
			f.held, f.state = f.held[:0], stPass
		}
		return nil
	}
	f.out, f.held = append(f.out, b[:i+1]...), append(f.held, b[:i+1]...)
	line := f.held
	f.held = f.held[:0]
	if f.state == stTrailer {
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			f.state = stHead
		}
		return b[i+1:]
	}
	// A chunk-size line as net/http reads it: CRLF-terminated with no
	// other CR, hex size before any ';' extension.
	if len(line) < 3 || line[len(line)-2] != '\r' || bytes.IndexByte(line, '\r') != len(line)-2 {
		f.state = stPass
		return b[i+1:]
	}
	// net/http trims trailing blanks off the line before it cuts the
	// extension, and takes up to 16 hex digits: a line it reads and the
	// guard did not would end the guard's look at the connection.
	size, _, _ := bytes.Cut(bytes.TrimRight(line[:len(line)-2], " \t"), []byte(";"))
	for len(size) > 15 && size[0] == '0' {
		size = size[1:] // leading zeros change nothing; ParseChunkSize takes 15 digits
	}
	n, ok := httpwire.ParseChunkSize(size)
	switch {
	case !ok:
		f.state = stPass
	case n == 0:
		f.state = stTrailer
	default:
		f.state, f.n = stChunkData, n
	}
	return b[i+1:]
}

// optionsStar reports whether head's request line is "OPTIONS *
// HTTP/1.x", the one request net/http answers itself, without a handler.
func optionsStar(head []byte) bool {
	line, _ := cutLine(head)
	return len(line) == len("OPTIONS * HTTP/1.1") && bytes.HasPrefix(line, []byte("OPTIONS * HTTP/1."))
}

// headEnd returns the index just past the empty line that ends the head
// in h, looking from about from, or -1.
func headEnd(h []byte, from int) int {
	for i := max(from-2, 0); i < len(h); i++ {
		if h[i] != '\n' {
			continue
		}
		if i+1 < len(h) && h[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(h) && h[i+1] == '\r' && h[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// inspectHead decides what follows a complete request head: the next
// state and body length, or why the head must be refused.
func inspectHead(head []byte) (next uint8, n int64, why uint8) {
	line, rest := cutLine(head)
	sp1, sp2 := bytes.IndexByte(line, ' '), bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 == sp1 {
		return stPass, 0, passed
	}
	// net/http reads any "HTTP/1.<digit>" as HTTP/1, and from 1.1 up with
	// 1.1's framing (chunked bodies): HTTP/1.2 must be tracked like 1.1,
	// not passed, or a desync framing would get through under it.
	vers := line[sp2+1:]
	if len(vers) != len("HTTP/1.1") || !bytes.HasPrefix(vers, []byte("HTTP/1.")) || vers[7] < '0' || vers[7] > '9' {
		return stPass, 0, passed // HTTP/2 prior knowledge, or not HTTP
	}
	http11 := vers[7] != '0'
	var cl, te []byte
	var nCL, nTE int
	var seen, framing bool // a field was read; the last one was CL or TE
	for len(rest) > 0 {
		line, rest = cutLine(rest)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			// obs-fold: net/http joins a folded line to the field before
			// and reads the fields after it as usual, so the guard reads
			// on too (it used to stop looking here, and a Transfer-Encoding
			// after a fold got past it). A fold of Content-Length or
			// Transfer-Encoding itself changes the framing under one
			// parser and not another: refused (RFC 9112 §5.2 allows 400).
			// A folded first line net/http refuses itself.
			if !seen {
				return stPass, 0, passed
			}
			if framing {
				return 0, 0, whyObsFold
			}
			continue
		}
		seen = true
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return stPass, 0, passed
		}
		// "Content-Length : 5" is a field some parsers read as
		// Content-Length and others as a field of another name
		// (RFC 9112 §5.1 requires a 400).
		if k := len(name); k > 0 && (name[k-1] == ' ' || name[k-1] == '\t') {
			return 0, 0, whyNameSpace
		}
		value = bytes.Trim(value, " \t")
		framing = false
		switch {
		case httpwire.EqualFold(name, "Content-Length"):
			framing = true
			if nCL > 0 && !bytes.Equal(value, cl) {
				return 0, 0, whyLengths
			}
			cl, nCL = value, nCL+1
		case httpwire.EqualFold(name, "Transfer-Encoding"):
			framing = true
			te, nTE = value, nTE+1
		}
	}
	if nTE > 0 {
		// Both framings, a coding other than chunked alone, or chunked
		// on HTTP/1.0 (which net/http ignores while others may not).
		switch {
		case nCL > 0:
			return 0, 0, whyBothFramings
		case nTE > 1:
			return 0, 0, whyCodingFields
		case !http11:
			return 0, 0, whyCodingHTTP10
		case !httpwire.EqualFold(te, "chunked"):
			return 0, 0, whyCoding
		}
		return stChunkLine, 0, passed
	}
	if nCL > 0 {
		v, ok := httpwire.ParseLength(cl)
		switch {
		case !ok:
			return 0, 0, whyLength
		case v > 0:
			return stBody, v, passed
		}
	}
	return stHead, 0, passed
}

// tokenByte reports whether c is a tchar (RFC 9110 §5.6.2), which every
// method is made of.
func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// cutLine splits off the first line of b, without its CRLF or LF.
func cutLine(b []byte) (line, rest []byte) {
	line, rest, _ = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest
}
