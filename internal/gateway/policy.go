package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
	"github.com/gatehouse-dev/gatehouse/internal/policy"
	"github.com/gatehouse-dev/gatehouse/internal/problem"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// policy is step 8: the app's ordered path rules, first match wins,
// default allow, evaluated on every cleaned reading of the path as sent
// (internal/policy) so that no encoding walks around a deny. A denied
// request gets 403 and is counted in gatehouse_policy_denied_total.
func (g *Gateway) policy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq := route.RequestFrom(r.Context())
		if rq == nil || rq.Match.Kind != route.KindApp || len(rq.Match.App.Policy) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if why := deniedByPolicy(rq.Match.App.Policy, r); why != policyAllows {
			if g.edge.denied != nil {
				g.edge.denied.WithLabelValues(rq.Match.App.ID).Inc()
			}
			detail := "this app's policy does not allow " + r.Method + " on this path"
			switch why {
			case tooManyOverrides:
				detail = "this request names more than 4 override methods or paths (X-HTTP-Method-Override and its kin, the query's _method, X-Original-URL, X-Rewrite-URL): the app's policy cannot be checked on them all"
			case overBudget:
				detail = "this request's path and override fields take more reading than the app's policy allows a request: it cannot be shown to allow it"
			}
			problem.Write(w, http.StatusForbidden, detail)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// denial says why the policy layer refuses a request, or that it does not.
type denial int

const (
	policyAllows     denial = iota
	deniedByRule            // a rule denies a reading
	tooManyOverrides        // more than maxOverrides methods or paths named
	overBudget              // the readings would take more than policy.MaxWork
)

// deniedByPolicy converts the app's rules (same shape) and checks r's
// escaped path, the bytes the host will receive, with r's method — and
// with every method and path r asks the host to take instead of its own.
// Rails (Rack::MethodOverride), Express's method-override and many others
// serve a POST carrying X-HTTP-Method-Override: DELETE as a DELETE;
// IIS's URL Rewrite and older Symfony and Zend serve the path in
// X-Original-URL or X-Rewrite-URL. Passed on unchecked, they would walk
// around a deny by method or path; stripped, they would break the hosts
// that rely on them. So each is a reading too, and any denied denies.
func deniedByPolicy(rules []route.PolicyRule, r *http.Request) denial {
	var buf [16]policy.Rule
	pr := buf[:0]
	for _, x := range rules {
		pr = append(pr, policy.Rule(x))
	}
	path := r.URL.EscapedPath()
	if r.URL.Opaque != "" {
		// An absolute-form target with no authority ("http:admin") has an
		// opaque part and no path, and the host gets the opaque part as its
		// target ("GET admin"), which Werkzeug's router reads as /admin.
		// Check reads a path as rooted, so it reads this one as the host.
		path = r.URL.Opaque
	}
	var methods, paths []string
	nPaths := 0
	for k, vs := range r.Header {
		switch {
		case overrideField(k, methodOverrides):
			// Each method of a list too: Express's method-override takes
			// the first (Node joins a repeated field into one list).
			for _, v := range vs {
				for more := true; more; {
					var m string
					m, v, more = strings.Cut(v, ",")
					if len(methods) == maxOverrides {
						return tooManyOverrides
					}
					methods = append(methods, strings.ToUpper(strings.TrimSpace(m)))
				}
			}
		case overrideField(k, pathOverrides):
			for _, v := range vs {
				if nPaths++; nPaths > maxOverrides {
					return tooManyOverrides
				}
				paths = appendOverridePaths(paths, v)
			}
		}
	}
	methods = appendQueryMethods(methods, r.URL.RawQuery)
	if len(methods) > maxOverrides {
		return tooManyOverrides
	}
	// One budget for every check of this request: its paths and methods
	// together are what one request can make the layer read. Each path
	// is read once, its readings decided for every method.
	var work policy.Work
	if methods == nil && paths == nil {
		ok, i := policy.CheckWork(pr, []string{r.Method}, path, &work)
		return judged(ok, i)
	}
	methods = distinctMethods(pr, append(methods, r.Method))
	if ok, i := policy.CheckWork(pr, methods, path, &work); !ok {
		return judged(ok, i)
	}
	for _, p := range paths {
		if ok, i := policy.CheckWork(pr, methods, p, &work); !ok {
			return judged(ok, i)
		}
	}
	return policyAllows
}

// judged is the denial of CheckWork's answer: denied with no deciding
// rule is its budget spent.
func judged(ok bool, rule int) denial {
	switch {
	case ok:
		return policyAllows
	case rule < 0:
		return overBudget
	}
	return deniedByRule
}

// distinctMethods returns methods less those that decide as one before
// them: repeats, and every method no rule names after the first (they
// are all decided by the same rules, policy.Named). Each one kept is a
// decision of every reading of every path.
func distinctMethods(rules []policy.Rule, methods []string) []string {
	out := methods[:0]
	other := false
	for _, m := range methods {
		if !policy.Named(rules, m) {
			if !other {
				other = true
				out = append(out, m)
			}
			continue
		}
		if !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, m) }) {
			out = append(out, m)
		}
	}
	return out
}

// appendQueryMethods appends to methods each _method in the query:
// Symfony (with its method parameter override on, as Laravel has it) and
// gorilla/handlers read the query's _method as the method when a form's
// is absent, so POST /items/1?_method=DELETE is a DELETE to them. A
// _method in the body cannot be read at the edge; one in the query can.
// The query is split on ';' as well as '&', as step 7 splits it (Rack 2,
// older Python and Go), and a name is read as PHP names it
// (httpwire.PHPName: ?.method=, ?+_method= and ?_method%00x= are each a
// _method to Laravel).
func appendQueryMethods(methods []string, query string) []string {
	for query != "" {
		kv := query
		query = ""
		for i := 0; i < len(kv); i++ {
			if kv[i] == '&' || kv[i] == ';' {
				kv, query = kv[:i], kv[i+1:]
				break
			}
		}
		k, v, _ := strings.Cut(kv, "=")
		// Every name PHP reads as _method has "method" as written. It is
		// decoded as PHP decodes it: a strict decode skipped a name with
		// a bad escape, and ?_method%00%zz= is PHP's _method.
		if k := httpwire.PHPDecode(k); !strings.Contains(k, "method") || httpwire.PHPName(k) != "_method" {
			continue
		}
		if d, err := url.QueryUnescape(v); err == nil {
			v = d
		}
		methods = append(methods, strings.ToUpper(strings.TrimSpace(v)))
	}
	return methods
}

// maxOverrides bounds the methods (the override fields' list items and
// the query's _methods together), and apart the paths (override field
// values), one request may name: a client sends one, a host reads one,
// and a request naming more is denied. Each method is looked up among
// every rule's methods (distinctMethods) before the policy's budget
// applies: ten thousand override methods to an app whose rules name many
// were 50 ms of a core per request.
const maxOverrides = 4

// The fields hosts read as the request's real method or path, lower case
// with '-' (overrideField reads '_' as '-', as CGI-style hosts do).
var (
	methodOverrides = []string{"x-http-method-override", "x-http-method", "x-method-override"}
	pathOverrides   = []string{"x-original-url", "x-rewrite-url"}
)

func overrideField(k string, names []string) bool {
	for _, n := range names {
		if len(k) == len(n) && httpwire.HasFieldPrefix(k, n) {
			return true
		}
	}
	return false
}

// appendOverridePaths appends the escaped paths a host may read in an
// override URL value to paths: the path of the value parsed as a URL (a
// path with or without a query, or an absolute URL), and for a value that
// starts with '/' or does not parse, the value itself up to a query or
// fragment. The two differ for "//admin/x": a URL parser takes "admin"
// for a host name and "/x" for the path, a host that reads the field as
// a path (as IIS sets it) serves /admin/x.
func appendOverridePaths(paths []string, v string) []string {
	v = strings.TrimSpace(v)
	parsed := ""
	if u, err := url.Parse(v); err == nil && (u.Path != "" || u.RawPath != "") {
		parsed = u.EscapedPath()
		paths = append(paths, parsed)
	}
	if parsed == "" || strings.HasPrefix(v, "/") {
		if i := strings.IndexAny(v, "?#"); i >= 0 {
			v = v[:i]
		}
		if v != parsed {
			paths = append(paths, v)
		}
	}
	return paths
}
