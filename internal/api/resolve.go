package api

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// maxBatch is the most queries one resolve batch may hold (DESIGN §8).
const maxBatch = 10

// ResolveLimits meter the resolve API (DESIGN §8): every query costs one
// unit of the client address's window, of the session's own window under
// it, and of the session's daily quota. Zero fields take the defaults.
type ResolveLimits struct {
	// PerIP is the window shared by every session behind one client
	// address (an IPv4 address or an IPv6 /48). Zero: 600 per 60 s.
	PerIP limit.Quota
	// PerSession is each session's own window, so that one busy session
	// cannot drain its address's budget. Zero: 300 per 60 s.
	PerSession limit.Quota
	// Daily is each session's quota per sliding 24 h. Zero: 10,000.
	Daily int
	// MaxKeys bounds the addresses and sessions tracked (LRU). Zero:
	// limit.DefaultMaxKeys.
	MaxKeys int
}

func (l *ResolveLimits) defaults() {
	if l.PerIP.Limit <= 0 || l.PerIP.Window <= 0 {
		l.PerIP = limit.Quota{Limit: 600, Window: time.Minute}
	}
	if l.PerSession.Limit <= 0 || l.PerSession.Window <= 0 {
		l.PerSession = limit.Quota{Limit: 300, Window: time.Minute}
	}
	if l.Daily <= 0 {
		l.Daily = 10_000
	}
}

// meter charges resolve queries. Its one lock makes the three charges of a
// request one: a request is admitted only if every budget has room for all
// its queries, and two concurrent requests can never both spend the same
// remaining units.
type meter struct {
	mu  sync.Mutex
	w   *limit.Window
	lim ResolveLimits
}

// charged is the outcome of a charge: the address's and the session's
// window after it, and how long to wait when it was refused.
type charged struct {
	ok         bool
	ip, sess   limit.Result
	retryAfter time.Duration
}

// charge charges n queries, or only reports whether they would fit when
// dry: a HEAD request asks what GET would answer, and spends nothing.
func (m *meter) charge(ip netip.Addr, session string, n int, dry bool) charged {
	day := limit.Quota{Limit: m.lim.Daily, Window: 24 * time.Hour}
	budgets := []struct {
		k limit.Key
		q limit.Quota
	}{
		{limit.KeyFor("resolve", ip), m.lim.PerIP},
		{limit.Key{Scope: "resolve-session\n" + session}, m.lim.PerSession},
		{limit.Key{Scope: "resolve-day\n" + session}, day},
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var c charged
	var res [3]limit.Result
	c.ok = true
	for i, b := range budgets {
		res[i], _ = m.w.Charge(b.k, 0, b.q) // a zero charge only reports; quotas are valid
		if res[i].Remaining < n {
			c.ok = false
			// refused, so it charges nothing and says when n fit
			r, _ := m.w.Charge(b.k, n, b.q)
			c.retryAfter = max(c.retryAfter, r.RetryAfter)
		}
	}
	if c.ok && !dry {
		for i, b := range budgets {
			res[i], _ = m.w.Charge(b.k, n, b.q)
		}
	}
	c.ip, c.sess = res[0], res[1]
	return c
}

// resolveQuery is one query of a batch body: [{"name": ..., "type": ...}].
type resolveQuery struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// resolve answers GET /api/v3/dns/resolve?name=&type=.
func (a *API) resolve(w http.ResponseWriter, r *http.Request) {
	session, ok := a.session(w, r)
	if !ok {
		return
	}
	fields, err := query(r, "name", "type", "cd", "do", "ct", "edns_client_subnet", "random_padding")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := dohExtras(fields); err != nil {
		a.fail(w, r, err)
		return
	}
	for _, f := range []string{"name", "type"} {
		// the client meant one of them, and answering the first would
		// guess which (pageOf refuses a repeated field likewise)
		if n := len(fields[f]); n > 1 {
			a.fail(w, r, badInput("%s: given %d times; give it once", f, n))
			return
		}
	}
	q, err := question(fields.Get("name"), fields.Get("type"))
	if err != nil {
		a.fail(w, r, badInput("%v", err))
		return
	}
	// cd=1 is the CD bit (dohExtras checked its spelling): echoed, and
	// sent upstream by a forward, as Google's JSON API and the DNS
	// listener do.
	q.CheckingDisabled = slices.ContainsFunc(fields["cd"], func(v string) bool { return v == "1" || strings.EqualFold(v, "true") })
	if r.Method == http.MethodHead {
		// HEAD asks what GET would answer, headers only (RFC 9110
		// §9.3.2; the mux routes it here): the same status and budget
		// fields, but nothing is resolved, so nothing is spent. A
		// monitor probing the route would otherwise drain the session's
		// window and daily quota with answers it never sees. The
		// Remaining counts are so the budget as it stands, one more
		// than a GET's, which are counted after its own unit.
		if a.chargeResolve(w, r, session, 1, true) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		return
	}
	if !a.chargeResolve(w, r, session, 1, false) {
		return
	}
	writeJSON(w, http.StatusOK, dns.ResolveRecursive(r.Context(), q, a.zones(), a.forwarderFor(r)))
}

// resolveBatch answers POST /api/v3/dns/resolve/batch: a JSON array of at
// most maxBatch {"name","type"} queries, answered as an array in order.
func (a *API) resolveBatch(w http.ResponseWriter, r *http.Request) {
	session, ok := a.session(w, r)
	if !ok {
		return
	}
	if _, err := query(r); err != nil {
		a.fail(w, r, err)
		return
	}
	r, ok = limitBody(w, r)
	if !ok {
		return
	}
	var body []resolveQuery
	if err := decode(r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if len(body) == 0 || len(body) > maxBatch {
		a.fail(w, r, badInput("a batch holds 1 to %d queries, got %d", maxBatch, len(body)))
		return
	}
	qs := make([]dns.DoHQuestion, len(body))
	for i, b := range body {
		q, err := question(b.Name, b.Type)
		if err != nil {
			a.fail(w, r, badInput("[%d]: %v", i, err))
			return
		}
		qs[i] = q
	}
	if !a.chargeResolve(w, r, session, len(qs), false) {
		return
	}
	zones, fwd := a.zones(), a.forwarderFor(r)
	out := make([]dns.DoH, len(qs))
	if fwd == nil {
		for i, q := range qs {
			out[i] = dns.Resolve(q, zones)
		}
	} else {
		// Forwarded queries wait on the network: ask them together, so a
		// batch takes one forwarder deadline at most, not ten.
		var wg sync.WaitGroup
		for i, q := range qs {
			wg.Go(func() { out[i] = dns.ResolveRecursive(r.Context(), q, zones, fwd) })
		}
		wg.Wait()
	}
	writeJSON(w, http.StatusOK, out)
}

// question is dns.ParseQuestion, with a type given as a number taken in
// plain decimal only: ParseUint takes 028 as 28 (AAAA), which is 23 to a
// client that reads it as octal, and no client needs a spelling other
// than the plain one (a page's limit is held to the same).
func question(name, typ string) (dns.DoHQuestion, error) {
	if len(typ) > 1 && typ[0] == '0' && strings.Trim(typ, "0123456789") == "" {
		return dns.DoHQuestion{}, fmt.Errorf("dns: type %q: give a type number in plain decimal, without a leading zero", typ)
	}
	return dns.ParseQuestion(name, typ)
}

// forwarderFor returns the forwarder when r may recurse: recursion is
// configured and r carries the platform credential (DESIGN §8). nil
// otherwise, and off-zone names are REFUSED.
func (a *API) forwarderFor(r *http.Request) *dns.Forwarder {
	if a.o.Forwarder == nil || a.platform(r) != nil {
		return nil
	}
	return a.o.Forwarder
}

// platformSession names the session of the static control token, which
// is metered like any other.
const platformSession = "platform control.token"

// session returns r's session, or answers 401: the resolve routes need a
// signed-in session (DESIGN §8). The platform credential is one: it is
// how the platform recurses.
//
// A wrong token here is metered as on the control routes: the control
// token works here too, so this is as good a place to guess it.
func (a *API) session(w http.ResponseWriter, r *http.Request) (string, bool) {
	var session string
	var why error
	ok, answered := a.checkToken(w, r, func() bool {
		var err error
		if a.o.VerifySession != nil {
			if session, err = a.o.VerifySession(r); err == nil {
				return true
			}
		}
		// the platform's refusal says why unless the session's says
		// more: a JWT's expiry, say, against "not the control token"
		why = a.platform(r)
		if why == nil {
			session = platformSession
			return true
		}
		if err != nil && !auth.Malformed(err) {
			why = err
		}
		return false
	})
	if !ok && !answered {
		unauthorized(w, why, "resolving needs a signed-in session: send a valid bearer token")
	}
	return session, ok
}

// chargeResolve charges n queries (none when dry: [meter.charge]) and
// sets the rate-limit fields, or answers 429 and returns false.
func (a *API) chargeResolve(w http.ResponseWriter, r *http.Request, session string, n int, dry bool) bool {
	c := a.meter.charge(clientIP(r), session, n, dry)
	h := w.Header()
	for _, f := range []struct {
		prefix string
		res    limit.Result
	}{{"X-RateLimit-", c.ip}, {"X-RateLimit-Identity-", c.sess}} {
		h.Set(f.prefix+"Limit", strconv.Itoa(f.res.Limit))
		h.Set(f.prefix+"Remaining", strconv.Itoa(f.res.Remaining))
		h.Set(f.prefix+"Reset", strconv.FormatInt(limit.Seconds(f.res.Reset), 10))
	}
	if !c.ok {
		h.Set("Retry-After", strconv.FormatInt(max(limit.Seconds(c.retryAfter), 1), 10))
		problem.Write(w, http.StatusTooManyRequests, fmt.Sprintf("over the resolve budget for %d queries; retry later", n))
	}
	return c.ok
}

// clientIP is the address the gateway charges r to (route.Request, set
// by hygiene), or the peer's on the management listener.
func clientIP(r *http.Request) netip.Addr {
	if rq := route.RequestFrom(r.Context()); rq != nil && rq.ClientIP.IsValid() {
		return rq.ClientIP
	}
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return ap.Addr().Unmap()
}

func (a *API) zones() []dns.Zone {
	if a.o.ResolveZones == nil {
		return nil
	}
	return a.o.ResolveZones()
}

// dohExtras checks the optional fields DNS-over-HTTPS JSON clients send
// beside name and type (Google's and Cloudflare's JSON API: cd, do, ct,
// edns_client_subnet, random_padding), which the route takes so that such
// a client works unchanged, and which change no answer: the zones are not
// signed (cd and do ask about DNSSEC), the answer is always JSON (ct),
// an authoritative answer does not vary by client subnet, and padding is
// padding. A flag or type no such client would send is refused all the
// same, naming it.
func dohExtras(q url.Values) error {
	for _, f := range []string{"cd", "do"} {
		for _, v := range q[f] {
			switch strings.ToLower(v) {
			case "", "0", "1", "false", "true":
			default:
				return badInput("%q: want 0, 1, false or true, got %q", f, bounded(v))
			}
		}
	}
	for _, v := range q["ct"] {
		switch strings.ToLower(v) { // a media type's case is not significant (RFC 9110 §8.3.1)
		case "", "application/dns-json", "application/x-javascript", "application/json":
		default:
			return badInput("\"ct\": the answer is JSON: want application/dns-json (or leave ct out), got %q", bounded(v))
		}
	}
	return nil
}
