package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/metrics"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// Header names the proxy sets. The context headers go to hosts and are
// never taken from a client (hygiene strips the client's copies).
const (
	HeaderAppID     = "X-Gatehouse-App-Id"
	HeaderClientIP  = "X-Gatehouse-Client-Ip"
	HeaderCluster   = "X-Gatehouse-Cluster"
	HeaderRequestID = "X-Gatehouse-Request-Id"
	HeaderSubject   = "X-Gatehouse-Subject"
	HeaderIssuer    = "X-Gatehouse-Issuer"
	HeaderScopes    = "X-Gatehouse-Scopes"
	// HeaderFailover is set by the cluster layer on a response a peer
	// cluster served; a host's own copy is removed, as are its
	// X-Gatehouse-* (gatewayField).
	HeaderFailover = "X-Failover-Cluster"
)

// gatewayField reports whether a host's response field k is one the
// gateway sets on responses itself, which a host may not send in its name
// (DESIGN §2 step 10): X-Gatehouse-* (X-Gatehouse-Cluster, a forward's
// X-Gatehouse-No-Host, and the context names the gateway owns), in any
// case and with _ for -, as hygiene reads them from clients, and
// X-Failover-Cluster. A host's X-Gatehouse-No-Host reached the client of
// the owner's gateway as if that gateway had said it, while a forward
// dropped it. It runs on every field of every response: no allocation,
// and most names differ at the first byte.
func gatewayField(k string) bool {
	const failover = "x-failover-cluster"
	return httpwire.HasFieldPrefix(k, "x-gatehouse-") || len(k) == len(failover) && httpwire.HasFieldPrefix(k, failover)
}

// dropGatewayFields removes from h a host's fields gatewayField names.
func dropGatewayFields(h http.Header) {
	for k := range h {
		if gatewayField(k) {
			delete(h, k)
		}
	}
}

// Proxy dispatches a routed request to one of its app's hosts. It is an
// http.Handler meant to sit at the end of the gateway's layers: it needs
// the [route.Request] they put in the context. Safe for concurrent use.
type Proxy struct {
	opts       Options
	rp         *httputil.ReverseProxy
	tr         *transport
	fast       *fastPool // nil: Options.DisableFastPath
	robins     robins
	fails      failLog
	clusterHdr []string // shared, never modified: the X-Gatehouse-Cluster value
	closed     atomic.Bool
	// attempts holds attempts done on the fast path alone, for reuse:
	// nothing holds one after ServeHTTP then (route.Request.Contained).
	attempts sync.Pool
}

var _ http.Handler = (*Proxy)(nil)

// New validates opts and builds a proxy. It starts nothing: upstream
// connections are opened on demand and pooled.
func New(opts Options) (*Proxy, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	p := &Proxy{opts: opts, tr: newTransport(&opts)}
	if !opts.DisableFastPath {
		p.fast = &fastPool{dial: p.tr.dial, now: opts.Now, max: opts.MaxIdleConnsPerHost, idleFor: opts.IdleConnTimeout}
	}
	if opts.ClusterID != "" {
		p.clusterHdr = []string{opts.ClusterID}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.tr,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		// Zero: responses of known length are not flushed mid-way, while
		// ReverseProxy flushes after every write any response it sees as
		// a stream — Content-Type text/event-stream (Server-Sent Events
		// reach the client at once) or unknown length (gRPC, chunked).
		FlushInterval: 0,
	}
	return p, nil
}

// Close drops the pooled idle upstream connections and closes every h2c
// one, idle or not, after which no h2c host is dialled: call it once
// nothing is served any more (the gateway's, when its edge has drained:
// a request still in flight then is one whose client the drain cut).
// net/http's HTTP/2 pool gives no other way to close a connection whose
// last stream ends after Close. An HTTP/1.1 request in flight is not
// cut. Idempotent.
func (p *Proxy) Close() error {
	if p.closed.CompareAndSwap(false, true) {
		p.tr.closeAll()
		if p.fast != nil {
			p.fast.closeIdle(true)
		}
	}
	return nil
}

// attempt is one request's dispatch state, carried in the upstream
// request's context so that Rewrite, the transport, ModifyResponse and
// ErrorHandler see the host ServeHTTP chose.
type attempt struct {
	// The attempt is the upstream request's context: its parent's values
	// and cancellation, plus attemptKey -> itself (one allocation, not
	// an attempt and a context value).
	context.Context
	req  *route.Request
	app  string
	host *route.Host
	body *trackedBody // nil when the request has no body
	// failed is set by errorHandler when it left the answer to ServeHTTP:
	// a connect failure before any byte was sent.
	failed error
	// picked is Options.Now when the first host was picked: the fast
	// path takes its first connection at that time too (a clock read
	// costs ~50 ns on the benchmark machine, and a request reads the
	// clock a dozen times).
	picked time.Time

	// The context header values rewrite sets, filled once by ServeHTTP
	// (app id, client address, request id), so that setting them on each
	// try allocates nothing: one-value slices over vals; ip holds the
	// client address's text, never rewritten while a header refers to it.
	vals [3]string
	ip   [48]byte

	// interim is the writer ReverseProxy answers through (in the
	// attempt, so it costs no allocation of its own).
	interim interimGuard
	// fields is what the h1 transport's connection noted of the
	// response heads (connfields.go); nil on the fast path and for h2c.
	fields *connFields
}

type attemptKey struct{}

// interimGuard removes a host's X-Gatehouse-* and X-Failover-Cluster
// (gatewayField) from a 1xx response, and its values of the fields the handler in front
// sets itself (own, Options.OwnFields). ReverseProxy copies a 1xx's fields
// as they came, past modifyResponse, which does the same for the final
// answer; the fast path drops them from both. Unwrap keeps Flush and
// Hijack reachable for http.ResponseController.
//
// It also counts them: net/http's client stops counting a host's 1xx once
// a trace (ReverseProxy's) takes them, so past max1xx they go no further,
// and modifyResponse answers 502 instead of the final answer, as the fast
// path does (the host could otherwise send them until the head's timeout).
type interimGuard struct {
	http.ResponseWriter
	own  []string
	n1xx int
}

// max1xx is how many 1xx a host may send before its answer (what
// net/http's client allowed before it left the count to a trace).
const max1xx = 5

func (w *interimGuard) WriteHeader(code int) {
	h := w.Header()
	switch {
	case code < 200 && code != http.StatusSwitchingProtocols:
		if w.n1xx++; w.n1xx > max1xx {
			clear(h) // as ReverseProxy does after one it passes on
			return
		}
		dropGatewayFields(h)
		// ReverseProxy removes the hop-by-hop fields from the final
		// answer only: a 1xx's are the host's connection's (RFC 9110
		// §7.6.1), as the fast path treats them, and over HTTP/2 a TE or
		// an Upgrade makes the response malformed. (net/http's client
		// drops a Connection that says close: bound1xx removed the names
		// it listed.)
		dropHopByHop(h, false)
		// ReverseProxy appended the host's 1xx fields to the handler's
		// own one value of each: the first is the handler's. Kept, the
		// host's would go out on the 1xx and, with the fields a handler
		// keeps over a 1xx (the gateway's recorder), on the final answer.
		for _, k := range w.own {
			if v := h[k]; len(v) > 1 {
				h[k] = v[:1]
			}
		}
	case code >= 200:
		untyped(h)
	}
	w.ResponseWriter.WriteHeader(code)
}

// untyped keeps a response the host sent without Content-Type without
// one: the servers under the gateway (net/http, the lane, h2) would
// otherwise sniff a type from the body, as for a handler's own answer. A
// proxy declaring text/html for a body its host left untyped (an upload
// served with nosniff, say) makes stored XSS of it; nginx, HAProxy and
// Envoy add none. A nil value is net/http's way to say "no type".
func untyped(h http.Header) {
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
}

// hopByHop are the fields ReverseProxy removes from an answer as
// hop-by-hop (RFC 9110 §7.6.1), in canonical form.
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// dropHopByHop removes a host's hop-by-hop fields from h (RFC 9110
// §7.6.1): the ones its Connection names, and hopByHop. With upgrade (a
// 101) it keeps what the tunnel starts with: Upgrade, and Connection
// naming it alone when it named it (ReverseProxy refuses a 101 whose
// Connection does not).
func dropHopByHop(h http.Header, upgrade bool) {
	named := false
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			switch tok = textproto.TrimString(tok); {
			case tok == "":
			case upgrade && strings.EqualFold(tok, "upgrade"):
				named = true
			default:
				delete(h, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
	for _, k := range hopByHop {
		if !upgrade || k != "Upgrade" {
			delete(h, k)
		}
	}
	if named {
		h["Connection"] = []string{"Upgrade"}
	}
}

func (w *interimGuard) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// request returns r with a as its context (and a's tracked body), as
// ReverseProxy and the error handler see it.
func (a *attempt) request(r *http.Request) *http.Request {
	in := r.WithContext(a)
	if a.body != nil {
		in.Body = a.body
	}
	return in
}

// Value answers attemptKey with a itself and everything else from the
// request's context.
func (a *attempt) Value(key any) any {
	if key == (attemptKey{}) {
		return a
	}
	return a.Context.Value(key)
}

func attemptFrom(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// maxTries bounds the hosts one request is offered to when each refuses
// the connection.
const maxTries = 3

// ServeHTTP picks a host and proxies r to it; on a connect failure it
// tries the next host not yet tried (up to maxTries hosts, within
// DialTimeout of the first), then the fallback, then answers 502.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rq := route.RequestFrom(r.Context())
	if rq == nil || rq.Table == nil || rq.Match.Kind != route.KindApp || rq.Match.App == nil {
		p.answer(w, rq, metrics.AppNone, nil, errNotApp)
		return
	}
	app := rq.Match.App.ID
	pool := rq.Table.Pool(app)
	start := p.robins.next(app)
	now := p.opts.Now()
	h := pick(pool, start, now, nil)
	if h == nil {
		err := ErrNoRoutableHost
		if !rq.Table.HasHosts(app) {
			err = ErrNoHost
		}
		p.opts.Metrics.UpstreamErrors.WithLabelValues(app, metrics.ReasonNoHost).Inc()
		p.fallbackOr(w, r, rq, app, err)
		return
	}
	a, _ := p.attempts.Get().(*attempt)
	if a == nil {
		a = new(attempt)
	}
	a.Context, a.req, a.app, a.picked = r.Context(), rq, app, now
	a.vals[0] = app
	if rq.ClientIP.IsValid() {
		b := rq.ClientIP.AppendTo(a.ip[:0])
		a.vals[1] = unsafe.String(&b[0], len(b)) // b is a.ip unless an address outgrew it; written once
	}
	a.vals[2] = rq.ID
	if r.Body != nil && r.Body != http.NoBody {
		a.body = &trackedBody{ReadCloser: r.Body}
		if r.ProtoMajor == 1 && r.ContentLength != 0 {
			// The transport sends the upload on as the host's answer
			// comes. An HTTP/1 server otherwise reads what is left of
			// it as the answer's head goes out and drops it (net/http's
			// up to 256 KiB, the lane's too): the host got a body of
			// known length cut short, and a chunked one (sent on
			// chunked) with 256 KiB missing from its middle, well
			// framed, as if whole. That read also ran under the
			// deadline the last read of the body armed, long passed if
			// the host had paused the upload, and its failure cancelled
			// the request: a head and a cut answer for a client that
			// sent its whole upload at once. The servers read and drop
			// the rest as the handler returns instead (the edge's
			// stallBodies, the lane).
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
	}
	var in *http.Request // r with the attempt as its context, for ReverseProxy: built when first needed
	var tried [maxTries]*route.Host
	for try := 0; ; try++ {
		a.host, a.failed = h, nil
		if p.fast != nil && fastOK(r, h) {
			p.try(w, r, a, nil)
		} else {
			if in == nil {
				in = a.request(r)
			}
			p.try(w, r, a, in)
		}
		if a.failed == nil {
			// Answered: the host's response or a problem. ReverseProxy's
			// transport may run on after it; the fast path leaves nothing.
			if in == nil {
				rq.Contained = true
				*a = attempt{}
				p.attempts.Put(a)
			}
			return
		}
		// Nothing was sent to h and nothing written to w: the next host
		// may take the request, whatever its method. h now cools down, so
		// a host that is up comes before the others that failed; each
		// host is offered the request once. (With only the next host
		// tried, two dead hosts met in a row answered 502 while a third
		// was up; nginx's proxy_next_upstream moves on to it.)
		// A connect that timed out (a host powered off) spent the
		// request's connect budget: no further host is dialed after
		// DialTimeout, or a pool of such hosts would cost one timeout
		// each and leave failover no time.
		tried[try] = h
		if now := p.opts.Now(); try+1 < maxTries && now.Sub(a.picked) < p.opts.DialTimeout {
			if next := pick(pool, start+uint32(try)+1, now, tried[:try+1]); next != nil {
				h = next
				continue
			}
		}
		p.fallbackOr(w, r, rq, app, fmt.Errorf("%w: %w", ErrUnreachable, a.failed))
		return
	}
}

// try is one attempt at a.host: the fast path, or ReverseProxy with in.
func (p *Proxy) try(w http.ResponseWriter, r *http.Request, a *attempt, in *http.Request) {
	if in == nil {
		p.serveFast(w, r, a)
		return
	}
	a.interim = interimGuard{ResponseWriter: w, own: p.opts.OwnFields}
	p.rp.ServeHTTP(&a.interim, in)
}

// fallbackOr lets Options.Fallback answer a request the local hosts cannot
// serve, or answers it with the status err maps to.
func (p *Proxy) fallbackOr(w http.ResponseWriter, r *http.Request, rq *route.Request, app string, err error) {
	if p.opts.Fallback != nil && p.opts.Fallback(w, r, err) {
		return
	}
	p.answer(w, rq, app, nil, err)
}

// answer writes the problem for err, or nothing when the client is gone.
func (p *Proxy) answer(w http.ResponseWriter, rq *route.Request, app string, h *route.Host, err error) {
	status := statusFor(err)
	attrs := []slog.Attr{slog.String("app", app), slog.Int("status", status), slog.String("error", err.Error())}
	if h != nil {
		attrs = append(attrs, slog.String("host_id", h.ID))
	}
	if rq != nil {
		attrs = append(attrs, slog.String("request_id", rq.ID))
	}
	if status == StatusClientClosed {
		if rq != nil {
			rq.Status = status // for the access log; never sent
		}
		p.opts.Logger.LogAttrs(context.Background(), slog.LevelDebug, "proxy: client went away", attrs...)
		return
	}
	if ok, skipped := p.fails.allow(failKey{app, status}, p.opts.Now()); ok {
		attrs = append(attrs, slog.Int("not_logged", skipped), slog.Duration("every", failLogEvery))
		p.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn, "proxy: upstream failed", attrs...)
	}
	if p.clusterHdr != nil {
		w.Header()[HeaderCluster] = p.clusterHdr
	}
	problem.Write(w, status, detailFor(status, err))
}

// rewrite builds the upstream request (STYLE §3.1): the chosen host, the
// client's own Host, the X-Forwarded-* hygiene computed, and the
// authoritative context headers.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	a := attemptFrom(pr.In.Context())
	pr.SetURL(a.host.URL)
	if pr.Out.URL.Scheme == "h2c" {
		pr.Out.URL.Scheme = "http" // the h2c transport speaks HTTP/2 over plain TCP
	}
	pr.Out.Host = pr.In.Host // the app sees its own Host
	// Request trailers: share the incoming map, whose values net/http
	// fills only once the body is read; Clone's copy would stay empty.
	// An HTTP/2 request may have a content-length and trailers too; over
	// HTTP/1.1 only a chunked body carries trailers, and with the length
	// kept net/http's transport sends the body unchunked and drops them.
	// An h2c host gets both, as HTTP/2 carries them: its length is not
	// dropped for nothing.
	if pr.In.Trailer != nil {
		pr.Out.Trailer = pr.In.Trailer
		if !isH2C(a.host) { // the transport's choice (transport.RoundTrip)
			pr.Out.ContentLength = -1
		}
	}
	in, out := pr.In.Header, pr.Out.Header
	// ReverseProxy removed these from Out; hygiene already computed them
	// on In (appending to a trusted proxy's chain, and removing a
	// client's Forwarded), so they are copied, never appended to a second
	// time. X-Request-Id is the gateway's too (observe's request id,
	// DESIGN §2 step 2), which ReverseProxy removes when a client's
	// Connection names it: a client's hop-by-hop list drops only fields
	// of its own, never one the gateway sets.
	for _, k := range [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Request-Id"} {
		if v := in[k]; len(v) > 0 {
			out[k] = v
		}
	}
	rq := a.req
	out[HeaderAppID] = a.vals[0:1:1]
	if rq.ClientIP.IsValid() {
		out[HeaderClientIP] = a.vals[1:2:2]
	}
	if p.clusterHdr != nil {
		out[HeaderCluster] = p.clusterHdr
	}
	if rq.ID != "" {
		out[HeaderRequestID] = a.vals[2:3:3]
	}
	if rq.Subject != "" {
		out[HeaderSubject] = []string{rq.Subject}
	}
	if rq.Issuer != "" {
		out[HeaderIssuer] = []string{rq.Issuer}
	}
	if len(rq.Scopes) > 0 {
		out[HeaderScopes] = []string{strings.Join(rq.Scopes, " ")}
	}
}

// modifyResponse records the host's good health and stamps the response
// with this cluster's id (a host does not get to claim a cluster, nor a
// failover).
func (p *Proxy) modifyResponse(res *http.Response) error {
	// net/http's HTTP/1.1 client takes any three digits, and its HTTP/2
	// client any number as :status, but a status outside 100-599 is no
	// HTTP answer (RFC 9110 §15): under 100 writing it panics (the client
	// got a 500 saying the gateway failed), over 599 it went out as the
	// host sent it. A 502, as the fast path answers.
	if res.StatusCode < 100 || res.StatusCode > 599 {
		return fmt.Errorf("%w: status %03d", errFastHead, res.StatusCode)
	}
	if a := attemptFrom(res.Request.Context()); a != nil {
		if a.interim.n1xx > max1xx {
			return errFastTooMany
		}
		a.host.Health.Answered(a.picked)
		if res.StatusCode != http.StatusSwitchingProtocols {
			// What the host's Connection named, which ReverseProxy could
			// not remove when net/http's client had dropped the field
			// for its close (connfields.go). First, so that no name
			// takes off a field stamped below. (A 101's Connection names
			// Upgrade, never close: it is kept, for dropHopByHop.)
			for _, k := range a.fields.final(res.StatusCode) {
				delete(res.Header, k)
			}
		}
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// ReverseProxy removes the hop-by-hop fields from every answer
		// but a 101, which it writes with all the host's fields: those
		// of the host's connection (Keep-Alive, TE, Proxy-*, what its
		// Connection names) would reach the client's, as on no other
		// answer. First, so that a name the Connection lists cannot take
		// off the fields stamped below.
		dropHopByHop(res.Header, true)
	}
	dropGatewayFields(res.Header)
	for _, k := range p.opts.OwnFields {
		delete(res.Header, k)
	}
	if p.clusterHdr != nil {
		res.Header[HeaderCluster] = p.clusterHdr
	}
	// Trailers (trailerOK): the announced ones now, before ReverseProxy
	// announces them; all of them once the body ends. Only a chunked
	// HTTP/1.1 body or an HTTP/2 stream can carry any (the rest costs no
	// wrapper). A 101's body is the upgraded connection, which
	// ReverseProxy needs unwrapped.
	if (len(res.TransferEncoding) > 0 || res.ProtoMajor == 2) && res.StatusCode != http.StatusSwitchingProtocols &&
		res.Body != nil && res.Body != http.NoBody {
		dropTrailers(res.Trailer, p.opts.OwnFields)
		res.Body = &trailerFilter{ReadCloser: res.Body, res: res, own: p.opts.OwnFields}
	}
	// A 101 is written by ReverseProxy on the hijacked connection, past
	// the gateway's recorder that puts X-Request-Id on every other answer
	// (unless the host's carries one): do the same here, with the id the
	// host was sent.
	if res.StatusCode == http.StatusSwitchingProtocols {
		if a := attemptFrom(res.Request.Context()); a != nil {
			a.req.UpgradedTo = a.host.ID
		}
		if id := res.Request.Header["X-Request-Id"]; len(id) > 0 && len(res.Header["X-Request-Id"]) == 0 {
			res.Header["X-Request-Id"] = id
		}
		// ReverseProxy writes the 101 with res.Write, which adds
		// "Content-Length: 0" to an answer to a POST, PUT or PATCH
		// (res.Request's method), and no 1xx may carry one (RFC 9110
		// §8.6). Without the request it writes the head as the host sent
		// it; ReverseProxy takes the request it tunnels for from its own
		// argument, not from res.
		res.Request = nil
	}
	return nil
}

// errorHandler is ReverseProxy's: it runs when no response came back. A
// connect failure is left to ServeHTTP (next host, fallback); anything
// else is answered here.
func (p *Proxy) errorHandler(w http.ResponseWriter, out *http.Request, err error) {
	a := attemptFrom(out.Context())
	if a == nil { // not reachable through ServeHTTP
		p.answer(w, nil, metrics.AppNone, nil, err)
		return
	}
	// The client's side failing surfaces as a transport error too: name
	// it for what it is, so it maps to 499 (or 400) and never counts
	// against the host.
	// A stalled upload comes first: net/http cancels the request's
	// context when the body's read deadline fires, and taken for the
	// client leaving (499, nothing written) it was answered by net/http's
	// own empty 200, as if the upload had gone through.
	client := false
	berr := a.body.readErr()
	cerr := out.Context().Err()
	switch {
	case berr != nil && isTimeout(berr):
		// The listener's bound on a stalled upload (edge), not the
		// host's slowness.
		client = true
		err = fmt.Errorf("%w: %w", errBodyStalled, err)
	case cerr != nil && !isDial(err) && errors.Is(context.Cause(out.Context()), context.DeadlineExceeded):
		// The caller's bound on the host's answer, shorter than the head
		// timeout (the gateway's for a peer's forward): the host's
		// slowness, as that timeout's is, not the client leaving; so the
		// host that leaves such requests unanswered cools down.
		err = context.Cause(out.Context())
	case cerr != nil:
		client = true
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
	case berr != nil:
		client = true
		err = fmt.Errorf("%w: %w", errBadBody, err)
	}
	if errors.Is(err, errBodyStalled) || errors.Is(err, errBadBody) {
		// Where the client's next request starts is unknown now (a body
		// cut short, or bytes after a broken chunk): never read one.
		// HTTP/2 frames its streams, and must not carry the field.
		if out.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
	}
	reason := reasonFor(err)
	p.opts.Metrics.UpstreamErrors.WithLabelValues(a.app, reason).Inc()
	dial := isDial(err)
	// Passive health (DESIGN §4): a connect failure, or the host's
	// connection breaking (reset, closed mid-response), cools the host
	// down, and so do answers that never began, a few in a row
	// (route.Health.Timeout). Not one slow answer, not the client leaving
	// or sending a broken body, and not ReverseProxy's own refusals (a
	// client's bad Upgrade): a client could otherwise take hosts out of
	// rotation.
	switch {
	case client:
	case dial || (reason == metrics.ReasonOther && isConnBroken(err)):
		a.host.Health.Fail(p.opts.Now())
	case reason == metrics.ReasonTimeout:
		a.host.Health.Timeout(p.opts.Now(), a.picked)
	}
	if !client && dial && !a.body.touched() {
		a.failed = err
		p.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn, "proxy: host unreachable",
			slog.String("app", a.app), slog.String("host_id", a.host.ID), slog.String("error", err.Error()))
		return
	}
	p.answer(w, a.req, a.app, a.host, err)
}

// trackedBody tells whether the request body was read at all, so that a
// request is only ever sent to a second host if the first got no byte,
// and whether reading it failed (the client's fault, not the host's).
// The transport reads it on its own goroutine.
type trackedBody struct {
	io.ReadCloser
	read atomic.Bool
	err  atomic.Pointer[error]
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (b *trackedBody) touched() bool { return b != nil && b.read.Load() }

func (b *trackedBody) readErr() error {
	if b == nil {
		return nil
	}
	if e := b.err.Load(); e != nil {
		return *e
	}
	return nil
}

// bufferPool recycles ReverseProxy's copy buffers (32 KiB each) instead of
// allocating one per response. Arrays, not slices, go in the pool so that
// Put does not allocate.
type bufferPool struct{}

const bufSize = 32 << 10

var buffers = sync.Pool{New: func() any { return new([bufSize]byte) }}

func (bufferPool) Get() []byte { return buffers.Get().(*[bufSize]byte)[:] }

func (bufferPool) Put(b []byte) {
	if cap(b) >= bufSize {
		buffers.Put((*[bufSize]byte)(b[:bufSize]))
	}
}
