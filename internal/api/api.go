package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/limit"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// Store is the subset of *store.Store (internal/store) the API uses. Every method takes the
// request's context first. Get and Delete of a missing item return an
// error for which Options.NotFound answers errors.Is; Get of a value that
// does not read, one for which Options.BadValue does.
type Store interface {
	GetApp(ctx context.Context, id string) (*route.App, error)
	PutApp(ctx context.Context, app *route.App) error
	// UpdateApp, UpdateZone, UpdateRecord and UpdateHostKey change an
	// item as UpdateDomain does; conditional writes (If-Match) go
	// through them.
	UpdateApp(ctx context.Context, id string, fn func(cur *route.App) (*route.App, error)) error
	DeleteApp(ctx context.Context, id string) error
	ListApps(ctx context.Context) ([]*route.App, error)
	// PageApps returns up to limit (1 to 1000) apps whose ids sort
	// after after, by id, reading only those, and whether more may
	// follow; PageDomains, PageZones, PageHostKeys and PageRecords do
	// the same for theirs (records ordered by name+" "+type).
	PageApps(ctx context.Context, after string, limit int) ([]*route.App, bool, error)

	GetDomain(ctx context.Context, name string) (*route.Domain, error)
	PutDomain(ctx context.Context, d *route.Domain) error
	// UpdateDomain changes a mapping conditionally on the one fn was
	// given (nil: none); fn returns the new one, or nil to delete it, and
	// its error is returned as is with nothing written.
	UpdateDomain(ctx context.Context, name string, fn func(cur *route.Domain) (*route.Domain, error)) error
	DeleteDomain(ctx context.Context, name string) error
	ListDomains(ctx context.Context) ([]*route.Domain, error)
	// DomainsNaming returns the names of the mappings that name app as
	// of a moment after the call began, from memory, but not all of them
	// read back: some may have moved or gone since. ok false: it cannot
	// say now, and ListDomains must.
	DomainsNaming(ctx context.Context, app string) (names []string, ok bool, err error)
	PageDomains(ctx context.Context, after string, limit int) ([]*route.Domain, bool, error)

	GetZone(ctx context.Context, name string) (*route.Zone, error)
	PutZone(ctx context.Context, z *route.Zone) error
	UpdateZone(ctx context.Context, name string, fn func(cur *route.Zone) (*route.Zone, error)) error
	DeleteZone(ctx context.Context, name string) error
	ListZones(ctx context.Context) ([]*route.Zone, error)
	PageZones(ctx context.Context, after string, limit int) ([]*route.Zone, bool, error)

	GetRecord(ctx context.Context, zone, name, typ string) (*route.Record, error)
	PutRecord(ctx context.Context, r *route.Record) error
	UpdateRecord(ctx context.Context, zone, name, typ string, fn func(cur *route.Record) (*route.Record, error)) error
	DeleteRecord(ctx context.Context, zone, name, typ string) error
	ListRecords(ctx context.Context, zone string) ([]*route.Record, error)
	PageRecords(ctx context.Context, zone, after string, limit int) ([]*route.Record, bool, error)
	// RecordsAt returns the record sets of zone at name, every type.
	RecordsAt(ctx context.Context, zone, name string) ([]*route.Record, error)
	// DeleteRecords deletes every record stored under zone, including
	// values ListRecords skips because they do not decode.
	DeleteRecords(ctx context.Context, zone string) error

	GetHostKey(ctx context.Context, hostID string) (*route.HostKey, error)
	PutHostKey(ctx context.Context, k *route.HostKey) error
	UpdateHostKey(ctx context.Context, hostID string, fn func(cur *route.HostKey) (*route.HostKey, error)) error
	DeleteHostKey(ctx context.Context, hostID string) error
	ListHostKeys(ctx context.Context) ([]*route.HostKey, error)
	PageHostKeys(ctx context.Context, after string, limit int) ([]*route.HostKey, bool, error)
}

// Options configure an [API].
type Options struct {
	// Store keeps apps, domains, zones, records and host keys. Required.
	Store Store
	// NotFound is the store's not-found sentinel (store.ErrNotFound).
	// Required.
	NotFound error
	// TooLarge is the store's sentinel for a value past its bound
	// (store.ErrTooLarge): a write refused so answers 413. Nil: such a
	// refusal answers 500 like any store failure.
	TooLarge error
	// BadValue is the store's sentinel for a stored value that does not
	// read (store.ErrBadValue): a GET of one answers a problem that says
	// so, and a PUT or DELETE replaces or deletes it as it would a good
	// one. Nil: every such read answers 500 like any store failure.
	BadValue error
	// Unavailable reports a store error that says the store cannot
	// answer now (store.Unavailable): answered 503 with Retry-After, so a
	// platform's client backs off and tries again. Nil: 500 like any
	// store failure.
	Unavailable func(error) bool
	// ControlToken is the static platform bearer token; empty accepts no
	// static token.
	ControlToken string
	// VerifyPlatform checks that r carries a valid bearer JWT with scope
	// platform (internal/auth), returning nil, or the error of
	// internal/auth that says why not: the 401 tells the client
	// (auth.Describe). nil: only ControlToken is accepted.
	VerifyPlatform func(r *http.Request) error
	// VerifyDomain checks a custom-domain proof (method "txt", "cname" or
	// "http", DESIGN §7) for d and returns nil when it holds. nil: only the
	// platform's "manual" method is available.
	VerifyDomain func(ctx context.Context, d route.Domain, method string) error
	// Hosts returns the discovered hosts for GET /api/v3/hosts. nil: none.
	Hosts func() []route.HostInfo
	// Clusters returns the body of GET /api/v3/discovery/clusters
	// ({"self","clusters"}). nil: that route answers 503.
	Clusters func() any
	// NoIssuers says the gateway verifies no edge token (auth.issuers is
	// empty): a PUT of an app with auth.required then answers 400 naming
	// it, since every request to such an app would be refused 401. false:
	// issuers are configured, and such an app is stored.
	NoIssuers bool
	// VerifySession checks that r carries a signed-in session (any valid
	// bearer token, DESIGN §8) and returns a stable name for it, which
	// the resolve routes meter. nil: no session is valid, and the resolve
	// routes answer 401.
	VerifySession func(r *http.Request) (string, error)
	// ResolveZones returns the zones the resolve routes answer from, the
	// DNS listener's. nil: none, so every name is REFUSED.
	ResolveZones func() []dns.Zone
	// Forwarder recurses for names outside every zone on the resolve
	// routes, for requests with the platform credential only (DESIGN §8).
	// nil: recursion is off, and such names are REFUSED for everyone.
	Forwarder *dns.Forwarder
	// ResolveLimits meter the resolve routes; zero fields take defaults.
	ResolveLimits ResolveLimits
	// BadTokens is how many wrong bearer tokens one client address (an
	// IPv4 address or an IPv6 /48) may send per window to the control and
	// resolve routes; then each request with a token gets 429, the right
	// token too, until the window has room. A good token is never
	// counted. Zero: 100 per 60 s.
	BadTokens limit.Quota
	// Public are further public routes, mounted as given (Go ServeMux
	// patterns such as "GET /api/v3/dns/resolve"). They need no credential.
	Public map[string]http.Handler
	// DefaultRateLimit fills an app's rate_limit fields left out of a PUT.
	// Zero fields: 600 requests per 60 s (DESIGN §2).
	DefaultRateLimit route.RateLimit
	// Logger receives store failures. nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock. nil: time.Now.
	Now func() time.Time
}

// maxBody caps every request body.
const maxBody = 1 << 20

// API is the /api/v3 handler. Safe for concurrent use.
type API struct {
	o       Options
	public  *http.ServeMux
	control *http.ServeMux
	token   [sha256.Size]byte // sha256 of ControlToken, so the compare does not leak its length
	meter   *meter            // the resolve routes' budgets
	guard   *guard            // wrong tokens per client address
	lists   chan struct{}     // turns to build a whole list (page.go)
	pages   chan struct{}     // turns to build a page
}

var _ http.Handler = (*API)(nil)

// New validates o and builds the handler. It starts nothing.
func New(o Options) (*API, error) {
	if o.Store == nil {
		return nil, errors.New("api: Options.Store is required")
	}
	if o.NotFound == nil {
		return nil, errors.New("api: Options.NotFound is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.DefaultRateLimit.Requests <= 0 {
		o.DefaultRateLimit.Requests = 600
	}
	if o.DefaultRateLimit.Window <= 0 {
		o.DefaultRateLimit.Window = route.Duration(60 * time.Second)
	}
	o.ResolveLimits.defaults()
	win, err := limit.NewWindow(limit.WindowOptions{MaxKeys: o.ResolveLimits.MaxKeys, Now: o.Now})
	if err != nil {
		return nil, fmt.Errorf("api: resolve limits: %w", err)
	}
	g, err := newGuard(o.BadTokens, o.ResolveLimits.MaxKeys, o.Now)
	if err != nil {
		return nil, err
	}
	a := &API{o: o, public: http.NewServeMux(), control: http.NewServeMux(), meter: &meter{w: win, lim: o.ResolveLimits}, guard: g,
		lists: make(chan struct{}, maxWholeLists), pages: make(chan struct{}, maxPageLists)}
	if o.ControlToken != "" {
		a.token = sha256.Sum256([]byte(o.ControlToken))
	}
	a.public.HandleFunc("GET /api/v3/discovery/clusters", a.clusters)
	a.public.HandleFunc("GET /api/v3/dns/resolve", a.resolve)
	a.public.HandleFunc("POST /api/v3/dns/resolve/batch", a.resolveBatch)
	for pattern, h := range o.Public {
		a.public.Handle(pattern, h)
	}
	a.routes()
	return a, nil
}

// ServeHTTP serves a public route to anyone, and answers anyone 405 for
// a public route's path asked with another method; everything else under
// /api/v3 is a control route, and a caller without the platform
// credential gets 401 before the method, the route or the body is looked
// at (429 once its address has sent too many wrong tokens: guard.go). A
// control path that is not clean answers 400 rather than the mux's
// redirect to another item. No answer may be stored by a cache: most
// are what a credential got, and a browser would otherwise keep the
// dashboard's apps and hosts on disk.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if _, pattern := a.public.Handler(r); pattern != "" {
		a.public.ServeHTTP(w, r)
		return
	}
	if allow := a.publicAllow(r); allow != "" {
		// a public route asked with another method: no credential
		// could make it a control request, so asking for one (401), or
		// charging a session's token as a guess at the control token,
		// would mislead
		w.Header().Set("Allow", allow)
		problem.Write(w, http.StatusMethodNotAllowed, "method not allowed here; see the Allow header")
		return
	}
	var why error
	ok, answered := a.checkToken(w, r, func() bool { why = a.platform(r); return why == nil })
	if answered {
		return
	}
	if !ok {
		unauthorized(w, why, "the control API needs the platform credential")
		return
	}
	if p := r.URL.EscapedPath(); cleanPath(p) != p {
		// The mux would redirect to the path cleaned, which names another
		// item (records/./.. is the zone): a client that follows it would
		// DELETE that one.
		problem.Write(w, http.StatusBadRequest, fmt.Sprintf(`the path %q is not clean (a "." or ".." segment, or "//"): name the item itself`, p))
		return
	}
	if _, pattern := a.control.Handler(r); pattern == "" {
		// unknown route or wrong method: the mux answers 404 or 405 with
		// Allow, as plain text; answer as problem+json instead.
		a.control.ServeHTTP(&problemWriter{ResponseWriter: w}, r)
		return
	}
	r, ok = limitBody(w, r)
	if !ok {
		return
	}
	a.control.ServeHTTP(w, r)
}

// limitBody returns r with its body capped at maxBody, or, when its
// Content-Length is past that already, answers 413 itself and returns
// false. Refused unread, a body sent with Expect: 100-continue is not
// asked for (the server sends 100 Continue on the first read): a client
// uploaded a MiB of a body that could only be refused. The cap is on a
// copy of r: net/http tells a body the handler left unread only by its
// own type on its own request, and capped there it took the body for
// one to drain, so a write answered before its body (412, 400) waited
// for the client to send up to 256 KiB of it first.
func limitBody(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if r.ContentLength > maxBody {
		problem.Write(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", maxBody))
		return r, false
	}
	r2 := *r
	r2.Body = http.MaxBytesReader(w, r.Body, maxBody)
	return &r2, true
}

// cleanPath is p as http.ServeMux routes it: "." and ".." segments
// resolved, "//" collapsed, a final "/" kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// publicAllow returns the Allow list of the public route at r's path when
// r asks it with a method it does not take and no control route takes
// r; "" otherwise. The mux's own answer is run into a header-only writer
// to learn it: its 404 and 405 handlers read no body.
func (a *API) publicAllow(r *http.Request) string {
	if _, pattern := a.control.Handler(r); pattern != "" {
		return ""
	}
	h, _ := a.public.Handler(r)
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.code != http.StatusMethodNotAllowed {
		return ""
	}
	return rec.header.Get("Allow")
}

// headerRecorder keeps a response's header and status and drops its body.
type headerRecorder struct {
	header http.Header
	code   int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) WriteHeader(code int) {
	if h.code == 0 {
		h.code = code
	}
}

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

// unauthorized answers 401 for why, r's credential's refusal, with the
// RFC 6750 challenge and detail, which say what was wrong (auth.Describe):
// a token in the query string, an expired one, a forged one. A request
// with no token gets the bare challenge (RFC 6750 §3.1). A token without
// scope platform is 401 as well, since only the platform's credential
// opens the control API (DESIGN §7), but its challenge says
// insufficient_scope and names the scope, since a new token of the same
// kind would not help.
func unauthorized(w http.ResponseWriter, why error, detail string) {
	w.Header().Set("WWW-Authenticate", auth.Challenge("gatehouse", why, auth.PlatformScope))
	if _, desc := auth.Describe(why); desc != "" {
		detail += ": " + desc
	}
	problem.Write(w, http.StatusUnauthorized, detail)
}

// errNotControlToken refuses a token that is not the control token when
// no JWT is taken.
var errNotControlToken = fmt.Errorf("%w: it is not the control token", auth.ErrInvalid)

// errNeither refuses a token that is not the control token and does not
// parse as a JWT either: "not a well-formed JWT" alone would mislead an
// operator who meant the control token.
var errNeither = fmt.Errorf("%w: it is neither the control token nor a well-formed JWT", auth.ErrInvalid)

// platform checks that r carries the platform credential, returning why
// not. The static token is read by auth.BearerToken, as every JWT is
// (VerifyPlatform, VerifySession): one rule for both credentials, so a
// request the JWT path refuses (its token repeated in the query string,
// two Authorization headers) is refused with the static token too.
func (a *API) platform(r *http.Request) error {
	tok, err := auth.BearerToken(r)
	if err != nil {
		return err
	}
	if a.o.ControlToken != "" {
		sum := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) == 1 {
			return nil
		}
	}
	if a.o.VerifyPlatform == nil {
		return errNotControlToken
	}
	err = a.o.VerifyPlatform(r)
	if err != nil && a.o.ControlToken != "" && auth.Malformed(err) {
		return errNeither
	}
	return err
}

func (a *API) clusters(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := preconditions(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if a.o.Clusters == nil {
		problem.Write(w, http.StatusServiceUnavailable, "cluster discovery is not running")
		return
	}
	body := a.o.Clusters()
	if !a.untagged(w, r, p) {
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// problemWriter turns the ServeMux's plain-text 404 and 405 into problem
// bodies, keeping its Allow header.
type problemWriter struct {
	http.ResponseWriter
	wrote bool
}

func (p *problemWriter) WriteHeader(code int) {
	if p.wrote {
		return
	}
	p.wrote = true
	detail := "no such control route"
	if code == http.StatusMethodNotAllowed {
		detail = "method not allowed here; see the Allow header"
	}
	p.ResponseWriter.Header().Del("Content-Type")
	problem.Write(p.ResponseWriter, code, detail)
}

func (p *problemWriter) Write(b []byte) (int, error) {
	if !p.wrote {
		p.WriteHeader(http.StatusOK)
	}
	return len(b), nil // the mux's plain-text body is dropped
}
