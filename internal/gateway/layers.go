package gateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// ---- 1. healthz --------------------------------------------------------

// healthz answers GET /healthz on any host with 200 ok, before anything
// else, so a load balancer's check never depends on the fleet behind.
func (g *Gateway) healthz(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h["Content-Type"] = textPlain
		h["Cache-Control"] = noStore
		h[headerCluster] = g.clusterHdr
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "ok")
		}
	})
}

var (
	textPlain = []string{"text/plain; charset=utf-8"}
	noStore   = []string{"no-store"}
)

const (
	headerCluster   = "X-Gatehouse-Cluster"
	headerRequestID = "X-Request-Id"
)

// ---- 2. observe --------------------------------------------------------

// exchange is one request's observe state: the route.Request the layers
// below fill, and the writer that records what the client got. One
// allocation per request.
type exchange struct {
	req route.Request
	w   recorder
}

// observe gives the request its id, its route.Request and a recording
// writer; after the rest of the chain it counts, logs, and turns a panic
// into a 500 problem (never a stack trace to the client).
func (g *Gateway) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x := &exchange{}
		x.req.Start = g.now()
		id, kept := requestID(r.Header[headerRequestID])
		x.req.ID = id
		if !kept {
			r.Header[headerRequestID] = []string{id}
		}
		x.req.ClientIP = g.clientIP(r)
		x.w = recorder{ResponseWriter: w, cluster: g.clusterHdr, id: r.Header[headerRequestID]}
		r = r.WithContext(route.WithRequest(r.Context(), &x.req))
		defer g.finish(x, r)
		next.ServeHTTP(&x.w, r)
	})
}

// finish runs deferred after the chain: panic recovery, metrics, log.
// http.ErrAbortHandler (a deliberate abort, e.g. ReverseProxy losing the
// host mid-body) is counted and re-panicked for net/http to close the
// connection quietly.
func (g *Gateway) finish(x *exchange, r *http.Request) {
	v := recover()
	if v != nil && v != http.ErrAbortHandler {
		g.log.LogAttrs(r.Context(), slog.LevelError, "gateway: panic serving request",
			slog.String("request_id", x.req.ID), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		if x.w.wrote {
			v = http.ErrAbortHandler // too late for a 500: cut the response
		} else {
			h := x.w.Header()
			clear(h)
			h["Connection"] = closeConn
			problem.Write(&x.w, http.StatusInternalServerError, "the gateway failed to handle this request")
			v = nil
		}
	}
	g.record(x, r)
	if v != nil {
		panic(v)
	}
}

var closeConn = []string{"close"}

// record counts the request and writes its access log line.
func (g *Gateway) record(x *exchange, r *http.Request) {
	status := x.w.status
	if status == 0 {
		status = x.req.Status // e.g. 499: the client left, nothing was written
		if status == 0 {
			status = http.StatusOK // net/http sends 200 for a handler that wrote nothing
		}
	}
	x.req.Status = status
	app := appLabel(x.req.Match)
	d := g.now().Sub(x.req.Start)
	g.metrics.Requests.WithLabelValues(app, metrics.Class(status), metrics.Method(r.Method)).Inc()
	g.metrics.Duration.WithLabelValues(app).Observe(d.Seconds())
	if !g.accessLog {
		return
	}
	g.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method),
		slog.String("host", r.Host),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Int64("bytes", x.w.bytes),
		slog.Duration("duration", d),
		slog.String("app", app),
		slog.String("request_id", x.req.ID),
		slog.String("client_ip", x.req.ClientIP.String()),
	)
}

func appLabel(m route.Match) string {
	switch m.Kind {
	case route.KindApp:
		return m.App.ID
	case route.KindAPI:
		return metrics.AppAPI
	}
	return metrics.AppUnknown
}

// maxRequestID bounds a client's X-Request-Id; a longer or odd one is
// replaced, so logs and hosts never carry an attacker's blob.
const maxRequestID = 128

// requestID keeps the client's X-Request-Id when it is sane (one value, 1
// to 128 printable ASCII bytes) and otherwise makes a new one.
// It reports whether the client's was kept.
func requestID(v []string) (string, bool) {
	if len(v) == 1 && saneID(v[0]) {
		return v[0], true
	}
	return rand.Text(), false
}

func saneID(s string) bool {
	if len(s) == 0 || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// peerAddr is the connecting address, or the zero Addr when RemoteAddr is
// not an ip:port (an in-memory listener).
func peerAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// recorder is the ResponseWriter the chain writes through: it records the
// status and byte count, stamps X-Gatehouse-Cluster and X-Request-Id on
// every response, and keeps what the real writer can do — Flush (Server-
// Sent Events), Hijack (WebSocket) and Unwrap for http.ResponseController.
type recorder struct {
	http.ResponseWriter
	cluster []string
	id      []string
	status  int // the final status (or 101), 0 until written
	bytes   int64
	wrote   bool
}

// WriteHeader records a final status and stamps the gateway's headers,
// unless the response already carries them (a peer cluster's answer keeps
// its own X-Gatehouse-Cluster).
func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		h := w.Header()
		if _, ok := h[headerCluster]; !ok {
			h[headerCluster] = w.cluster
		}
		if _, ok := h[headerRequestID]; !ok {
			h[headerRequestID] = w.id
		}
		if code >= 200 || code == http.StatusSwitchingProtocols {
			w.wrote, w.status = true, code
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// FlushError flushes buffered data to the client (http.ResponseController
// looks for it first).
func (w *recorder) FlushError() error {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher for code that type-asserts it.
func (w *recorder) Flush() { _ = w.FlushError() }

// Hijack hands the connection over (a WebSocket upgrade). The 101 is
// written by the hijacker itself, so it is recorded here.
func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && !w.wrote {
		w.wrote, w.status = true, http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ---- 3. route ----------------------------------------------------------

// route reads the Host against one table snapshot: an app goes on down
// the chain, api.{zone} to the API, anything else gets 404. A suspended
// or retired app answers 503 here, with no failover.
func (g *Gateway) route(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		rq.Table = g.live.Load()
		rq.Match = rq.Table.Lookup(r.Host)
		switch rq.Match.Kind {
		case route.KindApp:
			switch rq.Match.App.Status {
			case route.StatusSuspended:
				problem.Write(w, http.StatusServiceUnavailable, "this app is suspended")
			case route.StatusRetired:
				problem.Write(w, http.StatusServiceUnavailable, "this app is retired")
			default:
				next.ServeHTTP(w, r)
			}
		case route.KindAPI:
			if g.api == nil {
				problem.Write(w, http.StatusNotFound, "no API is served here")
				return
			}
			g.api.ServeHTTP(w, r)
		default:
			// Unknown hosts are limited per client address (limit.go)
			// before the 404, so name scans cost the scanner.
			if g.limitUnknown(w, r) {
				problem.Write(w, http.StatusNotFound, "no app is served at this host")
			}
		}
	})
}

// ---- 4. hygiene --------------------------------------------------------

// hygiene refuses requests whose framing could desync the gateway and the
// host (400, connection closed), strips every client X-Gatehouse-* header
// and, unless the peer is a trusted proxy, every Forwarded/X-Forwarded-*;
// then it sets X-Forwarded-For/Proto/Host and the request's client IP.
//
// net/http's server refuses most desync attempts itself before any
// handler runs (differing Content-Lengths and bad header bytes: 400;
// unknown transfer codings: 501; both Content-Length and chunked: it drops
// Content-Length and re-frames, so the host can never read the body
// differently). desync repeats those checks so the guarantee does not
// depend on which server feeds this handler. The two cases net/http lets
// through or answers otherwise (both framings: accepted; unknown coding:
// 501) are refused with 400 at the connection by [GuardListener].
func (g *Gateway) hygiene(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reason := desync(r); reason != "" {
			w.Header()["Connection"] = closeConn
			problem.Write(w, http.StatusBadRequest, reason)
			return
		}
		g.clean(r, route.RequestFrom(r.Context()))
		next.ServeHTTP(w, r)
	})
}

// desync names what is wrong with r's framing or header bytes, or "".
func desync(r *http.Request) string {
	if len(r.TransferEncoding) > 0 {
		if _, ok := r.Header["Content-Length"]; ok {
			return "both Content-Length and Transfer-Encoding"
		}
		if len(r.TransferEncoding) != 1 || !strings.EqualFold(r.TransferEncoding[0], "chunked") {
			return "unknown transfer coding"
		}
	}
	if _, ok := r.Header["Transfer-Encoding"]; ok {
		return "unexpected Transfer-Encoding" // net/http consumes it; seeing it means a desync
	}
	if len(r.Header["Content-Length"]) > 1 {
		return "differing Content-Length values"
	}
	for k, vs := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "invalid header name"
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return "invalid header value"
			}
		}
	}
	return ""
}

// clean strips what a client may not send and sets the forwarding headers.
func (g *Gateway) clean(r *http.Request, rq *route.Request) {
	peer := peerAddr(r.RemoteAddr)
	trusted := g.isTrusted(peer)
	h := r.Header
	var chain []string
	if trusted {
		chain = h["X-Forwarded-For"]
	}
	// A peer gateway's signed marks (X-Gatehouse-Forwarded and
	// X-Gatehouse-Client, DESIGN §5.3) are checked before the stripping
	// below removes them: verified, they name the client; otherwise the
	// request is an ordinary one from the connecting address.
	fwdIP, from, forwarded := g.verifyForward(r)
	if forwarded {
		rq.ForwardedBy = from
		chain = []string{fwdIP.String()}
	}
	for k := range h {
		if hasPrefixFold(k, "x-gatehouse-") ||
			(!trusted && (hasPrefixFold(k, "x-forwarded-") || strings.EqualFold(k, "forwarded"))) {
			delete(h, k)
		}
	}
	client := peer
	switch {
	case forwarded:
		client = fwdIP
	case trusted:
		client = g.clientFromChain(chain, peer)
	}
	rq.ClientIP = client
	if peer.IsValid() {
		p := peer.String()
		if len(chain) > 0 {
			p = strings.Join(chain, ", ") + ", " + p
		}
		h["X-Forwarded-For"] = []string{p}
	} else {
		delete(h, "X-Forwarded-For")
	}
	if _, ok := h["X-Forwarded-Proto"]; !ok { // a trusted proxy's value stands
		if r.TLS != nil {
			h["X-Forwarded-Proto"] = protoHTTPS
		} else {
			h["X-Forwarded-Proto"] = protoHTTP
		}
	}
	if _, ok := h["X-Forwarded-Host"]; !ok {
		h["X-Forwarded-Host"] = []string{r.Host}
	}
}

var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// clientIP is the client's address as observe records it, before
// hygiene runs: the peer, or behind a trusted proxy the rightmost
// untrusted X-Forwarded-For hop. Layers that answer early (the unknown-host
// limit, the access log) charge and name the right client with it.
func (g *Gateway) clientIP(r *http.Request) netip.Addr {
	peer := peerAddr(r.RemoteAddr)
	if len(g.trusted) == 0 || !g.isTrusted(peer) {
		return peer
	}
	return g.clientFromChain(r.Header["X-Forwarded-For"], peer)
}

func (g *Gateway) isTrusted(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range g.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientFromChain walks a trusted proxy's X-Forwarded-For from the right
// and returns the first hop that is not itself a trusted proxy. An
// unparsable hop ends the walk at the last good one: nothing left of it
// can be believed. If every hop is trusted, the leftmost is the client.
func (g *Gateway) clientFromChain(chain []string, peer netip.Addr) netip.Addr {
	last := peer
	for i := len(chain) - 1; i >= 0; i-- {
		hops := chain[i]
		for hops != "" {
			var hop string
			if j := strings.LastIndexByte(hops, ','); j >= 0 {
				hop, hops = hops[j+1:], hops[:j]
			} else {
				hop, hops = hops, ""
			}
			a, ok := parseHop(strings.TrimSpace(hop))
			if !ok {
				return last
			}
			if !g.isTrusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// parseHop reads one X-Forwarded-For entry: an address, optionally with a
// port (and brackets for IPv6).
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// hasPrefixFold reports whether header name k starts with prefix (lower
// case, '-' separated), ignoring case and reading '_' as '-': CGI-style
// hosts turn X_Gatehouse_App_Id into the same variable as
// X-Gatehouse-App-Id.
func hasPrefixFold(k, prefix string) bool {
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

// ---- 4b. hygiene at the connection: the HTTP/1 framing guard ----------
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
// Connection: close, after which the guard reads nothing more. Anything
// it does not fully understand (HTTP/2 prior knowledge, CONNECT, an
// Upgrade, an odd chunk line) ends its tracking and the bytes pass
// through untouched, to net/http's own checks.

// GuardListener wraps every connection l accepts with [GuardConn]. Use it
// on plaintext HTTP/1 listeners (http serve mode); a *tls.Conn must stay
// unwrapped for net/http to see TLS and negotiate HTTP/2.
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
// concurrently (net/http never does); Close may be.
func GuardConn(c net.Conn) net.Conn { return &guardConn{Conn: c} }

type guardConn struct {
	net.Conn
	f framer
}

func (c *guardConn) Read(p []byte) (int, error) { return c.f.read(c.Conn, p) }

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
	stDone                   // refused: nothing more is read
)

// maxGuardHead bounds a held-back head (8 KiB request line and 64 KiB of
// header fields, DESIGN §3, and slack): past it the head is released and
// net/http answers 431 itself. maxGuardLine bounds a chunk or trailer line.
const (
	maxGuardHead = 80 << 10
	maxGuardLine = 4 << 10
)

// refusal is the head handed to net/http in place of a refused one: a
// header name with a space, which net/http answers "400 Bad Request" with
// Connection: close.
var refusal = []byte("GET / HTTP/1.1\r\nHost: refused.invalid\r\nRefused Framing: 1\r\n\r\n")

// framer tracks HTTP/1 request framing over a byte stream. Only the
// reading goroutine touches it, except refused.
type framer struct {
	state   uint8
	n       int64  // bytes left of a body or chunk; CRLF bytes seen
	held    []byte // a head being held back, or the line being parsed
	out     []byte // bytes released and not yet read
	obuf    []byte // out's backing array, kept across refills
	buf     []byte // read buffer
	refused atomic.Bool
}

func (f *framer) read(src io.Reader, p []byte) (int, error) {
	for {
		if len(f.out) > 0 {
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		}
		switch f.state {
		case stPass:
			return src.Read(p)
		case stDone:
			return 0, io.EOF
		}
		if f.buf == nil {
			f.buf = make([]byte, 4<<10)
		}
		f.out = f.obuf[:0]
		n, err := src.Read(f.buf)
		f.feed(f.buf[:n])
		f.obuf = f.out[:0]
		if err != nil && len(f.out) == 0 {
			if err == io.EOF && f.state == stHead && len(f.held) > 0 {
				f.out, f.held = append(f.out, f.held...), f.held[:0] // a truncated head: net/http judges it
				continue
			}
			// Not sticky: net/http aborts a background read with a past
			// deadline and then reads on.
			return 0, err
		}
	}
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

// feedHead holds back bytes until a head is complete, then judges it. It
// returns what follows the head in b.
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
	}
	start := len(f.held)
	f.held = append(f.held, b...)
	end := headEnd(f.held, start)
	if end < 0 {
		if len(f.held) > maxGuardHead {
			f.out, f.held, f.state = append(f.out, f.held...), f.held[:0], stPass
		}
		return nil
	}
	rest := b[end-start:]
	next, n, refuse := inspectHead(f.held[:end])
	if refuse {
		f.out, f.state = append(f.out, refusal...), stDone
		f.refused.Store(true)
		f.held = nil
		return nil
	}
	f.out = append(f.out, f.held[:end]...)
	f.held, f.state, f.n = f.held[:0], next, n
	return rest
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
	size, _, _ := bytes.Cut(line[:len(line)-2], []byte(";"))
	n, ok := parseHex(size)
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
// state and body length, or that the head must be refused.
func inspectHead(head []byte) (next uint8, n int64, refuse bool) {
	line, rest := cutLine(head)
	sp1, sp2 := bytes.IndexByte(line, ' '), bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 == sp1 {
		return stPass, 0, false
	}
	var http11 bool
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
		http11 = true
	case "HTTP/1.0":
	default:
		return stPass, 0, false // HTTP/2 prior knowledge, or not HTTP
	}
	if string(line[:sp1]) == http.MethodConnect {
		return stPass, 0, false
	}
	var cl, te []byte
	var nCL, nTE int
	var upgrade bool
	for len(rest) > 0 {
		line, rest = cutLine(rest)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return stPass, 0, false // obs-fold: net/http's to refuse
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return stPass, 0, false
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if nCL > 0 && !bytes.Equal(value, cl) {
				return 0, 0, true // differing Content-Length values
			}
			cl, nCL = value, nCL+1
		case asciiEqualFold(name, "Transfer-Encoding"):
			te, nTE = value, nTE+1
		case asciiEqualFold(name, "Upgrade"):
			upgrade = true
		}
	}
	if nTE > 0 {
		// Both framings, a coding other than chunked alone, or chunked
		// on HTTP/1.0 (which net/http ignores while others may not).
		if nCL > 0 || nTE > 1 || !http11 || !asciiEqualFold(te, "chunked") {
			return 0, 0, true
		}
		if upgrade {
			return stPass, 0, false
		}
		return stChunkLine, 0, false
	}
	if upgrade {
		return stPass, 0, false // the stream may stop being HTTP
	}
	if nCL > 0 {
		v, ok := parseDecimal(cl)
		switch {
		case !ok:
			return 0, 0, true
		case v > 0:
			return stBody, v, false
		}
	}
	return stHead, 0, false
}

// cutLine splits off the first line of b, without its CRLF or LF.
func cutLine(b []byte) (line, rest []byte) {
	line, rest, _ = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest
}

func asciiEqualFold(b []byte, s string) bool {
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

// parseDecimal reads a Content-Length as net/http does: digits only, at
// most 18 of them.
func parseDecimal(b []byte) (int64, bool) {
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

// parseHex reads a chunk size as net/http does: 1 to 16 hex digits.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 { // 15: the size must fit an int64
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
