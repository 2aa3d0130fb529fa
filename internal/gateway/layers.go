package gateway

import (
	"bufio"
	"context"
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
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/gatehouse-dev/gatehouse/internal/cors"
	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/logcut"
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

// exchange is one request's observe state, in one allocation: its
// context (the parent's, carrying the route.Request the layers below
// fill), the writer that records what the client got, and room for the
// header values the layers set (so that setting them allocates nothing).
//
// Strings in its text arena are handed out as views of bytes written
// once, for header values only (the server clears its maps before it
// reads them again), so an exchange is reused only when nothing can hold
// it after the request (RequestDone): the server that made it is done
// with it, the proxy answered on the serving goroutine alone, and no
// panic cut the chain. Fresh, its kilobyte was most of what a proxied
// request allocated; reuse saves that memory, and a few per cent of the
// CPU at most (BENCHMARKS.md).
type exchange struct {
	route.RequestContext
	w    recorder
	cors corsWriter // the cors layer's writer (cors.go)
	peer netip.Addr // the connecting address, parsed once for observe and hygiene
	// appWait is how long the app's window has no room after this
	// request (the limit layer's Result.Reset; zero while it has some),
	// for a 429 over the token's rps to say which budget is back later.
	appWait time.Duration

	vals [10]string // backing for one-value header slices (value)
	nv   int
	text [256]byte // backing for header value bytes (scratch/str)
	nt   int

	held  bool // something may hold x after the request (hold)
	reuse bool // finish found nothing holding x: RequestDone may reuse it
}

// hold marks x as one that something may still use after the request,
// e.g. a forward's timer or transport: it is never reused. x may be nil.
func (x *exchange) hold() {
	if x != nil {
		x.held = true
	}
}

// exchangeKey finds the *exchange in a request's context.
type exchangeKey struct{}

// Value answers exchangeKey with x itself and everything else as the
// route.RequestContext does.
func (x *exchange) Value(key any) any {
	if key == (exchangeKey{}) {
		return x
	}
	return x.RequestContext.Value(key)
}

// exchangeFrom returns the request's exchange, or nil when observe did
// not run (a layer tested alone). The helpers below accept a nil one.
func exchangeFrom(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

// value returns s as a one-value header slice, from x's spare room when
// there is some.
func (x *exchange) value(s string) []string {
	if x == nil || x.nv == len(x.vals) {
		return []string{s}
	}
	i := x.nv
	x.nv++
	x.vals[i] = s
	return x.vals[i : i+1 : i+1]
}

// scratch returns an empty buffer over x's free text room, to append one
// value to and pass to str.
func (x *exchange) scratch() []byte {
	if x == nil {
		return make([]byte, 0, 64)
	}
	return x.text[x.nt:x.nt]
}

// str returns b as a string. When b is still the scratch buffer (the
// appends fit), the string is a view of x's text, which is then never
// written again; otherwise b is copied.
func (x *exchange) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if x != nil && x.nt < len(x.text) && &b[0] == &x.text[x.nt] {
		x.nt += len(b)
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// RequestContext returns the context for a request about to be served,
// made from parent (the connection's), for a server that gives a request
// its context as it makes the Request (lane.Options.RequestContext):
// observe then takes the exchange from it, instead of giving the request
// one in a copy of the Request. Each request needs a call of its own.
func (g *Gateway) RequestContext(parent context.Context) context.Context {
	x, _ := g.exchanges.Get().(*exchange)
	if x == nil {
		x = &exchange{}
	}
	x.Context = parent
	return x
}

// RequestDone takes back a context RequestContext made, from a server
// that no longer uses it or its request (lane.Options.RequestDone,
// h2.Options.RequestDone), and keeps it for a later request when nothing
// else can hold it (exchange). It reports whether that was so: then
// nothing the chain left behind can reach the request, its writer or its
// context either, and the server may reuse them too. Any other context
// is left alone (false).
func (g *Gateway) RequestDone(ctx context.Context) bool {
	x, ok := ctx.(*exchange)
	if !ok || !x.reuse {
		return false
	}
	*x = exchange{} // nor keep what it pointed to (a table, a connection)
	g.exchanges.Put(x)
	return true
}

// observe gives the request its id, its route.Request and a recording
// writer; after the rest of the chain it counts, logs, and turns a panic
// into a 500 problem (never a stack trace to the client).
func (g *Gateway) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The lane makes the exchange with the request (RequestContext);
		// from net/http's server the request gets one here, in a copy.
		x, made := r.Context().(*exchange)
		if !made || x.w.ResponseWriter != nil { // not made for this request, or in use
			x = &exchange{}
			x.Context = r.Context()
			made = false
		}
		x.Req.Start = g.now()
		if v := r.Header[headerRequestID]; len(v) == 1 && saneID(v[0]) {
			x.Req.ID = v[0]
		} else {
			// A string of its own, not a view of x's text: the id is
			// logged and read by the layers, and x may be reused.
			var b [26]byte
			x.Req.ID = string(appendRequestID(b[:0]))
			r.Header[headerRequestID] = x.value(x.Req.ID)
		}
		x.peer = peerAddr(r.RemoteAddr)
		x.Req.ClientIP = g.clientIP(x.peer, r)
		x.w = recorder{ResponseWriter: w, cluster: g.clusterHdr, id: r.Header[headerRequestID], noInterim: !r.ProtoAtLeast(1, 1)}
		if !made {
			r = r.WithContext(x)
		}
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
	panicked := v != nil
	if v != nil && v != http.ErrAbortHandler {
		g.log.LogAttrs(r.Context(), slog.LevelError, "gateway: panic serving request",
			slog.String("request_id", x.Req.ID), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
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
	if v == http.ErrAbortHandler && x.w.wrote && x.w.status != http.StatusSwitchingProtocols {
		// What was written goes out before the cut: a server drops what
		// its writer still buffers when a handler aborts, and a client
		// should see the body stop where the host's (or the owner
		// cluster's) did. ReverseProxy's forward to the owner aborts so.
		x.w.Flush()
	}
	g.record(x, r)
	// Reused only after an answer the proxy made on this goroutine alone,
	// with no panic: see exchange.
	x.reuse = !panicked && x.Req.Contained && !x.held
	if v != nil {
		panic(v)
	}
}

var closeConn = []string{"close"}

// record counts the request and writes its access log line. The log line
// is built only when the logger takes Info records: with the access log
// on but its level above Info, a request costs no log work at all.
func (g *Gateway) record(x *exchange, r *http.Request) {
	status := x.w.status
	if status == 0 {
		status = x.Req.Status // e.g. 499: the client left, nothing was written
		if status == 0 {
			status = http.StatusOK // net/http sends 200 for a handler that wrote nothing
		}
	}
	x.Req.Status = status
	app := appLabel(x.Req.Match)
	d := g.now().Sub(x.Req.Start)
	g.metrics.App(app).Request(status, r.Method, d)
	if !g.accessLog || !g.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	// Not a view of x's text: a log handler may keep a record past the
	// request, and x may be reused by then.
	client := "invalid IP" // what the zero netip.Addr's String says
	if x.Req.ClientIP.IsValid() {
		client = x.Req.ClientIP.String()
	}
	g.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", logcut.Method(r.Method)),
		slog.String("host", logcut.Host(r.Host)),
		slog.String("path", logcut.Path(r.URL.Path)),
		slog.Int("status", status),
		slog.Int64("bytes", x.w.bytes),
		slog.Duration("duration", d),
		slog.String("app", app),
		slog.String("request_id", x.Req.ID),
		slog.String("client_ip", client),
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

// Generated request ids are a per-process random prefix and a counter:
// unique across processes with overwhelming probability, unique within
// one, and built without a random read or an allocation per request. They
// are not secrets (a client sees its own).
var (
	idPrefix  = rand.Text()[:13] // 65 random bits in base32
	idCounter atomic.Uint64
)

// appendRequestID appends a new request id to b: 26 characters of the
// RFC 4648 base32 alphabet, as crypto/rand.Text writes.
func appendRequestID(b []byte) []byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b = append(b, idPrefix...)
	n := idCounter.Add(1)
	var d [13]byte // 13 × 5 bits ≥ 64
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = alphabet[n&31]
		n >>= 5
	}
	return append(b, d[:]...)
}

// saneID reports whether a client's X-Request-Id is kept: one value (the
// caller checks), 1 to 128 printable ASCII bytes. Otherwise observe makes
// a new one.
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
	return clientAddrOf(ap.Addr())
}

// clientAddrOf is a as the gateway names a client: IPv4 unmapped, and
// without an IPv6 zone, which names an interface of this machine (a
// link-local client's): it means nothing to a host or a peer cluster, a
// forward's signed mark cannot carry it, and a trusted prefix never
// contains a zoned address.
func clientAddrOf(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// peerOf returns the connecting address observe parsed, or r's when
// observe did not run (x nil: a layer tested alone).
func (x *exchange) peerOf(r *http.Request) netip.Addr {
	if x == nil {
		return peerAddr(r.RemoteAddr)
	}
	return x.peer
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
	interim bool                      // a 1xx was written
	rate    [len(rateFields)][]string // the limit layer's fields (rateAnswer), put back after a 1xx
	// noInterim drops 1xx responses (but 101): the client speaks
	// HTTP/1.0, which defined none, and a server must not send it one
	// (RFC 9110 §15.2). A host's 103 Early Hints, or its 100 Continue to
	// an Expect, would reach it through the proxy otherwise.
	noInterim bool
}

// WriteHeader records a final status and stamps the gateway's headers,
// unless the response already carries them (a peer cluster's answer keeps
// its own X-Gatehouse-Cluster).
//
// ReverseProxy (and the proxy's fast path, which mirrors it) clears the
// header map after writing a host's 1xx — 100 Continue to an upload with
// Expect: 100-continue, 103 Early Hints — which would take the limit
// layer's fields off the final response (DESIGN §2 step 6: every response
// carries them). The limit layer leaves its values in rate too, and after
// a 1xx they are put back on the final status: alone, or before the
// host's own entries of the RateLimit lists, as they stand without a 1xx.
// Not the ones a peer cluster's answer carries: those replace this
// gateway's (modifyPeerResponse, which drops them from rate). What the
// map held at the 1xx is not what is kept: the host's 1xx fields were
// appended to it.
//
// A host's 100 Continue is never relayed: the server under the gateway
// (net/http for HTTP/1.1, h2) answers the client's Expect: 100-continue
// itself when the body is first read, which the proxy does once the host
// has asked for it (its own 100, or the transport's wait running out). A
// host's 100 relayed as well would be a second one whenever the body was
// read first: a host slower than that wait, one that sends 100 unasked
// (h2 drops the client's Expect before the host). RFC 9110 §15.2 lets a
// proxy drop a 1xx its own request asked for, and this Expect is the
// proxy's: the client's was answered at the gateway. Other 1xx (103 Early
// Hints) pass.
func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		h := w.Header()
		if code < 200 && code != http.StatusSwitchingProtocols {
			w.interim = true
		} else if w.interim {
			for i, k := range rateFields {
				own := w.rate[i]
				if own == nil {
					continue
				}
				if v, ok := h[k]; ok {
					h[k] = append(own[:len(own):len(own)], v...)
				} else {
					h[k] = own
				}
			}
		}
		if _, ok := h[headerCluster]; !ok {
			h[headerCluster] = w.cluster
		}
		if _, ok := h[headerRequestID]; !ok {
			h[headerRequestID] = w.id
		}
		if code >= 200 || code == http.StatusSwitchingProtocols {
			w.wrote, w.status = true, code
		} else if w.noInterim || code == http.StatusContinue {
			return
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
// the chain, api.{zone} to the API, a Host whose port is not digits 400,
// anything else 404. A suspended
// or retired app answers 503 here, with no failover. A request to either
// whose target is "*" is answered here (asterisk).
//
// A passthrough app answers 421 Misdirected Request, before anything is
// sent anywhere: its host terminates TLS itself and the gateway never
// handles its plaintext (DESIGN §3). Such a request reaches this layer on
// a connection the gateway terminated for another name (an HTTP/2 or
// HTTP/1.1 client reusing a connection whose certificate also covers the
// app's name) or in plaintext; 421 is what tells a client to retry on a
// connection of its own, which the https listener then pipes by SNI.
func (g *Gateway) route(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		rq.Table = g.live.Load()
		rq.Match = rq.Table.Lookup(r.Host)
		switch rq.Match.Kind {
		case route.KindApp:
			if r.URL.Path == httpwire.ChallengePath {
				// Only a gateway sends a host challenge, to the host's
				// announced addr; one that arrives here reached a gateway
				// instead, and relayed to a host that signs it, it would
				// pin the host to this gateway: every request to it would
				// come back here (httpwire.ChallengeALPN).
				problem.Write(w, http.StatusLoopDetected, "a gateway never relays a host challenge: the host's announced addr reaches a gateway, not the host")
				return
			}
			switch rq.Match.App.Status {
			case route.StatusSuspended:
				if appClosedCORS(w, r, rq.Match.App.CORS) {
					problem.Write(w, http.StatusServiceUnavailable, "this app is suspended")
				}
			case route.StatusRetired:
				if appClosedCORS(w, r, rq.Match.App.CORS) {
					problem.Write(w, http.StatusServiceUnavailable, "this app is retired")
				}
			default:
				if rq.Match.App.Mode == route.ModePassthrough {
					problem.Write(w, http.StatusMisdirectedRequest, "this app is served only over TLS passthrough: connect with TLS and this name as SNI")
					return
				}
				if r.URL.Path == "*" {
					asterisk(w, r)
					return
				}
				next.ServeHTTP(w, r)
			}
		case route.KindAPI:
			if g.api == nil {
				problem.Write(w, http.StatusNotFound, "no API is served here")
				return
			}
			if r.URL.Path == "*" {
				asterisk(w, r)
				return
			}
			g.api.ServeHTTP(w, r)
		default:
			if route.BadPort(r.Host) {
				// A malformed Host, not a name this gateway does not
				// serve (RFC 9112 §3.2); the answer is the same whatever
				// the name, so it tells a scanner nothing.
				problem.Write(w, http.StatusBadRequest, "the Host's port is not a number")
				return
			}
			// Unknown hosts are limited per client address (limit.go)
			// before the 404, so name scans cost the scanner.
			if g.unknownAtOwner(w, r) {
				return // a peer's verified forward (affinity.go)
			}
			if g.limitUnknown(w, r) {
				problem.Write(w, http.StatusNotFound, "no app is served at this host")
			}
		}
	})
}

// appClosedCORS gives a suspended or retired app's 503 the CORS fields
// step 5 would: the answer comes before that step, and without them a
// page on an allowed origin reads a network error where the app's state
// is the answer (DESIGN §2 step 5: the gateway's own errors too). A
// preflight that step 5 would admit gets its 204 here, and then it
// reports false: a 503 to it, which a browser takes as a refusal, left
// the page a network error for every call that needs one (a PUT, a JSON
// body, an Authorization header), while the call it admits gets the 503,
// never reaching a host. Any other preflight gets the 503 the contract
// says (DESIGN §2 step 3): a browser refuses it as it would step 5's 403,
// and anyone else reads why.
func appClosedCORS(w http.ResponseWriter, r *http.Request, c route.CORS) bool {
	p := corsPolicy(c)
	if cors.IsPreflight(r) {
		h := make(http.Header)
		if p.Preflight(r, h) == http.StatusNoContent {
			wh := w.Header()
			for k, v := range h {
				wh[k] = append(wh[k], v...)
			}
			w.WriteHeader(http.StatusNoContent)
			return false
		}
	}
	p.Respond(requestOrigin(r), w.Header())
	return true
}

// asterisk answers a request to a known host whose target is "*", the
// asterisk form (RFC 9110 §7.1), which asks about the server and not a
// resource: "OPTIONS *" gets 200 with Allow and no body (RFC 9110
// §9.3.7), any other method 400 (only OPTIONS may use the form). The
// gateway answers as the server the client reached rather than
// forwarding: hosts behind a gateway are not asked in asterisk form and
// may not parse it, and path rules (policy, CORS) cannot reason about
// "*". The servers in front leave it to the chain
// (http.Server.DisableGeneralOptionsHandler), so that it is logged,
// counted and stamped as every answer is.
func asterisk(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodOptions {
		problem.Write(w, http.StatusBadRequest, "the request target * is for OPTIONS only")
		return
	}
	serverOptions(w)
}

// serverOptions is the gateway's answer, as a request's final recipient,
// to an OPTIONS about the server rather than a resource: "OPTIONS *"
// (asterisk) and an OPTIONS whose Max-Forwards is spent (maxForwards).
func serverOptions(w http.ResponseWriter) {
	h := w.Header()
	h["Allow"] = allowed // what the 405 to CONNECT names
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// ---- 4. hygiene --------------------------------------------------------

// hygiene refuses requests whose framing could desync the gateway and the
// host (400, connection closed), strips every client X-Gatehouse-* header
// and, unless the peer is a trusted proxy, every Forwarded/X-Forwarded-*;
// then it sets X-Forwarded-For/Proto/Host and the request's client IP.
// It refuses CONNECT and TRACE and methods no host may fold
// (methodRefusal), and spends a hop of an OPTIONS's Max-Forwards
// (maxForwards).
//
// net/http's server refuses most desync attempts itself before any
// handler runs (differing Content-Lengths and bad header bytes: 400;
// unknown transfer codings: 501; both Content-Length and chunked: it drops
// Content-Length and re-frames, so the host can never read the body
// differently). desync repeats those checks so the guarantee does not
// depend on which server feeds this handler. The two cases net/http lets
// through or answers otherwise (both framings: accepted; unknown coding:
// 501) are refused with 400 at the connection by [GuardListener]. The
// lane's parser takes only heads that pass them (its fuzz test holds it
// to that) and marks its requests (httpwire.Checked): those skip desync.
func (g *Gateway) hygiene(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if !httpwire.Checked(ctx) {
			if reason := desync(r); reason != "" {
				w.Header()["Connection"] = closeConn
				problem.Write(w, http.StatusBadRequest, reason)
				return
			}
		}
		if status, detail := methodRefusal(r.Method); status != 0 {
			if status == http.StatusBadRequest && r.ProtoMajor == 1 {
				// As after any malformed request line (nginx closes
				// too): a client that sends one may be probing how the
				// parsers on its path differ. An HTTP/2 stream's method
				// is one field of a well-framed block: the other
				// streams go on.
				w.Header()["Connection"] = closeConn
			}
			if status == http.StatusMethodNotAllowed {
				w.Header()["Allow"] = allowed
			}
			// A browser sends some of these: fetch() upper-cases only the
			// six methods of the Fetch standard, so {method: "patch"}
			// goes out as "patch", after a preflight the cors layer
			// admitted. This layer runs before that one, and without its
			// fields the page would read a network error, not the detail
			// that says what to change (as appClosedCORS's 503).
			appCORS(w, r, route.RequestFrom(ctx))
			problem.Write(w, status, detail)
			return
		}
		if r.Method == http.MethodConnect {
			// A reverse proxy has no tunnel to offer (ReverseProxy makes
			// none), and a host asked to open one would be asked by the
			// gateway's address: refused here, before anything is sent.
			w.Header()["Allow"] = allowed
			problem.Write(w, http.StatusMethodNotAllowed, "CONNECT is not served: the gateway is a reverse proxy")
			return
		}
		if r.Method == http.MethodOptions && !maxForwards(w, r) {
			return
		}
		if g.clean(r, route.RequestFrom(ctx), exchangeFrom(ctx)) && (g.tunnelIdle > 0 || g.conns != nil) {
			g.tunnel(next, w, r) // tunnel.go
			return
		}
		next.ServeHTTP(w, r)
	})
}

// appCORS gives an answer of step 4 to a request for an app the CORS
// fields step 5 would, as appClosedCORS does step 3's 503: a page on an
// allowed origin then reads it rather than a network error.
func appCORS(w http.ResponseWriter, r *http.Request, rq *route.Request) {
	if rq != nil && rq.Match.App != nil {
		corsPolicy(rq.Match.App.CORS).Respond(requestOrigin(r), w.Header())
	}
}

// maxForwards checks and updates the Max-Forwards of an OPTIONS r that
// is to be forwarded, as every intermediary must (RFC 9110 §7.6.2), and
// reports whether r goes on. At 0 the gateway may not forward it and
// answers as its final recipient, as it answers "OPTIONS *"
// (serverOptions); any other value goes on one less, so the host sees
// N-1 (and a peer gateway that r is forwarded to, an intermediary too,
// takes one more). A value that is not a decimal, or fields that
// disagree, get 400: the gateway cannot tell how many hops the client
// meant, and passed on as sent, each recipient behind would read a number
// of its own.
//
// Only requests for an app are forwarded: the API is the gateway's own
// and is their final recipient whatever the field says. A CORS preflight
// is not forwarded either: step 5 answers every one itself, so one
// with Max-Forwards 0 is still a preflight and gets its 204 or 403, where
// serverOptions's 200, with no Access-Control-Allow-* field, would fail
// it. Both reach this layer's next with the field as sent.
//
// Answered here, before steps 6 to 8, the 0 answer costs no rate limit
// and needs no token: it says only what "OPTIONS *" says (the same Allow
// for every app and path), answered before them too.
func maxForwards(w http.ResponseWriter, r *http.Request) bool {
	vs, ok := r.Header["Max-Forwards"]
	if !ok {
		return true
	}
	rq := route.RequestFrom(r.Context())
	if rq == nil || rq.Match.Kind != route.KindApp || cors.IsPreflight(r) {
		return true
	}
	n, ok := oneDecimal(vs)
	switch {
	case !ok:
		appCORS(w, r, rq)
		problem.Write(w, http.StatusBadRequest, "Max-Forwards is not one decimal number")
		return false
	case n == "0":
		appCORS(w, r, rq)
		serverOptions(w)
		return false
	}
	r.Header["Max-Forwards"] = []string{decremented(n)}
	return true
}

// oneDecimal returns the number the fields vs say, in decimal without
// leading zeros, and whether they say one: each is 1*DIGIT (RFC 9110
// §7.6.2), of any length (no bound of a number type makes a value
// invalid), and all are the same number. The field is no list, so
// "1, 1" is not a number.
func oneDecimal(vs []string) (n string, ok bool) {
	for i, v := range vs {
		if v == "" {
			return "", false
		}
		for j := 0; j < len(v); j++ {
			if v[j] < '0' || v[j] > '9' {
				return "", false
			}
		}
		v = strings.TrimLeft(v, "0")
		if v == "" {
			v = "0"
		}
		if i > 0 && v != n {
			return "", false
		}
		n = v
	}
	return n, true
}

// decremented is n-1, for n a decimal without leading zeros above 0.
func decremented(n string) string {
	b := []byte(n)
	i := len(b) - 1
	for b[i] == '0' {
		b[i] = '9'
		i--
	}
	b[i]--
	if b[0] == '0' && len(b) > 1 {
		b = b[1:]
	}
	return string(b)
}

// maxMethod bounds a request's method. The longest methods IANA registers
// (UPDATEREDIRECTREF, 17 bytes; BASELINE-CONTROL, VERSION-CONTROL) fit
// with room for extension methods, and the access log never cuts one
// (logcut.MaxMethod). Unbounded, a method could fill the request line (8
// KiB): net/http takes any token, and passed 5,000 bytes of one to hosts
// whose parsers bound it far lower (nginx refuses such a line).
const maxMethod = 32

// methodRefusal returns the status and detail of the answer to a request
// with method m, or 0 when m goes on down the chain.
//
// A method is a case-sensitive token (RFC 9110 §9.1), and every method a
// layer here keys on is upper case: the CORS preflight (OPTIONS), the
// replayable methods of failover, the proxy's fast path, the metrics'
// labels. A host framework that folds case (Express routes by
// req.method.toLowerCase()) would serve "get" as GET, and answer an
// "options" preflight that the CORS layer, reading no OPTIONS, let
// through past its allow-list; so a method with a lower-case letter is
// refused (400), as is one over maxMethod. The policy folds case in its
// rules (policy.Rule), which stays consistent: the methods that reach it
// are all upper case.
//
// TRACE asks the last recipient to echo the request as it received it:
// a host's echo would show the client the fields the gateway adds
// (X-Gatehouse-* context, forwarded identity, verified token claims) and
// any cookie a script cannot read (cross-site tracing). The answer is
// 405 with the Allow that CONNECT's gets (the standard methods: the
// extension methods an app serves pass too, but only the app could name
// them), as nginx answers TRACE, not 501 (RFC 9110 §15.6.2, "not supported
// for any resource"), which would be as true: a 5xx counts against the
// app's error rate, and every scanner that probes for TRACE would page
// an operator who alerts on it. Max-Forwards, which only TRACE and
// OPTIONS heed (RFC 9110 §7.6.2), changes nothing for TRACE: whatever its
// value the request is answered here, as its final recipient, and is
// never forwarded. An OPTIONS's is checked and updated once the method
// passes (maxForwards).
func methodRefusal(m string) (status int, detail string) {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return 0, "" // the common case, at the cost of a compare
	case http.MethodTrace:
		return http.StatusMethodNotAllowed, "TRACE is not served: a host's echo of the request would show the fields the gateway adds to it"
	}
	if len(m) > maxMethod {
		return http.StatusBadRequest, "the method is longer than 32 bytes"
	}
	if m == "" {
		return http.StatusBadRequest, "the method is not an upper-case token"
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; 'a' <= c && c <= 'z' || !tokenByte(c) {
			return http.StatusBadRequest, "the method is not an upper-case token"
		}
	}
	return 0, ""
}

// allowed is the Allow field of the 405 to CONNECT and of the answer to
// "OPTIONS *" (asterisk).
var allowed = []string{"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"}

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
			if !httpwire.ValidValue(v) {
				return "invalid header value"
			}
		}
	}
	return ""
}

// clean strips what a client may not send and sets the forwarding headers.
// x, when not nil, holds the values it sets. It reports whether r asks to
// switch protocols (a WebSocket upgrade), by the test ReverseProxy uses to
// tunnel one: clean has the Upgrade field in hand already.
func (g *Gateway) clean(r *http.Request, rq *route.Request, x *exchange) (upgrade bool) {
	peer := x.peerOf(r)
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
	var proto []string
	if forwarded {
		rq.ForwardedBy = from
		chain = []string{fwdIP.String()}
		// The forwarding gateway says how the client reached it: the
		// hop between gateways is not the client's scheme.
		proto = peerProto(h["X-Forwarded-Proto"])
	}
	for k := range h {
		// From a trusted proxy the fields stand, but not spelled with '_':
		// the proxy sets X-Forwarded-For, and a client's X_Forwarded_For
		// beside it reads as the same variable to a CGI-style host.
		if httpwire.HasFieldPrefix(k, "x-gatehouse-") || (clientAddressField(k) && (!trusted || strings.IndexByte(k, '_') >= 0)) {
			delete(h, k)
		}
	}
	up, upgrade := h["Upgrade"]
	if upgrade && httpguts.HeaderValuesContainsToken(up, "h2c") {
		upgrade = false
		// An HTTP/2 cleartext upgrade would turn the connection to the
		// host into HTTP/2 streams the gateway only copies: every request
		// after it would skip the layers below (h2c smuggling). The
		// request goes on as plain HTTP/1.1; a client (curl --http2 on
		// an http URL) takes the HTTP/1.1 answer.
		delete(h, "Upgrade")
	}
	// The h2c upgrade's settings belong to the client's connection (RFC
	// 7540 §3.2.1), with or without Connection naming them.
	delete(h, "Http2-Settings")
	if r.Trailer != nil {
		stripTrailers(r)
	}
	if !r.ProtoAtLeast(1, 1) {
		// An HTTP/1.0 client's Expect: 100-continue is to be ignored
		// (RFC 9110 §10.1.1; net/http answers any other expectation 417
		// itself): passed on, it would have the host answer a 100, and
		// the proxy wait for that 100 before sending the body.
		delete(h, "Expect")
	}
	if proto != nil {
		h["X-Forwarded-Proto"] = proto
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
		b := x.scratch()
		for _, hop := range chain {
			b = append(append(b, hop...), ", "...)
		}
		h["X-Forwarded-For"] = x.value(x.str(peer.AppendTo(b)))
	} else {
		delete(h, "X-Forwarded-For")
	}
	if trusted && peer.IsValid() {
		// A trusted proxy's RFC 7239 chain goes on, as its X-Forwarded-For
		// does, with the proxy itself as the last hop. The gateway adds
		// none of its own (DESIGN §2 sets the X-Forwarded-* fields).
		if fv, ok := h["Forwarded"]; ok {
			h["Forwarded"] = []string{strings.Join(fv, ", ") + ", for=" + forwardedNode(peer)}
		}
	}
	if _, ok := h["X-Forwarded-Proto"]; !ok { // a trusted proxy's value stands
		if r.TLS != nil {
			h["X-Forwarded-Proto"] = protoHTTPS
		} else {
			h["X-Forwarded-Proto"] = protoHTTP
		}
	}
	if _, ok := h["X-Forwarded-Host"]; !ok {
		h["X-Forwarded-Host"] = x.value(r.Host)
	}
	return upgrade && httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}

// forwardedNode is addr as an RFC 7239 node: an IPv6 address bracketed
// and quoted (its colons are not token characters).
func forwardedNode(addr netip.Addr) string {
	if addr.Is4() || addr.Is4In6() {
		return addr.Unmap().String()
	}
	return `"[` + addr.String() + `]"`
}

// stripTrailers keeps forged fields out of r's trailers too. A client
// that declares trailers gets r.Trailer, which net/http fills with every
// trailer field it sends once the body has been read, and the proxy
// passes that map on to the host: the declared names are dropped now, the
// sent ones at the body's end, before the proxy writes them upstream.
func stripTrailers(r *http.Request) {
	dropForged(r.Trailer)
	r.Body = &trailerGuard{ReadCloser: r.Body, trailer: r.Trailer}
}

// dropForged removes from trailer fields what a client may not say there:
// X-Gatehouse-*, any field naming the client's address (a trailer is
// never a trusted proxy's own field, and a host that merges trailers
// into its headers would read it as the client), Authorization, which
// the edge checks only in the header, the method and path overrides
// the policy layer checks only there (policy.go), and what RFC 9110
// §6.5.1 keeps out of trailers (framing, connection, routing, content
// format: httpguts's list, which the proxy applies to a host's response
// trailers too): a host that merges trailers would take a Host the route
// layer never saw, or a framing its parser never used.
func dropForged(h http.Header) {
	for k := range h {
		if httpwire.HasFieldPrefix(k, "x-gatehouse-") || clientAddressField(k) || strings.EqualFold(k, "authorization") ||
			overrideField(k, methodOverrides) || overrideField(k, pathOverrides) || !httpguts.ValidTrailerHeader(k) {
			delete(h, k)
		}
	}
}

// trailerGuard is a request body that drops forged trailer fields when it
// reaches its end, which is when net/http has just set them.
type trailerGuard struct {
	io.ReadCloser
	trailer http.Header
}

func (b *trailerGuard) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		dropForged(b.trailer)
	}
	return n, err
}

var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// peerProto is the X-Forwarded-Proto of a verified forward when it is one
// this gateway would set itself, else nil.
func peerProto(v []string) []string {
	if len(v) == 1 {
		switch v[0] {
		case "http":
			return protoHTTP
		case "https":
			return protoHTTPS
		}
	}
	return nil
}

// clientIP is the client's address as observe records it, before
// hygiene runs: the peer, or behind a trusted proxy the rightmost
// untrusted X-Forwarded-For hop. Layers that answer early (the unknown-host
// limit, the access log) charge and name the right client with it.
func (g *Gateway) clientIP(peer netip.Addr, r *http.Request) netip.Addr {
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
// port (and brackets for IPv6), or an IPv6 address in brackets alone, as
// some proxies write it (RFC 7239's node form without a port).
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return clientAddrOf(a), true
	}
	if inner, ok := strings.CutPrefix(s, "["); ok && strings.HasSuffix(inner, "]") {
		if a, err := netip.ParseAddr(inner[:len(inner)-1]); err == nil && a.Is6() {
			return clientAddrOf(a), true
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return clientAddrOf(ap.Addr()), true
	}
	return netip.Addr{}, false
}

// clientAddressField reports whether header name k is one a proxy sets
// to name the client: Forwarded and X-Forwarded-* (DESIGN §2), and the
// others host frameworks and libraries read as the client's address
// before X-Forwarded-For: X-Real-Ip, True-Client-Ip (chi's RealIP),
// X-Client-Ip and X-Cluster-Client-Ip (npm request-ip), Client-Ip
// (Rails' remote_ip, PHP's HTTP_CLIENT_IP), Cf-Connecting-Ip and
// Fastly-Client-Ip (CDN-aware middleware). From a peer that is not a
// trusted proxy each is a forgery.
func clientAddressField(k string) bool {
	var named bool
	switch len(k) {
	case len("forwarded"): // x-real-ip, client-ip
		named = strings.EqualFold(k, "forwarded") || httpwire.HasFieldPrefix(k, "x-real-ip") || httpwire.HasFieldPrefix(k, "client-ip")
	case len("x-client-ip"):
		named = httpwire.HasFieldPrefix(k, "x-client-ip")
	case len("true-client-ip"):
		named = httpwire.HasFieldPrefix(k, "true-client-ip")
	case len("cf-connecting-ip"): // fastly-client-ip, and x-forwarded-host below
		named = httpwire.HasFieldPrefix(k, "cf-connecting-ip") || httpwire.HasFieldPrefix(k, "fastly-client-ip")
	case len("x-cluster-client-ip"):
		named = httpwire.HasFieldPrefix(k, "x-cluster-client-ip")
	}
	return named || httpwire.HasFieldPrefix(k, "x-forwarded-")
}
