package cors

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// MaxAge is the Access-Control-Max-Age of every allowed preflight, in
// seconds.
const MaxAge = "600"

// Policy is one app's CORS settings.
type Policy struct {
	// Origins are the exact origins allowed, like "https://app.example".
	Origins []string
	// AllowCredentials adds Access-Control-Allow-Credentials: true.
	AllowCredentials bool
	// AllowHeaders lists the request headers a preflight may ask for; empty,
	// or "*" among them, means the browser's requested headers are echoed
	// back.
	AllowHeaders []string
}

// Allowed reports whether origin is on p's list. Comparison is exact except
// for the case of the scheme and host, which browsers already lower-case.
func (p Policy) Allowed(origin string) bool {
	if origin == "" || origin == "null" {
		return false
	}
	for _, o := range p.Origins {
		if strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// IsPreflight reports whether r is a CORS preflight: OPTIONS with an
// Access-Control-Request-Method header.
func IsPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

// Preflight answers a preflight: it writes the Access-Control-* headers to
// h and returns the status, 204 for an allowed origin and method, 403
// otherwise (and then writes no Access-Control-Allow-* header). An allowed
// one asking for Private Network Access gets it.
func (p Policy) Preflight(r *http.Request, h http.Header) int {
	origin := r.Header.Get("Origin")
	method := r.Header.Get("Access-Control-Request-Method")
	h.Add("Vary", "Origin")
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Add("Vary", "Access-Control-Request-Private-Network")
	if !p.Allowed(origin) || !token(method) {
		return http.StatusForbidden
	}
	asked := requestedHeaders(r.Header.Values("Access-Control-Request-Headers"))
	if asked == nil {
		return http.StatusForbidden
	}
	allow := asked
	// "*" among them is any header, as its writer meant: no request
	// header is named "*", so read literally the list refused every
	// preflight that asked for one. The headers asked for are named
	// back rather than "*", which a browser reads literally when the
	// request carries credentials.
	if len(p.AllowHeaders) > 0 && !slices.Contains(p.AllowHeaders, "*") {
		for _, a := range asked {
			if !containsFold(p.AllowHeaders, a) {
				return http.StatusForbidden
			}
		}
		allow = p.AllowHeaders
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", method)
	if len(allow) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(allow, ", "))
	}
	h.Set("Access-Control-Max-Age", MaxAge)
	if p.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	// Private Network Access: a page on a public origin calling a
	// gateway on a private address asks for this, and only the gateway
	// can answer (the host never sees a preflight). The app listing the
	// origin is the opt-in the browser asks for.
	if strings.EqualFold(r.Header.Get("Access-Control-Request-Private-Network"), "true") {
		h.Set("Access-Control-Allow-Private-Network", "true")
	}
	return http.StatusNoContent
}

// exposed are the gateway's own response fields a page may read;
// WWW-Authenticate among them, where a 401 or 403 says why (RFC 6750:
// invalid_token, insufficient_scope), so that a page knows whether to get
// a new token or ask for more scope.
const exposed = "X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit, RateLimit-Policy, Retry-After, X-Request-Id, WWW-Authenticate"

// hostFields are the CORS response fields a host's answer loses: the
// gateway's allow-list is the only one (Respond).
var hostFields = [...]string{"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
	"Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Max-Age"}

// Respond sets the CORS headers of an actual (non-preflight) response to a
// request from origin: first it removes the Access-Control-Allow-* and
// Max-Age fields the host set, so only the gateway decides who may read
// the response; then, when p lists any origin, Vary: Origin, since the
// answer depends on it whether it allows this one or not (without it a
// cache that kept the answer to a request without Origin, or from
// another origin, would hand it to an allowed origin, whose browser then
// refuses it: Fetch's "CORS protocol and HTTP caches"); then, for an
// allowed origin only, Access-Control-Allow-Origin and, if the app allows
// them, credentials, and the gateway's fields added to the host's
// Access-Control-Expose-Headers. The host's list is kept: it names only
// which fields an allowed reader sees, and without an allowed origin a
// browser reads none.
func (p Policy) Respond(origin string, h http.Header) {
	for _, k := range hostFields {
		delete(h, k) // canonical already: h.Del would only canonicalize it again
	}
	if len(p.Origins) == 0 {
		return // no origin is ever allowed: the answer does not depend on it
	}
	// The field may already say so: the host's Vary, or a peer
	// gateway's answer to a forward, to which the owner's gateway has
	// applied this same policy.
	if !httpguts.HeaderValuesContainsToken(h["Vary"], "Origin") {
		h.Add("Vary", "Origin")
	}
	if !p.Allowed(origin) {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if p.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	switch have := h.Get("Access-Control-Expose-Headers"); {
	case have == "":
		h.Set("Access-Control-Expose-Headers", exposed)
	case !strings.Contains(have, exposed):
		h.Set("Access-Control-Expose-Headers", have+", "+exposed)
	}
}

// Validate reports origins that can never match a browser's Origin header:
// each must be scheme://host[:port] with no path, query or wildcard.
func (p Policy) Validate() error {
	for _, o := range p.Origins {
		if err := ValidOrigin(o); err != nil {
			return err
		}
	}
	for _, h := range p.AllowHeaders {
		if !token(h) {
			return fmt.Errorf("cors: allow_headers: %q is not a header name", h)
		}
	}
	return nil
}

// ValidOrigin checks one allow-list entry.
func ValidOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.Contains(o, "*") {
		return fmt.Errorf("cors: origin %q must be an exact scheme://host[:port]", o)
	}
	return nil
}

// requestedHeaders splits Access-Control-Request-Headers values into header
// names; nil when one of them is not a valid name.
func requestedHeaders(vals []string) []string {
	out := []string{}
	for _, v := range vals {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			if !token(f) {
				return nil
			}
			out = append(out, strings.ToLower(f))
		}
	}
	return out
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// token reports whether s is an RFC 9110 token (a method or header name).
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
