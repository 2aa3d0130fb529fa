// Custom-domain proofs (DESIGN §7): [Domain] checks that whoever asked for
// a mapping controls the domain, by one of three methods:
//
//   - "txt": a TXT record _gatehouse-challenge.{domain} holds the mapping's
//     token (any one of the TXT records there, trimmed, equal to it);
//   - "cname": {domain} is a CNAME to {app}.{zone} for one of the zones the
//     gateway serves (the canonical name the resolver reports, so a chain of
//     CNAMEs ending there counts too);
//   - "http": GET http://{domain}/.well-known/gatehouse-challenge/{token}
//     answers 200 with the token as its body (trimmed; at most 512 bytes).
//
// The "manual" method is the platform vouching for the domain; the control
// API handles it and never calls Domain with it.
//
// Wiring (internal/gatehouse), with the system resolver:
//
//	o := verify.DomainOptions{Resolver: net.DefaultResolver, Zones: servedZoneNames}
//	apiOpts.VerifyDomain = func(ctx context.Context, d route.Domain, method string) error {
//		return verify.Domain(ctx, o, verify.DomainClaim{Domain: d.Domain, App: d.App, Token: d.Token}, method)
//	}
//
// verify does not import internal/route (STYLE §6.1), hence [DomainClaim].
//
// Every error Domain returns wraps exactly one of [ErrBadDomain],
// [ErrUnknownMethod], [ErrNotProven] or [ErrDomainUnreachable].
//
// Server-side requests: the http proof fetches a URL on a domain the
// customer chose, so it reaches wherever that domain resolves, internal
// addresses included. That is the same exposure an ACME CA's HTTP-01
// validation accepts, and it is bounded the same way: a fixed path and
// method, port 80 (443 only through a same-host redirect), no request body,
// a capped response whose content is never reported back (only "matched" or
// the status code), and no redirect to another host. A deployment that must
// keep internal HTTP services out of reach gives [DomainOptions.HTTPClient]
// a dialer whose Control refuses private addresses.
package verify

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors of [Domain]; each of its errors wraps exactly one.
var (
	ErrBadDomain         = errors.New("verify: bad domain mapping")   // the domain is not a DNS name (an IP literal, say), or the app or token is malformed
	ErrUnknownMethod     = errors.New("verify: unknown proof method") // not txt, cname or http
	ErrNotProven         = errors.New("verify: domain not proven")    // the proof was looked for and is absent or wrong
	ErrDomainUnreachable = errors.New("verify: domain unreachable")   // DNS failure other than "no such name", HTTP transport failure, timeout
)

// Resolver is the part of *net.Resolver that [Domain] uses.
type Resolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
	LookupCNAME(ctx context.Context, host string) (string, error)
}

var _ Resolver = (*net.Resolver)(nil)

// DomainClaim is the mapping to prove: route.Domain's domain, app and
// token.
type DomainClaim struct {
	Domain string // a DNS name such as shop.example.com; never an IP address
	App    string // the app it maps to
	Token  string // the mapping's token (URL-safe, as the API mints it)
}

// DomainOptions configures [Domain]. The zero value is usable for "txt"
// and "http"; "cname" needs Zones.
type DomainOptions struct {
	// Resolver answers the txt and cname lookups. nil: net.DefaultResolver.
	Resolver Resolver
	// HTTPClient fetches the http proof. nil: [NewDomainClient]'s. A given
	// client is used as is except that its CheckRedirect is replaced by
	// Domain's policy (at most 3 redirects, same host, http or https on the
	// default port). Production leaves it nil; tests and development give one
	// whose transport dials {domain}:80 to a loopback server, or a deployment
	// one whose dialer refuses private addresses.
	HTTPClient *http.Client
	// Zones returns the names of the zones the gateway serves, the
	// {zone} of a cname proof's target {app}.{zone}. nil or empty: no cname
	// proof can pass.
	Zones func() []string
	// Timeout bounds one proof. Zero: 10 s.
	Timeout time.Duration
}

const (
	challengeLabel = "_gatehouse-challenge."
	challengePath  = "/.well-known/gatehouse-challenge/"
	maxProofBody   = 512 // bytes of an http proof's body
	maxTXTRecords  = 64  // TXT records looked at; more are ignored
	maxTokenLen    = 128
	maxRedirects   = 3
)

// NewDomainClient returns the client [Domain] uses for the http proof when
// given none: no proxy, a 5 s overall timeout, no connection reuse, 16 KiB
// of response headers at most, and Domain's redirect policy.
func NewDomainClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			Proxy:                  nil, // the proof is about the domain's own server
			DialContext:            (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
			TLSHandshakeTimeout:    3 * time.Second,
			ResponseHeaderTimeout:  3 * time.Second,
			DisableKeepAlives:      true, // one fetch per proof: nothing to reuse
			MaxResponseHeaderBytes: 16 << 10,
		},
	}
}

// Domain checks the proof of c by method ("txt", "cname" or "http") and
// returns nil when it holds. It is safe for concurrent use; bound it with
// ctx (and opts.Timeout).
func Domain(ctx context.Context, opts DomainOptions, c DomainClaim, method string) error {
	if method != "txt" && method != "cname" && method != "http" {
		return fmt.Errorf("%w: %q (want txt, cname or http)", ErrUnknownMethod, method)
	}
	name, err := domainName(c.Domain)
	if err != nil {
		return err
	}
	if !validToken(c.Token) {
		return fmt.Errorf("%w: token of %s is not 1 to %d URL-safe characters", ErrBadDomain, name, maxTokenLen)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := opts.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	switch method {
	case "txt":
		return proveTXT(ctx, res, name, c.Token)
	case "cname":
		return proveCNAME(ctx, res, name, c.App, opts.Zones)
	default:
		return proveHTTP(ctx, opts.HTTPClient, name, c.Token)
	}
}

func proveTXT(ctx context.Context, res Resolver, name, token string) error {
	q := challengeLabel + name + "." // rooted: no search-list suffixes
	txts, err := res.LookupTXT(ctx, q)
	if err != nil {
		return dnsErr(q, "TXT", err)
	}
	for i, t := range txts {
		if i == maxTXTRecords {
			break
		}
		if sameToken(strings.TrimSpace(t), token) {
			return nil
		}
	}
	return fmt.Errorf("%w: none of the %d TXT records at %s holds the mapping's token", ErrNotProven, len(txts), q)
}

func proveCNAME(ctx context.Context, res Resolver, name, app string, zones func() []string) error {
	if !validLabel(app) {
		return fmt.Errorf("%w: app %q is not a DNS label", ErrBadDomain, app)
	}
	cname, err := res.LookupCNAME(ctx, name+".")
	if err != nil {
		return dnsErr(name, "CNAME", err)
	}
	target := strings.ToLower(strings.TrimSuffix(cname, "."))
	if target == name {
		return fmt.Errorf("%w: %s is not a CNAME", ErrNotProven, name)
	}
	var want []string
	if zones != nil {
		for _, z := range zones() {
			w := app + "." + strings.ToLower(strings.TrimSuffix(z, "."))
			if target == w {
				return nil
			}
			want = append(want, w)
		}
	}
	if len(want) == 0 {
		return fmt.Errorf("%w: %s points at %s, and the gateway serves no zone", ErrNotProven, name, target)
	}
	return fmt.Errorf("%w: %s points at %s, not %s", ErrNotProven, name, target, strings.Join(want, " or "))
}

// dnsErr sorts a lookup failure: "no such name or record" means the proof
// is absent; anything else (timeout, SERVFAIL, REFUSED) that the DNS could
// not be asked.
func dnsErr(q, typ string, err error) error {
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return fmt.Errorf("%w: no %s record at %s", ErrNotProven, typ, q)
	}
	return fmt.Errorf("%w: looking up %s %s: %v", ErrDomainUnreachable, typ, q, err)
}

func proveHTTP(ctx context.Context, client *http.Client, name, token string) error {
	if client == nil {
		client = NewDomainClient()
	} else {
		c := *client
		client = &c
	}
	client.CheckRedirect = sameHostRedirect(name)
	u := "http://" + name + challengePath + token // token is URL-safe (validToken)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadDomain, err)
	}
	req.Header.Set("User-Agent", "gatehouse-domain-verify/1")
	req.Header.Set("Accept", "text/plain, */*")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: GET %s: %v", ErrDomainUnreachable, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			return fmt.Errorf("%w: GET %s: status %d (redirects are followed only on the same host, at most %d)", ErrNotProven, u, resp.StatusCode, maxRedirects)
		}
		return fmt.Errorf("%w: GET %s: status %d", ErrNotProven, u, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProofBody+1))
	if err != nil {
		return fmt.Errorf("%w: GET %s: reading body: %v", ErrDomainUnreachable, u, err)
	}
	if len(b) > maxProofBody {
		return fmt.Errorf("%w: GET %s: body over %d bytes", ErrNotProven, u, maxProofBody)
	}
	if !sameToken(strings.TrimSpace(string(b)), token) {
		return fmt.Errorf("%w: GET %s: body is not the mapping's token", ErrNotProven, u)
	}
	return nil
}

// sameHostRedirect follows a redirect only to name itself, over http or
// https on the scheme's default port, at most maxRedirects times; anything
// else stops with the 3xx response, which then does not prove the domain.
func sameHostRedirect(name string) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > maxRedirects || !sameOrigin(req.URL, name) {
			return http.ErrUseLastResponse
		}
		return nil
	}
}

func sameOrigin(u *url.URL, name string) bool {
	if u.User != nil || !strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), name) {
		return false
	}
	switch u.Port() {
	case "":
		return u.Scheme == "http" || u.Scheme == "https"
	case "80":
		return u.Scheme == "http"
	case "443":
		return u.Scheme == "https"
	}
	return false
}

// sameToken compares in constant time for equal lengths (a token's length
// is public; its content is what must not leak through timing).
func sameToken(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// domainName checks that s is a DNS name of at least two labels (lower
// case ASCII, as the control API normalizes it; a trailing dot and upper
// case are accepted) and not an IP literal, and returns it normalized.
func domainName(s string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(s, "."))
	if len(n) > 253 || !strings.Contains(n, ".") {
		return "", fmt.Errorf("%w: %q is not a DNS name of two or more labels", ErrBadDomain, s)
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", fmt.Errorf("%w: %q is not a DNS name", ErrBadDomain, s)
		}
	}
	// An all-numeric last label makes an IPv4 literal (or something a
	// resolver would take for one); no top-level domain is numeric. IPv6
	// literals already failed the label check on ':'.
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("%w: %q is an IP address, not a name", ErrBadDomain, s)
	}
	return n, nil
}

// validLabel: 1 to 63 of [a-z0-9-], not starting or ending with '-'.
func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validToken: 1 to maxTokenLen of the URL-safe base64 alphabet, so it is
// a path segment as is and a TXT value without quoting.
func validToken(t string) bool {
	if t == "" || len(t) > maxTokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
