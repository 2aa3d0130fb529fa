package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/dns"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// handlerFunc answers with a status and a JSON body, or an error that
// fail maps to a problem.
type handlerFunc func(r *http.Request) (int, any, error)

// routes registers every control route. Reading these lists tells you
// the whole control API: items, then lists (which page: page.go).
func (a *API) routes() {
	for pattern, h := range map[string]handlerFunc{
		"GET /api/v3/apps/{app}":    a.getApp,
		"PUT /api/v3/apps/{app}":    a.putApp,
		"DELETE /api/v3/apps/{app}": a.deleteApp,

		"GET /api/v3/domains/{domain}":         a.getDomain,
		"PUT /api/v3/domains/{domain}":         a.putDomain,
		"DELETE /api/v3/domains/{domain}":      a.deleteDomain,
		"POST /api/v3/domains/{domain}/verify": a.verifyDomain,

		"GET /api/v3/dns/zones/{zone}":                          a.getZone,
		"PUT /api/v3/dns/zones/{zone}":                          a.putZone,
		"DELETE /api/v3/dns/zones/{zone}":                       a.deleteZone,
		"GET /api/v3/dns/zones/{zone}/records/{name}/{type}":    a.getRecord,
		"PUT /api/v3/dns/zones/{zone}/records/{name}/{type}":    a.putRecord,
		"DELETE /api/v3/dns/zones/{zone}/records/{name}/{type}": a.deleteRecord,

		"GET /api/v3/hosts/keys/{host_id}":    a.getHostKey,
		"PUT /api/v3/hosts/keys/{host_id}":    a.putHostKey,
		"DELETE /api/v3/hosts/keys/{host_id}": a.deleteHostKey,
	} {
		if read := a.itemReader(pattern); read != nil {
			h = staleFirst(h, read)
		}
		a.control.Handle(pattern, a.serve(h))
	}
	for pattern, h := range map[string]handlerFunc{
		"GET /api/v3/apps":                     a.listApps,
		"GET /api/v3/domains":                  a.listDomains,
		"GET /api/v3/dns/zones":                a.listZones,
		"GET /api/v3/dns/zones/{zone}/records": a.listRecords,
		"GET /api/v3/hosts/keys":               a.listHostKeys,
		"GET /api/v3/hosts":                    a.listHosts,
	} {
		a.control.Handle(pattern, a.takeTurns(a.serve(h, "limit", "after")))
	}
}

// itemReader returns the GET handler of the item a write route
// (pattern) changes, nil for a GET.
func (a *API) itemReader(pattern string) handlerFunc {
	method, path, _ := strings.Cut(pattern, " ")
	if method == http.MethodGet {
		return nil
	}
	switch strings.TrimSuffix(path, "/verify") {
	case "/api/v3/apps/{app}":
		return a.getApp
	case "/api/v3/domains/{domain}":
		return a.getDomain
	case "/api/v3/dns/zones/{zone}":
		return a.getZone
	case "/api/v3/dns/zones/{zone}/records/{name}/{type}":
		return a.getRecord
	case "/api/v3/hosts/keys/{host_id}":
		return a.getHostKey
	}
	return nil
}

// staleFirst is h, a write, preceded by a check of the request's
// conditions against the item as read now (read, its GET): one that does
// not hold answers 412 before h reads the body. RFC 9110 §13.2.1 has the
// conditions evaluated before the content is processed, and a stale
// write with a bad body answered 400 sent its client to mend the body
// only to meet the 412 next. h still checks them itself, in the store's
// compare-and-set: the item may change after this read. An item that
// cannot be read here (none, a bad id, a value that does not decode) is
// left to h.
func staleFirst(h, read handlerFunc) handlerFunc {
	return func(r *http.Request) (int, any, error) {
		if p := conds(r); !p.none() {
			if _, cur, err := read(r); err == nil {
				if tag := itemTag(cur); tag != "" {
					if err := p.checkTag(tag, itemWhat(cur)); err != nil {
						return 0, nil, err
					}
				}
			}
		}
		return h(r)
	}
}

// serve answers with h, for a route whose query may hold the fields
// takes and no others.
func (a *API) serve(h handlerFunc, takes ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := query(r, takes...); err != nil {
			a.fail(w, r, err)
			return
		}
		if err := noBody(r); err != nil {
			a.fail(w, r, err)
			return
		}
		p, err := preconditions(r) // a field that does not parse is refused on every route
		if err != nil {
			a.fail(w, r, err)
			return
		}
		status, body, err := h(r)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if body == nil {
			w.WriteHeader(status)
			return
		}
		if tag := itemTag(body); tag != "" {
			w.Header().Set("ETag", tag)
			// A write checks its conditions itself, before it writes; a
			// read can check them once it has the item.
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				if p.match != nil && !anyTag(p.match, tag, false) {
					a.fail(w, r, p.checkTag(tag, itemWhat(body)))
					return
				}
				if p.noneMatch != nil && anyTag(p.noneMatch, tag, true) {
					w.WriteHeader(http.StatusNotModified)
					return
				}
			}
		} else if !a.untagged(w, r, p) {
			return
		}
		writeJSON(w, status, body)
	})
}

// noBody refuses a GET, HEAD or DELETE that carries a body. Such a body
// is read by no route, so what it said was ignored, as a query field not
// taken was: a DELETE's {"cascade": false} deleted, a GET's {"limit": 1}
// answered the whole list. RFC 9110 §9.3.1 and §9.3.5 give such content no
// meaning and let a server refuse it. A body of length 0 is none, and so
// is a chunked one that ends at once: a byte is read to tell.
func noBody(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodDelete:
	default:
		return nil
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if n, _ := io.ReadFull(r.Body, make([]byte, 1)); n == 0 {
		return nil
	}
	return badInput("a %s takes no body here, and the API reads none: what it says would be ignored (a list pages by ?limit= and ?after=, a write is made conditional by If-Match)", r.Method)
}

// untagged checks p for r, a request of a resource that exists and
// has no ETag (a list), and reports whether to answer it: for a GET or
// HEAD it has answered 304 or 412 itself when the conditions say so. A
// write checks its own conditions.
func (a *API) untagged(w http.ResponseWriter, r *http.Request, p precond) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return true
	}
	status, err := p.untagged("the list at " + r.URL.Path)
	switch {
	case err != nil:
		a.fail(w, r, err)
		return false
	case status != 0:
		w.WriteHeader(status)
		return false
	}
	return true
}

// missing turns the store's not-found into a 404 naming what is missing.
func (a *API) missing(err error, what string, id string) error {
	if errors.Is(err, a.o.NotFound) {
		return &statusError{http.StatusNotFound, fmt.Sprintf("%s %q not found", what, id)}
	}
	return err
}

// ---- apps

// appBody is the body of PUT /api/v3/apps/{app}. Every field is optional;
// a PUT replaces the whole app, and a field left out takes its default.
type appBody struct {
	ID        *string            `json:"id"`
	Mode      *route.Mode        `json:"mode"`
	Status    *route.Status      `json:"status"`
	CORS      *route.CORS        `json:"cors"`
	RateLimit *rateLimitBody     `json:"rate_limit"`
	Auth      *route.Auth        `json:"auth"`
	Policy    []route.PolicyRule `json:"policy"`
	Health    *route.HealthCheck `json:"health"`
}

type rateLimitBody struct {
	Requests *int            `json:"requests"`
	Window   *route.Duration `json:"window"`
}

func (a *API) listApps(r *http.Request) (int, any, error) {
	p, err := pageOf(r)
	if err != nil {
		return 0, nil, err
	}
	id := func(x *route.App) string { return x.ID }
	return answerList(r.Context(), p, "apps", a.o.Store.PageApps, a.o.Store.ListApps, id, id)
}

func (a *API) getApp(r *http.Request) (int, any, error) {
	id := r.PathValue("app")
	if err := checkAppID(id); err != nil {
		return 0, nil, err
	}
	app, err := a.o.Store.GetApp(r.Context(), id)
	if err != nil {
		return 0, nil, a.missing(err, "app", id)
	}
	return http.StatusOK, app, nil
}

func (a *API) putApp(r *http.Request) (int, any, error) {
	id := r.PathValue("app")
	if err := checkAppID(id); err != nil {
		return 0, nil, err
	}
	var b appBody
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	app, err := a.appFrom(id, &b)
	if err != nil {
		return 0, nil, err
	}
	if p := conds(r); !p.none() {
		_, err = writeIf(a, p, fmt.Sprintf("app %q", id), &app, func(fn func(*route.App) (*route.App, error)) error {
			return a.o.Store.UpdateApp(r.Context(), id, fn)
		})
	} else {
		err = a.o.Store.PutApp(r.Context(), &app)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, app, nil
}

// appFrom applies the defaults of DESIGN §2 to b and validates the result.
func (a *API) appFrom(id string, b *appBody) (route.App, error) {
	if b.ID != nil && *b.ID != id {
		return route.App{}, badInput("id: the body says %q but the path says %q", *b.ID, id)
	}
	app := route.App{ID: id, Mode: route.ModeHTTP, Status: route.StatusActive, RateLimit: a.o.DefaultRateLimit}
	if b.Mode != nil {
		app.Mode = *b.Mode
	}
	if b.Status != nil {
		app.Status = *b.Status
	}
	if b.CORS != nil {
		app.CORS = *b.CORS
	}
	if app.CORS.Origins == nil {
		app.CORS.Origins = []string{}
	}
	if rl := b.RateLimit; rl != nil {
		if rl.Requests != nil {
			app.RateLimit.Requests = *rl.Requests
		}
		if rl.Window != nil {
			app.RateLimit.Window = *rl.Window
		}
	}
	if b.Auth != nil {
		app.Auth = *b.Auth
	}
	app.Policy = b.Policy
	app.Health = b.Health
	if err := checkApp(&app); err != nil {
		return app, err
	}
	// Stored, it would answer every request 401 on this gateway, which
	// can verify no token: refused, as a config naming a key it needs
	// is at start.
	if app.Auth.Required && a.o.NoIssuers {
		return app, badInput("auth.required: this gateway has no token issuer (auth.issuers is empty), so no request could pass and the app would answer every one 401; configure auth.issuers first")
	}
	return app, nil
}

// deleteApp deletes an app that nothing else names. A domain mapping or a
// host key left naming a deleted app would pass to the next app created
// under that id: a verified domain with no proof, and the old owner's host
// serving the new app. So while any names it, the answer is 409 listing
// them, and the platform deletes them (or re-PUTs a key that serves other
// apps too without this one) first.
//
// The store has no transaction across its buckets, so a mapping PUT for
// this app can land between the listing and the delete. See
// recheckAppRefs for how the two requests still agree.
func (a *API) deleteApp(r *http.Request) (int, any, error) {
	ctx := r.Context()
	id := r.PathValue("app")
	if err := checkAppID(id); err != nil {
		return 0, nil, err
	}
	what := fmt.Sprintf("app %q", id)
	p := conds(r)
	app, err := a.o.Store.GetApp(ctx, id)
	switch {
	case err != nil && !a.badValue(err): // a value that does not read is deleted too
		return 0, nil, a.missing(err, "app", id)
	case err != nil && !p.none():
		return 0, nil, unreadable(what)
	case !p.none():
		if err := check(p, app, what); err != nil { // before the references are counted
			return 0, nil, err
		}
	}
	refs, err := a.appRefs(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	if len(refs) > 0 {
		return 0, nil, stillNamed(id, refs)
	}
	if p.none() {
		err = a.o.Store.DeleteApp(ctx, id)
	} else {
		app, err = writeIf(a, p, what, nil, func(fn func(*route.App) (*route.App, error)) error {
			return a.o.Store.UpdateApp(ctx, id, fn)
		})
	}
	if err != nil {
		return 0, nil, a.missing(err, "app", id)
	}
	if err := a.recheckAppRefs(ctx, id, app); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// recheckAppRefs lists what names app again after deleteApp deleted it,
// and puts it back (409) if a reference appeared meanwhile.
//
// deleteApp and putDomain each write first and then read the other's key:
// deleteApp deletes the app and then lists the mappings, putDomain writes
// the mapping and then reads the app. Whichever of the two writes lands
// second, its request reads after the other's write and backs out, so a
// mapping to a deleted app never stands; when the reads interleave both
// may back out, and both answer 409 for the platform to retry. A host
// key written before the delete is caught here too. An app whose stored
// value did not read (app nil) is not put back: there is nothing to put.
func (a *API) recheckAppRefs(ctx context.Context, id string, app *route.App) error {
	refs, err := a.appRefs(ctx, id)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	if app == nil {
		return stillNamed(id, refs)
	}
	if err := a.o.Store.PutApp(ctx, app); err != nil {
		return fmt.Errorf("app %q: restoring it after %s named it during its delete: %w", id, listSome(refs, maxListed), err)
	}
	return stillNamed(id, refs)
}

// stillNamed is deleteApp's 409 for an app that refs name.
func stillNamed(id string, refs []string) error {
	return &statusError{http.StatusConflict, fmt.Sprintf(
		"app %q is still named by %s; delete those first (a host key that serves other apps too: PUT it without %q), so that no later app named %q inherits them",
		id, listSome(refs, maxListed), id, id)}
}

// appRefs names the domain mappings and host keys that name app id,
// domains first, each sorted. Host keys are listed whole: there is one
// per host machine, a few hundred where mappings may be a million.
func (a *API) appRefs(ctx context.Context, id string) ([]string, error) {
	ds, err := a.domainsNaming(ctx, id)
	if err != nil {
		return nil, err
	}
	ks, err := a.o.Store.ListHostKeys(ctx)
	if err != nil {
		return nil, err
	}
	var doms, keys []string
	for _, d := range ds {
		s := "domain " + d.Domain
		if d.Verified {
			s += " (verified)"
		}
		doms = append(doms, s)
	}
	for _, k := range ks {
		if !slices.Contains(k.Apps, id) {
			continue
		}
		s := "host key " + k.HostID
		if n := len(k.Apps) - 1; n > 0 {
			s += fmt.Sprintf(" (also serves %d other app%s)", n, map[bool]string{true: "s"}[n > 1])
		}
		keys = append(keys, s)
	}
	slices.Sort(doms)
	slices.Sort(keys)
	return append(doms, keys...), nil
}

// domainsNaming returns the mappings that name app id, as ListDomains
// would show them. Listing every mapping (each value read and decoded)
// costs seconds and gigabytes at a million, twice per DELETE; so the names
// come from the routing table once it holds everything the domains bucket
// held when asked (Store.DomainsNaming), and each is read back, since the
// table may be newer and the read gives the current verified state. That
// keeps recheckAppRefs' order: a mapping written before the app's delete
// is in the bucket then, so in the table, and one written after reads the
// app gone and backs out itself. When the table cannot say in time
// (loading, cut off, not running here) the whole list answers, as before.
//
// An app that many mappings name (one product serving thousands of
// customers' domains) has them listed too: each read back is a round
// trip (~60 us, where the list takes ~6 us a mapping of any app: 1.3 s
// against 0.13 s for 20,000 naming the app), so past maxReadBack (some
// 60 ms of reads) the DELETE costs what it did before the table.
func (a *API) domainsNaming(ctx context.Context, id string) ([]*route.Domain, error) {
	names, ok, err := a.o.Store.DomainsNaming(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok || len(names) > maxReadBack {
		ds, err := a.o.Store.ListDomains(ctx)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(ds, func(d *route.Domain) bool { return d.App != id }), nil
	}
	ds := make([]*route.Domain, 0, len(names))
	for _, name := range names {
		d, err := a.o.Store.GetDomain(ctx, name)
		switch {
		case errors.Is(err, a.o.NotFound) || a.badValue(err): // ListDomains skips both too
			continue
		case err != nil:
			return nil, err
		case d.App == id:
			ds = append(ds, d)
		}
	}
	return ds, nil
}

// maxReadBack is how many mappings naming an app domainsNaming reads back
// one by one; past it, it lists them all.
const maxReadBack = 1000

// maxListed is how many items a conflict names before it only counts the
// rest: enough to act on, and a problem detail stays one screen.
const maxListed = 20

// listSome joins the first n items and counts the rest.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// ---- domains

type domainBody struct {
	App string `json:"app"`
	// Domain, Token and Verified may repeat what a GET answered, so that
	// a mapping's GET body can be PUT back (ctl domains get, edit, put
	// -f), as every item's can. Domain must then name the path's domain;
	// Token and Verified are the gateway's to set (a token when the
	// mapping is made, verified by the verify call), so they must be the
	// mapping's as it is stored: a body that says otherwise is refused
	// rather than silently not done (readOnly).
	Domain   *string `json:"domain"`
	Token    *string `json:"token"`
	Verified *bool   `json:"verified"`
}

// readOnly checks the token and verified state b repeats against cur,
// the mapping of domain name as stored (nil: none).
func (b *domainBody) readOnly(name string, cur *route.Domain) error {
	if b.Token != nil {
		switch {
		case cur == nil:
			return badInput("token: domain %q is not mapped yet, so it has no token to repeat; leave token out, and the gateway makes one", name)
		case *b.Token != cur.Token:
			return badInput("token: the body says %q but the mapping's is %q; the gateway makes a mapping's token (a new one when it moves to another app), so leave token out or repeat the current one", *b.Token, cur.Token)
		}
	}
	if b.Verified != nil {
		switch verified := cur != nil && cur.Verified; {
		case *b.Verified && !verified:
			return badInput("verified: domain %q is not verified; POST /api/v3/domains/%s/verify verifies it, and a PUT cannot", name, name)
		case !*b.Verified && verified:
			return badInput("verified: domain %q is verified; to make it unverified, DELETE the mapping and PUT it again", name)
		}
	}
	return nil
}

func (a *API) listDomains(r *http.Request) (int, any, error) {
	p, err := pageOf(r)
	if err != nil {
		return 0, nil, err
	}
	name := func(x *route.Domain) string { return x.Domain }
	return answerList(r.Context(), p, "domains", a.o.Store.PageDomains, a.o.Store.ListDomains, name, name)
}

func (a *API) getDomain(r *http.Request) (int, any, error) {
	name, err := normalizeDomain(r.PathValue("domain"))
	if err != nil {
		return 0, nil, err
	}
	d, err := a.o.Store.GetDomain(r.Context(), name)
	if err != nil {
		return 0, nil, a.missing(err, "domain", name)
	}
	return http.StatusOK, d, nil
}

// putDomain maps a custom domain to an app. The mapping starts unverified
// with a fresh token; a re-PUT to the same app keeps token and state, a
// move to another app starts over. A verified mapping is not moved (409):
// that would cut the app that proved the domain off at once, on nothing
// but the new app's word; the platform deletes the mapping first. The
// read and the write are one compare-and-set, so a verify that completes
// between them makes the PUT read again and answer that 409; verifyDomain
// re-checks for the other order.
func (a *API) putDomain(r *http.Request) (int, any, error) {
	ctx := r.Context()
	name, err := normalizeDomain(r.PathValue("domain"))
	if err != nil {
		return 0, nil, err
	}
	var b domainBody
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	if b.Domain != nil && strings.TrimSuffix(strings.ToLower(*b.Domain), ".") != name {
		return 0, nil, badInput("domain: the body says %q but the path says %q", *b.Domain, name)
	}
	if err := checkAppID(b.App); err != nil {
		return 0, nil, badInput("app: %v", err)
	}
	if err := a.checkDomainFree(ctx, name); err != nil {
		return 0, nil, err
	}
	if _, err := a.o.Store.GetApp(ctx, b.App); err != nil {
		if errors.Is(err, a.o.NotFound) {
			return 0, nil, badInput("app: %q does not exist; create it first", b.App)
		}
		return 0, nil, err
	}
	// over is what the mapping becomes in place of cur (nil: none), or
	// cur itself with errUnchanged when it maps the domain to b.App.
	over := func(cur *route.Domain) (*route.Domain, error) {
		if err := b.readOnly(name, cur); err != nil {
			return nil, err
		}
		switch {
		case cur != nil && cur.App == b.App:
			return cur, errUnchanged
		case cur != nil && cur.Verified:
			return nil, &statusError{http.StatusConflict, fmt.Sprintf(
				"domain %q is verified for app %q; to map it to %q, DELETE the mapping first, and %q proves it again", name, cur.App, b.App, b.App)}
		}
		return &route.Domain{Domain: name, App: b.App, Token: newToken()}, nil
	}
	// One compare-and-set, conditions or none: a verify landing between
	// a read and a write of its own would be overwritten, the verified
	// mapping moved after all.
	var old, d *route.Domain
	p, what := conds(r), fmt.Sprintf("domain %q", name)
	err = a.o.Store.UpdateDomain(ctx, name, func(cur *route.Domain) (*route.Domain, error) {
		if err := check(p, cur, what); err != nil {
			return nil, err
		}
		old = cur
		d, err = over(cur)
		return d, err
	})
	if a.badValue(err) {
		if !p.none() {
			return 0, nil, unreadable(what)
		}
		// a value that does not read is replaced by a fresh, unverified
		// mapping (the store's update leaves it alone)
		old = nil
		if d, err = over(nil); err == nil {
			err = a.o.Store.PutDomain(ctx, d)
		}
	}
	if errors.Is(err, errUnchanged) {
		return http.StatusOK, d, nil
	}
	if err != nil {
		return 0, nil, err
	}
	// A DELETE of the app may have listed the mappings before the write
	// above; reading the app after it closes that (recheckAppRefs).
	if _, err := a.o.Store.GetApp(ctx, b.App); err != nil {
		if !errors.Is(err, a.o.NotFound) {
			return 0, nil, err
		}
		if err := a.undoPutDomain(ctx, d, old); err != nil {
			return 0, nil, err
		}
		return 0, nil, &statusError{http.StatusConflict, fmt.Sprintf(
			"app %q was deleted while domain %q was mapped to it; the mapping is not kept", b.App, name)}
	}
	return http.StatusOK, d, nil
}

// undoPutDomain takes back mapping d, restoring old (nil: none), unless
// another request has replaced d meanwhile.
func (a *API) undoPutDomain(ctx context.Context, d, old *route.Domain) error {
	cur, err := a.o.Store.GetDomain(ctx, d.Domain)
	switch {
	case errors.Is(err, a.o.NotFound):
		return nil
	case err != nil:
		return err
	case cur.App != d.App || cur.Token != d.Token:
		return nil
	case old != nil:
		err = a.o.Store.PutDomain(ctx, old)
	default:
		err = a.o.Store.DeleteDomain(ctx, d.Domain)
		if errors.Is(err, a.o.NotFound) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("domain %q: taking back its mapping to deleted app %q: %w", d.Domain, d.App, err)
	}
	return nil
}

// checkDomainFree refuses a custom domain inside one of the gateway's own
// zones: names there are {app}.{zone} already.
func (a *API) checkDomainFree(ctx context.Context, name string) error {
	zones, err := a.o.Store.ListZones(ctx)
	if err != nil {
		return err
	}
	for _, z := range zones {
		if name == z.Name || strings.HasSuffix(name, "."+z.Name) {
			return badInput("domain %q is inside the gateway's zone %q; its apps are reached as {app}.%s", name, z.Name, z.Name)
		}
	}
	return nil
}

// newToken returns a fresh verification token: 128 random bits, URL-safe.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (a *API) deleteDomain(r *http.Request) (int, any, error) {
	name, err := normalizeDomain(r.PathValue("domain"))
	if err != nil {
		return 0, nil, err
	}
	if p := conds(r); p.none() {
		err = a.o.Store.DeleteDomain(r.Context(), name)
	} else {
		_, err = writeIf(a, p, fmt.Sprintf("domain %q", name), nil, func(fn func(*route.Domain) (*route.Domain, error)) error {
			return a.o.Store.UpdateDomain(r.Context(), name, fn)
		})
	}
	if err != nil {
		return 0, nil, a.missing(err, "domain", name)
	}
	return http.StatusNoContent, nil, nil
}

type verifyBody struct {
	Method string `json:"method"`
}

// verifyDomain checks a mapping's proof and marks it verified. "manual"
// is the platform vouching for the domain itself.
func (a *API) verifyDomain(r *http.Request) (int, any, error) {
	ctx := r.Context()
	name, err := normalizeDomain(r.PathValue("domain"))
	if err != nil {
		return 0, nil, err
	}
	var b verifyBody
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	switch b.Method {
	case "manual":
	case "txt", "cname", "http":
		if a.o.VerifyDomain == nil {
			return 0, nil, badInput("method: %q is not available yet; use \"manual\"", b.Method)
		}
	default:
		return 0, nil, badInput("method: must be manual, txt, cname or http, got %q", b.Method)
	}
	d, err := a.o.Store.GetDomain(ctx, name)
	if err != nil {
		return 0, nil, a.missing(err, "domain", name)
	}
	// A condition is checked before the proof, which may take seconds,
	// and again with the write.
	p, what := conds(r), fmt.Sprintf("domain %q", name)
	if err := check(p, d, what); err != nil {
		return 0, nil, err
	}
	if b.Method != "manual" {
		if err := a.o.VerifyDomain(ctx, *d, b.Method); err != nil {
			// verify's errors begin with its package name, which names
			// nothing the platform knows
			return 0, nil, &statusError{http.StatusUnprocessableEntity, fmt.Sprintf("proof by %s failed: %s", b.Method, strings.TrimPrefix(err.Error(), "verify: "))}
		}
	}
	// The mapping may have been deleted or moved to another app (a new
	// token) since it was read (a proof takes up to seconds; another
	// gateway's PUT can land at any time): writing back the copy read
	// would bring it back, verified, for the app it no longer belongs to.
	// The write is conditional on the mapping still being that one.
	var out *route.Domain
	err = a.o.Store.UpdateDomain(ctx, name, func(cur *route.Domain) (*route.Domain, error) {
		if cur == nil {
			return nil, &statusError{http.StatusNotFound, fmt.Sprintf("domain %q not found", name)}
		}
		if err := check(p, cur, what); err != nil {
			return nil, err
		}
		switch {
		case cur.App != d.App || cur.Token != d.Token:
			return nil, &statusError{http.StatusConflict, fmt.Sprintf("domain %q was changed while it was verified; verify it again", name)}
		case cur.Verified:
			out = cur
			return nil, errUnchanged
		}
		cur.Verified = true
		out = cur
		return cur, nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// errUnchanged ends an update that has nothing to write.
var errUnchanged = errors.New("api: nothing to change")

// ---- zones and records

type zoneBody struct {
	Name     *string  `json:"name"`
	Gateways []string `json:"gateways"`
	TTL      int      `json:"ttl"`
}

type recordBody struct {
	// Zone, Name and Type may repeat the path's, so that a record's GET
	// body can be PUT back; they must then name the same record.
	Zone   *string  `json:"zone"`
	Name   *string  `json:"name"`
	Type   *string  `json:"type"`
	TTL    int      `json:"ttl"`
	Values []string `json:"values"`
}

// sameRecord checks the record b names, if it names one, against the
// path's zone, name and type (already normalized).
func (b *recordBody) sameRecord(zone, name, typ string) error {
	if b.Zone != nil && strings.TrimSuffix(strings.ToLower(*b.Zone), ".") != zone {
		return badInput("zone: the body says %q but the path says %q", *b.Zone, zone)
	}
	if b.Name != nil {
		if n, err := recordName(*b.Name, zone); err != nil || n != name {
			return badInput("name: the body says %q but the path says %q", *b.Name, name)
		}
	}
	if b.Type != nil && strings.ToUpper(*b.Type) != typ {
		return badInput("type: the body says %q but the path says %q", *b.Type, typ)
	}
	return nil
}

func (a *API) listZones(r *http.Request) (int, any, error) {
	p, err := pageOf(r)
	if err != nil {
		return 0, nil, err
	}
	name := func(x *route.Zone) string { return x.Name }
	return answerList(r.Context(), p, "zones", a.o.Store.PageZones, a.o.Store.ListZones, name, name)
}

func (a *API) zone(r *http.Request) (route.Zone, error) {
	name, err := normalizeZone(r.PathValue("zone"))
	if err != nil {
		return route.Zone{}, err
	}
	z, err := a.o.Store.GetZone(r.Context(), name)
	if err != nil {
		return route.Zone{}, a.missing(err, "zone", name)
	}
	return *z, nil
}

func (a *API) getZone(r *http.Request) (int, any, error) {
	z, err := a.zone(r)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, z, nil
}

func (a *API) putZone(r *http.Request) (int, any, error) {
	name, err := normalizeZone(r.PathValue("zone"))
	if err != nil {
		return 0, nil, err
	}
	var b zoneBody
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	if b.Name != nil && strings.TrimSuffix(strings.ToLower(*b.Name), ".") != name {
		return 0, nil, badInput("name: the body says %q but the path says %q", *b.Name, name)
	}
	z := route.Zone{Name: name, Gateways: b.Gateways, TTL: b.TTL}
	if err := checkZone(&z); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	if err := a.checkZoneFree(ctx, name); err != nil {
		return 0, nil, err
	}
	if err := a.checkOuterRecords(ctx, name); err != nil {
		return 0, nil, err
	}
	p, what := conds(r), fmt.Sprintf("zone %q", name)
	if !p.none() { // checked before the purge too, so that a refused write changes nothing
		cur, err := a.o.Store.GetZone(ctx, name)
		switch {
		case a.badValue(err):
			return 0, nil, unreadable(what)
		case err != nil && !errors.Is(err, a.o.NotFound):
			return 0, nil, err
		}
		if err := check(p, cur, what); err != nil {
			return 0, nil, err
		}
	}
	if err := a.purgeOldRecords(ctx, name); err != nil {
		return 0, nil, err
	}
	if p.none() {
		err = a.o.Store.PutZone(ctx, &z)
	} else {
		_, err = writeIf(a, p, what, &z, func(fn func(*route.Zone) (*route.Zone, error)) error {
			return a.o.Store.UpdateZone(ctx, name, fn)
		})
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, z, nil
}

// purgeOldRecords deletes the records stored under zone when there is no
// such zone: ones a DELETE of the zone failed to remove (it answered 500
// with the zone gone, so it cannot be retried) or that a PUT racing it
// wrote. A zone created under the same name must not serve them. Two
// creations of one zone at once may purge a record PUT between them.
func (a *API) purgeOldRecords(ctx context.Context, zone string) error {
	_, err := a.o.Store.GetZone(ctx, zone)
	if err == nil || a.badValue(err) { // there is a zone, though it does not read
		return nil
	}
	if !errors.Is(err, a.o.NotFound) {
		return err
	}
	return a.o.Store.DeleteRecords(ctx, zone)
}

// checkZoneFree is checkDomainFree the other way round: a zone over an
// existing custom domain would hand the domain's traffic to whichever app
// has its first label as id, since {app}.{zone} is looked up before the
// mappings (DESIGN §2 step 3). The same window as deleteApp's is left
// between this listing and the write.
func (a *API) checkZoneFree(ctx context.Context, zone string) error {
	ds, err := a.o.Store.ListDomains(ctx)
	if err != nil {
		return err
	}
	var under []string
	for _, d := range ds {
		if d.Domain == zone || strings.HasSuffix(d.Domain, "."+zone) {
			under = append(under, d.Domain)
		}
	}
	if len(under) == 0 {
		return nil
	}
	slices.Sort(under)
	return &statusError{http.StatusConflict, fmt.Sprintf(
		"zone %q would hold mapped custom domains (%s), which apps named after their first label would take over ({app}.%s is looked up first); delete those mappings first",
		zone, listSome(under, maxListed), zone)}
}

// checkOuterRecords is checkInnerZone the other way round: the DNS
// server answers a name from the most specific zone it is in
// (internal/dns), so a new zone would silently stop the records an outer
// zone holds at or under its name from being served. Only a creation is
// checked: a zone already there answers for those names whatever this
// write says. One read per label above the zone, and the records of each
// outer zone found; the same window as checkZoneFree's is left.
func (a *API) checkOuterRecords(ctx context.Context, zone string) error {
	switch _, err := a.o.Store.GetZone(ctx, zone); {
	case err == nil || a.badValue(err):
		return nil
	case !errors.Is(err, a.o.NotFound):
		return err
	}
	for _, outer, ok := strings.Cut(zone, "."); ok; _, outer, ok = strings.Cut(outer, ".") {
		_, err := a.o.Store.GetZone(ctx, outer)
		if errors.Is(err, a.o.NotFound) {
			continue
		}
		if err != nil && !a.badValue(err) {
			return err
		}
		recs, err := a.o.Store.ListRecords(ctx, outer)
		if err != nil {
			return err
		}
		var under []string
		for _, r := range recs {
			if r.Name == zone || strings.HasSuffix(r.Name, "."+zone) {
				under = append(under, r.Name+" "+r.Type)
			}
		}
		if len(under) > 0 {
			return &statusError{http.StatusConflict, fmt.Sprintf(
				"zone %q would answer for records zone %q holds (%s), which would no longer be served; delete them from %q first",
				zone, outer, listSome(under, maxListed), outer)}
		}
	}
	return nil
}

// deleteZone removes the zone and then its records.
func (a *API) deleteZone(r *http.Request) (int, any, error) {
	ctx := r.Context()
	name, err := normalizeZone(r.PathValue("zone"))
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.o.Store.GetZone(ctx, name); err != nil && !a.badValue(err) { // a value that does not read is deleted too
		return 0, nil, a.missing(err, "zone", name)
	}
	if p := conds(r); p.none() {
		err = a.o.Store.DeleteZone(ctx, name)
	} else {
		_, err = writeIf(a, p, fmt.Sprintf("zone %q", name), nil, func(fn func(*route.Zone) (*route.Zone, error)) error {
			return a.o.Store.UpdateZone(ctx, name, fn)
		})
	}
	if err != nil {
		return 0, nil, a.missing(err, "zone", name)
	}
	if err := a.o.Store.DeleteRecords(ctx, name); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

func (a *API) listRecords(r *http.Request) (int, any, error) {
	p, err := pageOf(r)
	if err != nil {
		return 0, nil, err
	}
	z, err := a.zone(r)
	if err != nil {
		return 0, nil, err
	}
	page := func(ctx context.Context, after string, limit int) ([]*route.Record, bool, error) {
		from, err := recordAfter(after, z.Name)
		if err != nil {
			return nil, false, err
		}
		return a.o.Store.PageRecords(ctx, z.Name, from, limit)
	}
	whole := func(ctx context.Context) ([]*route.Record, error) { return a.o.Store.ListRecords(ctx, z.Name) }
	return answerList(r.Context(), p, "records", page, whole,
		func(x *route.Record) string { return x.Name + "/" + x.Type },
		func(x *route.Record) string { return x.Name + " " + x.Type }) // the order PageRecords pages in
}

// record resolves the zone, name and type of a record route.
func (a *API) record(r *http.Request) (zone, name, typ string, err error) {
	z, err := a.zone(r)
	if err != nil {
		return "", "", "", err
	}
	if name, err = recordName(r.PathValue("name"), z.Name); err != nil {
		return "", "", "", err
	}
	if typ, err = recordType(r.PathValue("type")); err != nil {
		return "", "", "", err
	}
	return z.Name, name, typ, nil
}

func (a *API) getRecord(r *http.Request) (int, any, error) {
	zone, name, typ, err := a.record(r)
	if err != nil {
		return 0, nil, err
	}
	// Read by its key, not through the zone's list, which skips a value
	// that does not decode: that answers 500 saying so, as every kind.
	rec, err := a.o.Store.GetRecord(r.Context(), zone, name, typ)
	if errors.Is(err, a.o.NotFound) {
		return 0, nil, &statusError{http.StatusNotFound, fmt.Sprintf("record %s %s not found", name, typ)}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, rec, nil
}

func (a *API) putRecord(r *http.Request) (int, any, error) {
	zone, name, typ, err := a.record(r)
	if err != nil {
		return 0, nil, err
	}
	var b recordBody
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	if err := b.sameRecord(zone, name, typ); err != nil {
		return 0, nil, err
	}
	rec := route.Record{Zone: zone, Name: name, Type: typ, TTL: b.TTL, Values: b.Values}
	if err := checkRecord(&rec); err != nil {
		return 0, nil, err
	}
	if err := a.checkCNAME(r.Context(), &rec); err != nil {
		return 0, nil, err
	}
	if err := a.checkInnerZone(r.Context(), &rec); err != nil {
		return 0, nil, err
	}
	if p := conds(r); p.none() {
		err = a.o.Store.PutRecord(r.Context(), &rec)
	} else {
		_, err = writeIf(a, p, fmt.Sprintf("record %s %s", name, typ), &rec, func(fn func(*route.Record) (*route.Record, error)) error {
			return a.o.Store.UpdateRecord(r.Context(), zone, name, typ, fn)
		})
	}
	if err != nil {
		return 0, nil, err
	}
	// A DELETE of the zone may have listed its records before the write
	// above; reading the zone after it closes that, as in putDomain.
	if _, err := a.o.Store.GetZone(r.Context(), zone); err != nil {
		if !errors.Is(err, a.o.NotFound) {
			return 0, nil, err
		}
		if err := a.o.Store.DeleteRecord(r.Context(), zone, name, typ); err != nil && !errors.Is(err, a.o.NotFound) {
			return 0, nil, fmt.Errorf("record %s %s: taking it back from deleted zone %q: %w", name, typ, zone, err)
		}
		return 0, nil, &statusError{http.StatusConflict, fmt.Sprintf(
			"zone %q was deleted while record %s %s was written; the record is not kept", zone, name, typ)}
	}
	return http.StatusOK, rec, nil
}

// checkCNAME refuses a record the DNS server would never serve: a CNAME
// answers every type at its name (RFC 1034 §3.6.2, internal/dns), so
// nothing may sit beside it, and it may not sit at the apex beside the
// zone's SOA and NS.
func (a *API) checkCNAME(ctx context.Context, rec *route.Record) error {
	if rec.Type == "CNAME" && rec.Name == rec.Zone {
		return badInput("a CNAME cannot be at the zone apex %s, beside its SOA and NS", rec.Zone)
	}
	// The gateway proves *.{zone} to its CA by DNS-01 (DESIGN §9),
	// adding TXT values at this name in the store (internal/dns's
	// ACMEZones); a CNAME there would answer for them, and the CA would
	// look for the proof where the CNAME points, so renewals would fail.
	if rec.Type == "CNAME" && rec.Name == dns.ACMEChallengeLabel+"."+rec.Zone {
		return badInput("a CNAME cannot be at %s: the gateway answers its DNS-01 challenges for *.%s there with TXT records", rec.Name, rec.Zone)
	}
	// The zone's NS names ns.{zone} (internal/dns), and a name server name
	// must not be an alias (RFC 2181 §10.3): resolvers such as BIND skip
	// it, and the zone stops resolving once they use its own NS set.
	if rec.Type == "CNAME" && rec.Name == dns.NSLabel+"."+rec.Zone {
		return badInput("a CNAME cannot be at %s: the zone's NS record names it, and a name server name must not be an alias (RFC 2181 §10.3); give it A or AAAA records instead", rec.Name)
	}
	// a loop of one: answered with the alias alone, failed by resolvers
	if rec.Type == "CNAME" && strings.ToLower(strings.TrimSuffix(rec.Values[0], ".")) == rec.Name {
		return badInput("a CNAME at %s cannot point to itself (RFC 1034 §3.6.2: a CNAME loop); resolvers fail the name", rec.Name)
	}
	// only the sets at this name: a zone may hold thousands, and
	// reading them all made every write slower than the last
	recs, err := a.o.Store.RecordsAt(ctx, rec.Zone, rec.Name)
	if err != nil {
		return err
	}
	for _, o := range recs {
		if o.Name == rec.Name && o.Type != rec.Type && (o.Type == "CNAME" || rec.Type == "CNAME") {
			return badInput("%s already holds %s records, and a CNAME owns its name alone (RFC 1034 §3.6.2); delete them first", rec.Name, o.Type)
		}
	}
	return nil
}

// checkInnerZone refuses a record the DNS server would never serve: it
// answers a name from the most specific zone the name is in
// (internal/dns), so a record in rec.Zone at or under another zone
// inside it is that zone's to answer. One read per label between the
// name and its zone; a wildcard label names no zone.
func (a *API) checkInnerZone(ctx context.Context, rec *route.Record) error {
	for n := rec.Name; n != rec.Zone && n != ""; { // a name is its zone or under it (recordName)
		if !strings.HasPrefix(n, "*.") {
			_, err := a.o.Store.GetZone(ctx, n)
			if err == nil || a.badValue(err) {
				return &statusError{http.StatusConflict, fmt.Sprintf(
					"record %s is inside zone %q, which answers for it, not %q; put it there", rec.Name, n, rec.Zone)}
			}
			if !errors.Is(err, a.o.NotFound) {
				return err
			}
		}
		_, n, _ = strings.Cut(n, ".")
	}
	return nil
}

func (a *API) deleteRecord(r *http.Request) (int, any, error) {
	zone, name, typ, err := a.record(r)
	if err != nil {
		return 0, nil, err
	}
	what := fmt.Sprintf("record %s %s", name, typ)
	if p := conds(r); p.none() {
		err = a.o.Store.DeleteRecord(r.Context(), zone, name, typ)
	} else {
		_, err = writeIf(a, p, what, nil, func(fn func(*route.Record) (*route.Record, error)) error {
			return a.o.Store.UpdateRecord(r.Context(), zone, name, typ, fn)
		})
	}
	if errors.Is(err, a.o.NotFound) {
		// named as getRecord and writeIf name it: missing's quotes would
		// make "name type" read as the record's name
		return 0, nil, &statusError{http.StatusNotFound, what + " not found"}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// ---- hosts

type hostKeyBody struct {
	HostID    *string  `json:"host_id"`
	PublicKey string   `json:"public_key"`
	Apps      []string `json:"apps"`
}

func (a *API) listHostKeys(r *http.Request) (int, any, error) {
	p, err := pageOf(r)
	if err != nil {
		return 0, nil, err
	}
	id := func(x *route.HostKey) string { return x.HostID }
	return answerList(r.Context(), p, "keys", a.o.Store.PageHostKeys, a.o.Store.ListHostKeys, id, id)
}

func hostID(r *http.Request) (string, error) {
	id := r.PathValue("host_id")
	if !hostIDRE.MatchString(id) {
		return "", badInput("host_id: 1 to 128 of [A-Za-z0-9._-], starting with a letter or digit, got %q", id)
	}
	return id, nil
}

func (a *API) getHostKey(r *http.Request) (int, any, error) {
	id, err := hostID(r)
	if err != nil {
		return 0, nil, err
	}
	k, err := a.o.Store.GetHostKey(r.Context(), id)
	if err != nil {
		return 0, nil, a.missing(err, "host key", id)
	}
	return http.StatusOK, k, nil
}

func (a *API) putHostKey(r *http.Request) (int, any, error) {
	id, err := hostID(r)
	if err != nil {
		return 0, nil, err
	}
	var b hostKeyBody
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	if b.HostID != nil && *b.HostID != id {
		return 0, nil, badInput("host_id: the body says %q but the path says %q", *b.HostID, id)
	}
	k := route.HostKey{HostID: id, PublicKey: b.PublicKey, Apps: b.Apps}
	if err := checkHostKey(&k); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	// A key naming an app that does not exist would pass to whichever
	// app is created under that id later, as deleteApp explains; so,
	// like a domain mapping, it may name existing apps only.
	if missing, err := a.missingApps(ctx, k.Apps); err != nil {
		return 0, nil, err
	} else if missing >= 0 {
		return 0, nil, badInput("apps[%d]: %q does not exist; create it first", missing, k.Apps[missing])
	}
	var old *route.HostKey
	if p := conds(r); p.none() {
		old, err = a.o.Store.GetHostKey(ctx, id)
		if errors.Is(err, a.o.NotFound) || a.badValue(err) { // a value that does not read is replaced
			old = nil
		} else if err != nil {
			return 0, nil, err
		}
		err = a.o.Store.PutHostKey(ctx, &k)
	} else {
		old, err = writeIf(a, p, fmt.Sprintf("host key %q", id), &k, func(fn func(*route.HostKey) (*route.HostKey, error)) error {
			return a.o.Store.UpdateHostKey(ctx, id, fn)
		})
	}
	if err != nil {
		return 0, nil, err
	}
	// A DELETE of an app may have listed the keys before the write above;
	// reading the apps after it closes that, as in putDomain.
	missing, err := a.missingApps(ctx, k.Apps)
	if err != nil {
		return 0, nil, err
	}
	if missing >= 0 {
		if err := a.undoPutHostKey(ctx, &k, old); err != nil {
			return 0, nil, err
		}
		return 0, nil, &statusError{http.StatusConflict, fmt.Sprintf(
			"app %q was deleted while host key %q was written naming it; the key is not kept", k.Apps[missing], id)}
	}
	return http.StatusOK, k, nil
}

// missingApps returns the index of the first of ids that is not an
// app, or -1 when all are. Each is read by its key: a key names a few
// apps, and the platform's whole list may hold a million.
func (a *API) missingApps(ctx context.Context, ids []string) (int, error) {
	for i, id := range ids {
		_, err := a.o.Store.GetApp(ctx, id)
		switch {
		case errors.Is(err, a.o.NotFound) || a.badValue(err): // as the whole list, which skips a value that does not read
			return i, nil
		case err != nil:
			return 0, err
		}
	}
	return -1, nil
}

// undoPutHostKey takes back enrolment k, restoring old (nil: none),
// unless another request has replaced k meanwhile.
func (a *API) undoPutHostKey(ctx context.Context, k, old *route.HostKey) error {
	cur, err := a.o.Store.GetHostKey(ctx, k.HostID)
	switch {
	case errors.Is(err, a.o.NotFound):
		return nil
	case err != nil:
		return err
	case cur.PublicKey != k.PublicKey || !slices.Equal(cur.Apps, k.Apps):
		return nil
	case old != nil:
		err = a.o.Store.PutHostKey(ctx, old)
	default:
		err = a.o.Store.DeleteHostKey(ctx, k.HostID)
		if errors.Is(err, a.o.NotFound) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("host key %q: taking it back after an app it names was deleted: %w", k.HostID, err)
	}
	return nil
}

func (a *API) deleteHostKey(r *http.Request) (int, any, error) {
	id, err := hostID(r)
	if err != nil {
		return 0, nil, err
	}
	if p := conds(r); p.none() {
		err = a.o.Store.DeleteHostKey(r.Context(), id)
	} else {
		_, err = writeIf(a, p, fmt.Sprintf("host key %q", id), nil, func(fn func(*route.HostKey) (*route.HostKey, error)) error {
			return a.o.Store.UpdateHostKey(r.Context(), id, fn)
		})
	}
	if err != nil {
		return 0, nil, a.missing(err, "host key", id)
	}
	return http.StatusNoContent, nil, nil
}

// listHosts pages in memory: discovery holds every host already.
func (a *API) listHosts(r *http.Request) (int, any, error) {
	p, err := pageOf(r)
	if err != nil {
		return 0, nil, err
	}
	var hosts []route.HostInfo
	if a.o.Hosts != nil {
		hosts = a.o.Hosts()
	}
	if p.paged {
		hosts = slices.DeleteFunc(slices.Clone(hosts), func(h route.HostInfo) bool { return h.HostID <= p.after })
	} else {
		hosts = slices.Clone(hosts)
	}
	slices.SortFunc(hosts, func(x, y route.HostInfo) int { return strings.Compare(x.HostID, y.HostID) })
	if !p.paged {
		return http.StatusOK, map[string]any{"hosts": nonNil(hosts)}, nil
	}
	more := len(hosts) > p.limit
	hosts = hosts[:min(len(hosts), p.limit)]
	return http.StatusOK, listed("hosts", hosts, nextOf(hosts, more, func(x route.HostInfo) string { return x.HostID })), nil
}

// answerList is a list route's answer under field: the page p asks for,
// its "next" the cursor of its last item, or with no paging the whole
// list, sorted by order (the order pages come in).
func answerList[T any](ctx context.Context, p pageReq, field string,
	page func(ctx context.Context, after string, limit int) ([]*T, bool, error),
	whole func(ctx context.Context) ([]*T, error),
	cursor, order func(*T) string,
) (int, any, error) {
	if p.paged {
		items, more, err := page(ctx, p.after, p.limit)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, listed(field, items, nextOf(items, more, cursor)), nil
	}
	items, err := whole(ctx)
	if err != nil {
		return 0, nil, err
	}
	slices.SortFunc(items, func(x, y *T) int { return strings.Compare(order(x), order(y)) })
	return http.StatusOK, map[string]any{field: nonNil(items)}, nil
}

// nextOf is a page's "next": the last item's cursor when more follow.
func nextOf[T any](items []T, more bool, cursor func(T) string) string {
	if !more || len(items) == 0 {
		return ""
	}
	return cursor(items[len(items)-1])
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
