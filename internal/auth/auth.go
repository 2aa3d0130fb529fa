package auth

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/net/http/httpguts"

	"github.com/gatehouse-dev/gatehouse/internal/edkey"
	"github.com/gatehouse-dev/gatehouse/internal/httpwire"
)

// Issuer is one trusted token issuer.
type Issuer struct {
	// Name is the iss claim value the issuer's tokens carry.
	Name string
	// KeysFile is a PEM or JWKS file of its Ed25519 public keys; empty when
	// Keys is given.
	KeysFile string
	// Keys are public keys given directly (embedders and tests); they are
	// used together with KeysFile's.
	Keys []ed25519.PublicKey
}

// Options configures verification (the auth.* config keys).
type Options struct {
	// Issuers are the trusted issuers. None means verification is off: an
	// app requiring auth then refuses every request with 401.
	Issuers []Issuer
	// ClaimLimits turns on the limits carried as claims (DESIGN §6). It
	// needs verification: Validate fails if it is on with no issuer.
	ClaimLimits bool
	// MaxSubjects bounds the per-subject limiter population
	// (auth.max_subjects), a subject being an (iss, sub) pair. Zero means
	// 10,000; negative is an error.
	MaxSubjects int
	// Leeway is the clock skew allowed on exp, nbf and iat. Zero means none.
	Leeway time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports options gatehouse must not start with, naming the key.
func (o Options) Validate() error {
	if o.ClaimLimits && len(o.Issuers) == 0 {
		return errors.New("auth: claim limits are on (auth.claim_limits) but token verification is off: configure auth.issuers or turn claim limits off")
	}
	if o.MaxSubjects < 0 {
		return fmt.Errorf("auth: max_subjects must not be negative, got %d", o.MaxSubjects)
	}
	if o.Leeway < 0 {
		return fmt.Errorf("auth: leeway must not be negative, got %s", o.Leeway)
	}
	seen := map[string]bool{}
	for i, is := range o.Issuers {
		switch {
		case is.Name == "":
			return fmt.Errorf("auth: issuers[%d]: name (the iss value) is empty", i)
		case seen[is.Name]:
			return fmt.Errorf("auth: issuers[%d]: issuer %q listed twice", i, is.Name)
		case is.KeysFile == "" && len(is.Keys) == 0:
			return fmt.Errorf("auth: issuers[%d] (%s): no keys file and no keys", i, is.Name)
		}
		for j, k := range is.Keys {
			if len(k) != ed25519.PublicKeySize {
				return fmt.Errorf("auth: issuers[%d] (%s): key %d is not an Ed25519 public key", i, is.Name, j)
			}
			if edkey.SmallOrder(k) {
				return fmt.Errorf("auth: issuers[%d] (%s): key %d: %s", i, is.Name, j, errWeakKey)
			}
		}
		seen[is.Name] = true
	}
	return nil
}

// Limits are the limits a token carries; zero fields mean no limit.
type Limits struct {
	RPS         int64 `json:"rps"`
	Connections int64 `json:"connections"`
	ReadBps     int64 `json:"read_Bps"`
	WriteBps    int64 `json:"write_Bps"`
}

// UnmarshalJSON reads the members by their exact names, as Claims does
// the claims: encoding/json would match read_bps or RPS as well, and of
// {"read_Bps": 1000, "read_bps": 0} keep the last, lifting the limit the
// issuer meant. Any other member is ignored.
func (l *Limits) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for name, dst := range map[string]*int64{"rps": &l.RPS, "connections": &l.Connections, "read_Bps": &l.ReadBps, "write_Bps": &l.WriteBps} {
		if v, ok := raw[name]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// Scopes is the scope claim: a space-separated string (RFC 8693) or an
// array of strings.
type Scopes []string

// UnmarshalJSON reads either form. The string is split on spaces alone
// (RFC 6749 §3.3, RFC 8693 §4.2: %x20); a run of them is one. Split on
// white space as strings.Fields does, "x\u00a0platform" (a no-break
// space) or "read\tplatform" was the platform scope beside another, where
// the issuer wrote one scope that is no scope-token: kept whole, Verify
// refuses it.
func (s *Scopes) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*s = strings.FieldsFunc(str, func(r rune) bool { return r == ' ' })
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("scope must be a string or an array of strings")
	}
	*s = list
	return nil
}

// Claims are the verified claims of a token.
type Claims struct {
	jwt.RegisteredClaims
	Scope  Scopes  `json:"scope,omitempty"`
	Limits *Limits `json:"limits,omitempty"`
}

// UnmarshalJSON reads the claims gatehouse uses by their exact names.
// Claim names are case-sensitive (RFC 7519 §4), but encoding/json matches
// a struct's fields in any case: a "Scope": "platform" claim would have
// been read as scope, and issuers that map user attributes to claims of
// the user's naming would hand out the platform credential, audiences and
// limits. Any other member is a private claim and ignored. Of a name given
// twice the last counts (RFC 7519 §4 allows it). exp, nbf and iat must be
// JSON numbers (NumericDate, §2), not numbers in strings, and within
// maxDate seconds of 1970.
func (c *Claims) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	fields := []struct {
		name string
		dst  any
	}{
		{"iss", &c.Issuer}, {"sub", &c.Subject}, {"aud", &c.Audience}, {"jti", &c.ID},
		{"exp", &c.ExpiresAt}, {"nbf", &c.NotBefore}, {"iat", &c.IssuedAt},
		{"scope", &c.Scope}, {"limits", &c.Limits},
	}
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok {
			continue
		}
		if _, date := f.dst.(**jwt.NumericDate); date {
			if !jsonNumber(v) {
				return fmt.Errorf("claim %s must be a JSON number (a NumericDate), not %s", f.name, v)
			}
			if !holdableDate(v) {
				return fmt.Errorf("claim %s: %s seconds is past any date a time can hold", f.name, v)
			}
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return fmt.Errorf("claim %s: %w", f.name, err)
		}
	}
	return nil
}

// jsonNumber reports whether v, one JSON value, is a number (or null,
// which leaves a date unset, as an absent claim does).
func jsonNumber(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return string(v) == "null" || (len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9'))
}

// maxDate bounds a NumericDate's seconds either side of 1970: about 146
// billion years, far past any "never expires" an issuer writes (2^53, the
// largest exact JavaScript integer, included), and short of where
// golang-jwt's conversion to a time stops being one: past it a date wraps
// round (an nbf of 1e19 read as the far past, a token meant never to be
// valid was valid now) or saturates, by CPU.
const maxDate = 1 << 62

// holdableDate reports whether v, a JSON number or null, is a date within
// maxDate seconds of 1970.
func holdableDate(v json.RawMessage) bool {
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	return err != nil || math.Abs(f) <= maxDate // null, or past float64: golang-jwt refuses those
}

// Verifier checks tokens against the configured issuers. Safe for
// concurrent use; immutable after New.
type Verifier struct {
	issuers map[string][]Key
	parser  *jwt.Parser
	leeway  time.Duration
}

// New validates o and loads every issuer's keys.
func New(o Options) (*Verifier, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	v := &Verifier{issuers: map[string][]Key{}, leeway: o.Leeway}
	for _, is := range o.Issuers {
		var keys []Key
		if is.KeysFile != "" {
			k, err := LoadKeys(is.KeysFile)
			if err != nil {
				return nil, fmt.Errorf("auth: issuer %q: %w", is.Name, err)
			}
			keys = k
		}
		for _, k := range is.Keys {
			keys = append(keys, Key{Pub: k})
		}
		v.issuers[is.Name] = keys
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{"EdDSA"}),
		jwt.WithExpirationRequired(),
		// An iat later than now (past the leeway) is a token from an
		// issuer whose clock runs ahead, or one minted for later use:
		// golang-jwt v5 no longer checks it unless asked, as v4 did.
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(o.Now),
		jwt.WithLeeway(o.Leeway),
		// The last character of a base64url segment carries spare bits
		// that lenient decoding ignores: 16 spellings of one signature
		// would verify, and the resolve API names a session without sub
		// by its token, so each spelling was a new session's budget.
		jwt.WithStrictDecoding(),
	)
	return v, nil
}

// Enabled reports whether any issuer is configured.
func (v *Verifier) Enabled() bool { return v != nil && len(v.issuers) > 0 }

// Leeway is Options.Leeway: a token is accepted until its exp plus this.
func (v *Verifier) Leeway() time.Duration {
	if v == nil {
		return 0
	}
	return v.leeway
}

// Errors, each mapped to a status by [Status].
var (
	ErrNoToken    = errors.New("auth: no bearer token")
	ErrQueryToken = errors.New("auth: a token in the query string is not accepted; send it in the Authorization header")
	ErrInvalid    = errors.New("auth: invalid token")
	// ErrTwoHeaders is a request with more than one Authorization field:
	// malformed (RFC 6750 invalid_request), and refused like any invalid
	// token (it wraps ErrInvalid).
	ErrTwoHeaders = fmt.Errorf("%w: more than one Authorization header", ErrInvalid)
	ErrAudience   = errors.New("auth: token audience does not cover this app")
	// errNoIssuer: verification is off, so no token verifies.
	errNoIssuer = errors.New("no issuer is configured")
	ErrScope    = errors.New("auth: token scope does not include platform")
)

// Status maps a verification error to the HTTP status to answer: 403 for
// ErrAudience and ErrScope, 401 for everything else.
func Status(err error) int {
	if errors.Is(err, ErrAudience) || errors.Is(err, ErrScope) {
		return http.StatusForbidden
	}
	return http.StatusUnauthorized
}

// queryTokenNames are query parameters that carry tokens in the wild.
var queryTokenNames = []string{"access_token", "token", "jwt", "id_token", "auth_token", "bearer", "authorization", "auth", "api_key", "apikey"}

// rfc6750Param is the query parameter RFC 6750 §2.3 defines for bearer
// tokens: whatever its value, it is a token sent a second way.
const rfc6750Param = "access_token"

// BearerToken returns the token of r's Authorization: Bearer header. A
// token is never taken from the query string. A token-like query
// parameter (access_token, token, ...) is refused (ErrQueryToken) when
// there is no Authorization header, or when it repeats the header's token,
// so a client learns at once that it leaks its token into URLs and logs;
// beside a header with another token it is the app's own parameter (a
// password-reset or invitation link's ?token=) and is left alone. The
// exception is access_token, RFC 6750's own name for a token in the query:
// beside the header it is a second method, which RFC 6750 §2 forbids, and
// a host that reads the query first would take a token the gateway never
// verified.
func BearerToken(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		if queryToken(r, "") {
			return "", ErrQueryToken
		}
		return "", ErrNoToken
	}
	if len(vals) > 1 {
		return "", ErrTwoHeaders
	}
	// Another scheme's credentials, or the scheme alone, carry no bearer
	// token: RFC 6750 §3.1 answers that with the bare challenge, not with
	// invalid_token, on which a client would fetch a new token in vain.
	scheme, tok, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: Authorization is not a Bearer token", ErrNoToken)
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", ErrNoToken
	}
	if queryToken(r, tok) {
		return "", ErrQueryToken
	}
	return tok, nil
}

// queryToken reports whether r's query has a token-like parameter: any,
// when tok is empty, else access_token or one whose value is tok. The
// query is split on ';' as well as '&': Rack 2, Python before 3.9.2 and
// Go before 1.17 read ?x=1;access_token=t as an access_token, and
// net/url's Query skips such a pair, so the host would take a token the
// gateway never saw. A name is compared as PHP names it too
// (httpwire.PHPName): ?access.token=t is $_GET['access_token'] to a PHP
// host. A name is decoded as PHP decodes it (httpwire.PHPDecode); a value
// that does not unescape is compared as it is.
func queryToken(r *http.Request, tok string) bool {
	q := r.URL.RawQuery
	for q != "" {
		var kv string
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			kv, q = q[:i], q[i+1:]
		} else {
			kv, q = q, ""
		}
		name, val, _ := strings.Cut(kv, "=")
		// As PHP decodes it: a strict decode compared a name with a bad
		// escape as sent, and ?access_token%00%zz= is PHP's access_token.
		name = httpwire.PHPDecode(name)
		if v, err := url.QueryUnescape(val); err == nil {
			val = v
		}
		name = httpwire.PHPName(name)
		for _, t := range queryTokenNames {
			if strings.EqualFold(name, t) && (tok == "" || t == rfc6750Param || val == tok) {
				return true
			}
		}
	}
	return false
}

// Verify checks tok for app: signature by a configured issuer's key,
// exp (required), nbf, iat and typ, then that aud lists app or "*". A token with
// limits must name its subject.
func (v *Verifier) Verify(tok, app string) (*Claims, error) {
	c, err := v.VerifyAny(tok)
	if err != nil {
		return nil, err
	}
	for _, a := range c.Audience {
		if a == app || a == "*" {
			return c, nil
		}
	}
	return nil, ErrAudience
}

// PlatformScope is the scope that makes a token the platform's credential
// for the control API (DESIGN §7).
const PlatformScope = "platform"

// VerifyPlatform checks tok as the control API's credential: signature,
// exp, nbf, iat and typ as [Verifier.Verify] does, then scope platform.
// aud is not checked: it lists the apps a token is good for at the edge, and the
// control API is none of them (requiring "*" would make every platform
// credential an edge token for every app as well).
func (v *Verifier) VerifyPlatform(tok string) (*Claims, error) {
	c, err := v.VerifyAny(tok)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(c.Scope, PlatformScope) {
		return nil, ErrScope
	}
	return c, nil
}

// VerifyAny checks tok's signature, exp, nbf, iat, typ and limits, whatever its
// audience: a signed-in session, for the routes any valid token may use
// (the resolve API, DESIGN §8).
func (v *Verifier) VerifyAny(tok string) (*Claims, error) {
	if !v.Enabled() {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errNoIssuer)
	}
	c := &Claims{}
	t, err := v.parser.ParseWithClaims(tok, c, v.keyFor)
	if err != nil {
		// golang-jwt's error kept in the chain: Describe tells an
		// expired token from a forged one by it
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, ok := t.Header["crit"]; ok {
		// RFC 7515 §4.1.11: a verifier must refuse a token whose crit
		// names an extension it does not understand, and it knows none.
		return nil, fmt.Errorf("%w: crit names header extensions this gateway does not understand", ErrInvalid)
	}
	if typ, ok := t.Header["typ"]; ok && !accessType(typ) {
		return nil, fmt.Errorf("%w: header typ %v names another kind of token than an access token (JWT, at+jwt, JOSE)", ErrInvalid, typ)
	}
	// sub and scope reach hosts as X-Gatehouse-Subject and -Scopes: bytes
	// no header value may hold would go raw down one proxy path and make
	// the other fail with 502, and a value the header changes would name
	// another user (" alice " arrives as "alice") or other scopes (["a b"]
	// arrives as the two scopes a and b). An issuer that signs them is
	// refused.
	if !httpguts.ValidHeaderFieldValue(c.Subject) || strings.TrimSpace(c.Subject) != c.Subject {
		return nil, fmt.Errorf("%w: sub holds bytes a header cannot carry as they are", ErrInvalid)
	}
	for _, sc := range c.Scope {
		if !scopeToken(sc) {
			return nil, fmt.Errorf("%w: a scope is not a scope-token (RFC 6749 §3.3: no space, quote or backslash)", ErrInvalid)
		}
	}
	if c.Limits != nil {
		l := c.Limits
		if l.RPS < 0 || l.Connections < 0 || l.ReadBps < 0 || l.WriteBps < 0 {
			return nil, fmt.Errorf("%w: negative limits", ErrInvalid)
		}
		if c.Subject == "" {
			return nil, fmt.Errorf("%w: a token with limits must have a sub", ErrInvalid)
		}
	}
	return c, nil
}

// accessType reports whether typ, a token's header typ, names a JWT used
// as an access token: JWT (RFC 7519 §5.1), at+jwt (RFC 9068) or JOSE (RFC
// 7515 §4.1.9, a compact JWS of any content), each with or without the
// "application/" prefix and in any case, as media types compare. A
// vendor's access-token type ending in "-at+jwt" (Okta's
// "application/okta-internal-at+jwt") is one too. Another
// type is an issuer's explicit word that the token is something else, a
// logout token (logout+jwt) or a security event (secevent+jwt) signed
// with the same key, and RFC 8725 §3.11 has verifiers refuse it rather
// than take it as a credential because its claims happen to fit.
func accessType(typ any) bool {
	s, ok := typ.(string)
	if !ok {
		return false
	}
	s = strings.ToLower(s)
	s = strings.TrimPrefix(s, "application/")
	return s == "jwt" || s == "at+jwt" || s == "jose" || strings.HasSuffix(s, "-at+jwt")
}

// scopeToken reports whether s is an RFC 6749 §3.3 scope-token: one or
// more of %x21 / %x23-5B / %x5D-7E.
func scopeToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// keyFor returns the keys a token is checked against. Without kid, every
// key of its issuer. With one, the keys with that kid, and the keys with
// none (every PEM key; a JWKS entry without kid), which make no claim about
// kids and are trusted for any token anyway. A kid naming no key of the
// issuer, all of whose keys have kids, is refused at once: the token was
// signed by a key the gateway does not have (one rotated in at the issuer
// and not yet in the keys file), and trying the issuer's other keys
// cannot verify it. A kid may name more than one key (RFC 7517 §4.5 only
// says kids SHOULD differ; a rotation that reuses one does it): each is
// tried, not the first alone, which refused every token of the others.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	iss, err := t.Claims.GetIssuer()
	if err != nil {
		return nil, err
	}
	keys, ok := v.issuers[iss]
	if !ok {
		return nil, fmt.Errorf("unknown issuer %q", iss)
	}
	raw, named := t.Header["kid"]
	kid, isString := raw.(string)
	if named && !isString {
		return nil, errors.New("header kid is not a string")
	}
	set := jwt.VerificationKeySet{}
	for _, k := range keys {
		if kid == "" || k.ID == kid || k.ID == "" {
			set.Keys = append(set.Keys, k.Pub)
		}
	}
	switch len(set.Keys) {
	case 0:
		return nil, fmt.Errorf("header kid %q names no key of issuer %q", kid, iss)
	case 1:
		return set.Keys[0], nil
	}
	return set, nil
}
