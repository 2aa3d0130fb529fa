package api

import (
	"encoding/base64"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gatehouse-dev/gatehouse/internal/edkey"
	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// Bounds on what one body may hold, so a stored item stays small.
const (
	maxOrigins = 100
	// maxAllowHeaders bounds cors.allow_headers: an allowed preflight
	// names the whole list back in Access-Control-Allow-Headers
	// (internal/cors), and past some thousands of names that one field
	// outgrows what clients take (curl 100 KB, browsers a few hundred KB),
	// so every preflight would fail. 100 names of at most 64 bytes stay
	// under 7 KB.
	maxAllowHeaders = 100
	maxRules        = 100
	maxHostApps     = 1000
	maxGateways     = 16
	maxValues       = 32
	// maxTXTSet bounds a TXT set's values in all, so that its answer packs
	// into one DNS message (64 KiB) with room to spare; each value is at
	// most 2048 bytes.
	maxTXTSet      = 16 << 10
	maxTTL         = 7 * 24 * 3600
	defaultZoneTTL = 60
)

func checkApp(a *route.App) error {
	if err := checkAppID(a.ID); err != nil {
		return err
	}
	switch a.Mode {
	case route.ModeHTTP, route.ModePassthrough:
	default:
		return badInput("mode: must be http or passthrough, got %q", a.Mode)
	}
	switch a.Status {
	case route.StatusActive, route.StatusSuspended, route.StatusRetired:
	default:
		return badInput("status: must be active, suspended or retired, got %q", a.Status)
	}
	if a.Mode == route.ModePassthrough {
		// A passthrough app's TLS ends at its host: the gateway pipes bytes
		// it cannot read (internal/edge), so it checks no token and matches
		// no path there, and an app stored so would be served without them.
		if a.Auth.Required {
			return badInput("auth.required: a passthrough app's TLS ends at its host, so the gateway cannot check its tokens; use mode http, or check tokens in the app")
		}
		if len(a.Policy) > 0 {
			return badInput("policy: a passthrough app's TLS ends at its host, so the gateway cannot match its paths; use mode http, or apply the rules in the app")
		}
	}
	if len(a.CORS.Origins) > maxOrigins {
		return badInput("cors.origins: at most %d origins", maxOrigins)
	}
	for i, o := range a.CORS.Origins {
		if !validOrigin(o) {
			return badInput("cors.origins[%d]: must be an origin as a browser sends it, scheme://host[:port]: lower case, the host in ASCII (xn-- labels), no default port, got %q", i, o)
		}
	}
	if len(a.CORS.AllowHeaders) > maxAllowHeaders {
		return badInput("cors.allow_headers: at most %d header names, got %d (\"*\" among them allows whichever a preflight asks for)", maxAllowHeaders, len(a.CORS.AllowHeaders))
	}
	for i, h := range a.CORS.AllowHeaders {
		if !validToken(h) {
			return badInput("cors.allow_headers[%d]: not a header name: %q", i, h)
		}
	}
	if a.RateLimit.Requests <= 0 {
		return badInput("rate_limit.requests: must be positive, got %d", a.RateLimit.Requests)
	}
	if w := time.Duration(a.RateLimit.Window); w < time.Second || w > 24*time.Hour {
		return badInput("rate_limit.window: must be between 1s and 24h, got %s", w)
	}
	if len(a.Policy) > maxRules {
		return badInput("policy: at most %d rules", maxRules)
	}
	for i := range a.Policy {
		if err := checkRule(i, &a.Policy[i]); err != nil {
			return err
		}
	}
	if h := a.Health; h != nil {
		if !strings.HasPrefix(h.Path, "/") || strings.ContainsAny(h.Path, " \t\r\n") {
			return badInput("health.path: must be an absolute path like /healthz, got %q", h.Path)
		}
		// discovery probes scheme://addr+path: a path that is not a valid
		// URL (a control byte, a bad %-escape) fails every probe, and every
		// host of the app would stop being routed to.
		if _, err := url.ParseRequestURI("http://h" + h.Path); err != nil {
			return badInput("health.path: not a valid URL path (%%-escapes as %%XX, no control bytes), got %q", h.Path)
		}
		if iv := time.Duration(h.Interval); iv != 0 && (iv < time.Second || iv > time.Hour) {
			return badInput("health.interval: must be between 1s and 1h, got %s", iv)
		}
	}
	return nil
}

func checkAppID(id string) error {
	if !route.ValidLabel(id) {
		return badInput("app id must be one DNS label ([a-z0-9-], at most 63), got %q", id)
	}
	if id == route.ReservedLabel {
		return badInput("app id %q is reserved for the gateway's own API", id)
	}
	return nil
}

// validOrigin accepts exactly scheme://host[:port], lower case, as a
// browser sends it in Origin.
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return false
	}
	if h := u.Hostname(); h == "" || strings.Contains(h, "*") {
		return false
	}
	// A browser serializes an origin (RFC 6454 §6.1) with the host in
	// its ASCII form and the port only when it is not the scheme's
	// default, as a plain number; cors matches the Origin header as a
	// string, so an entry spelled otherwise would never match.
	for i := 0; i < len(o); i++ {
		if o[i] >= utf8.RuneSelf {
			return false
		}
	}
	if strings.HasSuffix(u.Host, ":") {
		return false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p || p == map[string]string{"http": "80", "https": "443"}[u.Scheme] {
			return false
		}
	}
	return u.Scheme+"://"+u.Host == o && strings.ToLower(o) == o
}

var tokenRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// validToken reports whether s is an RFC 9110 token (method, header name).
func validToken(s string) bool { return len(s) <= 64 && tokenRE.MatchString(s) }

func checkRule(i int, p *route.PolicyRule) error {
	if p.Action != "allow" && p.Action != "deny" {
		return badInput("policy[%d].action: must be allow or deny, got %q", i, p.Action)
	}
	if p.Methods != nil && len(p.Methods) == 0 {
		// stored, [] reads as left out (omitempty): every method. An
		// allow meant for no method would match them all, and, first
		// match winning, lift the rules after it.
		return badInput("policy[%d].methods: empty, so the rule would match no method; leave methods out for every method, or list them", i)
	}
	for j, m := range p.Methods {
		if !validToken(m) {
			return badInput("policy[%d].methods[%d]: not an HTTP method: %q", i, j, m)
		}
		p.Methods[j] = strings.ToUpper(m)
	}
	path := p.Path
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n?#") {
		return badInput("policy[%d].path: must start with / (an exact path or a prefix ending in /*), got %q", i, path)
	}
	base := strings.TrimSuffix(path, "/*")
	if strings.Contains(base, "*") {
		return badInput("policy[%d].path: '*' is allowed only as a final /*, got %q", i, path)
	}
	if p.CheckStored() != nil { // what the policy layer can match (route.PolicyRule.Check)
		return badInput("policy[%d].path: must be a clean path (no empty, '.' or '..' segment, no trailing '/' or '.', no '%%', ';' or '\\'), as requests are matched after cleaning, got %q", i, path)
	}
	if p.Check() != nil {
		// The store still takes such a path (CheckStored), as it did
		// before the policy layer read requests without them; a write may
		// no longer send one.
		return badInput("policy[%d].path: must have no white space or a control character at either end of a segment, as a host that trims them reads the path without them, got %q", i, path)
	}
	return nil
}

// normalizeDomain checks a custom domain name and returns its normalized
// form: a DNS name with at least two labels, not an IP address.
func normalizeDomain(s string) (string, error) {
	n, ok := route.NormalizeHost(s)
	if err := unicodeName("domain", s, n, ok); err != nil {
		return "", err
	}
	if !ok || n != strings.ToLower(strings.TrimSuffix(s, ".")) || !strings.Contains(n, ".") {
		return "", badInput("domain must be a DNS name like shop.example.com, got %q", s)
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "", badInput("domain must be a name, not an IP address: %q", s)
	}
	return n, nil
}

// unicodeName refuses s, a name given in Unicode whose ASCII form
// (route.NormalizeHost) is n, naming n: names are stored and looked up in
// that form, and mapping Unicode to it silently would take look-alikes.
func unicodeName(what, s, n string, ok bool) error {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			if ok {
				return badInput("%s must be given in its ASCII form %q, got %q", what, n, s)
			}
			return badInput("%s must be a DNS name in ASCII (xn-- labels for Unicode), got %q", what, s)
		}
	}
	return nil
}

// normalizeZone checks a zone name.
func normalizeZone(s string) (string, error) {
	n, ok := route.NormalizeHost(s)
	if err := unicodeName("zone", s, n, ok); err != nil {
		return "", err
	}
	if !ok || n != strings.ToLower(strings.TrimSuffix(s, ".")) {
		return "", badInput("zone must be a DNS name like apps.example.com, got %q", s)
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "", badInput("zone must be a name, not an IP address: %q", s)
	}
	return n, nil
}

func checkZone(z *route.Zone) error {
	// Only a write is bounded: a zone stored before the bound can still
	// be read and deleted.
	if len(z.Name) > route.MaxZoneName {
		return badInput("zone name must be at most %d characters, so that _acme-challenge.{zone}, hostmaster.{zone} and ns.{zone} are DNS names; got %d", route.MaxZoneName, len(z.Name))
	}
	if route.PublicSuffix(z.Name) {
		return badInput("zone %q is a public suffix (a top-level domain, or a registry's like co.uk), under which anyone registers names: serve a domain of yours under it, like apps.example.com", z.Name)
	}
	if len(z.Gateways) == 0 || len(z.Gateways) > maxGateways {
		return badInput("gateways: must list 1 to %d IP addresses", maxGateways)
	}
	seen := map[netip.Addr]bool{}
	for i, g := range z.Gateways {
		a, err := netip.ParseAddr(g)
		if err != nil || a.Zone() != "" {
			return badInput("gateways[%d]: must be an IP address, got %q", i, g)
		}
		a = a.Unmap()
		// The apex and every {app}.{zone} resolve to these: a listen
		// address such as 0.0.0.0 (what zoneGateways never seeds either)
		// or a group address sends every client of the zone nowhere.
		if a.IsUnspecified() || a.IsMulticast() || notDestination(a) {
			return badInput("gateways[%d]: must be an address clients can reach the gateways at, not %s", i, a)
		}
		if seen[a] {
			return badInput("gateways[%d]: %s listed twice", i, a)
		}
		seen[a] = true
		z.Gateways[i] = a.String()
	}
	if z.TTL == 0 {
		z.TTL = defaultZoneTTL
	}
	if z.TTL < 1 || z.TTL > maxTTL {
		return badInput("ttl: must be between 1 and %d seconds, got %d", maxTTL, z.TTL)
	}
	return nil
}

// notDestination reports an IPv4 address no packet may be sent to as a
// host's: the limited broadcast 255.255.255.255, which would go to every
// host of each client's own network, and 0.0.0.0/8, "this host on this
// network" (RFC 1122 §3.2.1.3), a source only.
func notDestination(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	b := a.As4()
	return b == [4]byte{255, 255, 255, 255} || b[0] == 0
}

// hostIDRE is host.ValidHostID's rule (the wire protocol's), repeated
// here because api does not import the host package.
var hostIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkHostKey(k *route.HostKey) error {
	if !hostIDRE.MatchString(k.HostID) {
		return badInput("host_id: 1 to 128 of [A-Za-z0-9._-], starting with a letter or digit, got %q", k.HostID)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(k.PublicKey)
	if err != nil {
		return badInput("public_key: must be the std base64 of a raw 32-byte Ed25519 key: %v", err)
	}
	if len(b) != 32 {
		return badInput("public_key: must be 32 bytes (an Ed25519 public key), got %d", len(b))
	}
	if base64.StdEncoding.EncodeToString(b) != k.PublicKey {
		// The decoder skips line breaks; discovery compares keys as written.
		return badInput("public_key: must be the 44 characters of its std base64, with no line breaks")
	}
	if edkey.SmallOrder(b) {
		return badInput("public_key: a point of small order, not a key: anyone can sign for it; send the host's real public key (gatehouse keygen)")
	}
	if len(k.Apps) == 0 || len(k.Apps) > maxHostApps {
		return badInput("apps: must list 1 to %d app ids this host may serve", maxHostApps)
	}
	seen := map[string]bool{}
	for i, a := range k.Apps {
		if err := checkAppID(a); err != nil {
			return badInput("apps[%d]: %v", i, err)
		}
		if seen[a] {
			return badInput("apps[%d]: %q listed twice", i, a)
		}
		seen[a] = true
	}
	return nil
}

// recordName turns the {name} of a record route into the full name under
// zone that internal/dns keys records by: "@" or the zone itself is the
// apex, a relative name gets the zone appended. A name ending in a dot is
// absolute, as in a zone file, and must be in the zone.
func recordName(name, zone string) (string, error) {
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	switch {
	case n == "@" || n == zone:
		return zone, nil
	case strings.HasSuffix(n, "."+zone):
	case strings.HasSuffix(name, "."):
		// appending the zone would store it at a name nobody asked for
		return "", badInput("record name %q ends with a dot, so it is a full name, and it is not in zone %q; leave the dot out for a name relative to the zone", name, zone)
	default:
		n += "." + zone
	}
	if len(n) > 253 {
		return "", badInput("record name too long: %q", name)
	}
	labels := strings.Split(strings.TrimSuffix(n, "."+zone), ".")
	for i, l := range labels {
		if l == "*" && i == 0 {
			continue
		}
		if !recordLabelRE.MatchString(l) {
			return "", badInput("record name: bad label %q in %q (letters, digits, '-', '_'; '*' only first)", l, name)
		}
	}
	return n, nil
}

// dnsName reports whether n, lower case and without the trailing dot, is
// a DNS name of labels as a record name's (recordLabelRE), 253 characters
// at most.
func dnsName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for l := range strings.SplitSeq(n, ".") {
		if !recordLabelRE.MatchString(l) {
			return false
		}
	}
	return true
}

var recordLabelRE = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

func checkRecord(r *route.Record) error {
	if len(r.Values) == 0 || len(r.Values) > maxValues {
		return badInput("values: must hold 1 to %d values", maxValues)
	}
	if r.TTL < 0 || r.TTL > maxTTL {
		return badInput("ttl: must be between 0 (the zone's) and %d seconds, got %d", maxTTL, r.TTL)
	}
	addrs := map[netip.Addr]bool{}
	for i, v := range r.Values {
		if err := checkRecordValue(r.Type, v); err != nil {
			return badInput("values[%d]: %v", i, err)
		}
		// An RRset holds each record once (RFC 2181 §5); the DNS server
		// would answer a repeated address twice. TXT sets may repeat a
		// value: internal/dns's ACME provider adds one per challenge.
		if a, err := netip.ParseAddr(v); err == nil && (r.Type == "A" || r.Type == "AAAA") {
			if addrs[a] {
				return badInput("values[%d]: %s listed twice", i, a)
			}
			addrs[a] = true
		}
	}
	if r.Type == "TXT" {
		n := 0
		for _, v := range r.Values {
			n += len(v)
		}
		if n > maxTXTSet {
			return badInput("values: a TXT set holds at most %d bytes in all, got %d", maxTXTSet, n)
		}
	}
	if r.Type == "CNAME" && len(r.Values) != 1 {
		return badInput("values: a CNAME has exactly one target")
	}
	return nil
}

func checkRecordValue(typ, v string) error {
	switch typ {
	case "A", "AAAA":
		a, err := netip.ParseAddr(v)
		if err != nil || (typ == "A") != a.Is4() {
			return badInput("must be an IPv%s address, got %q", map[bool]string{true: "4", false: "6"}[typ == "A"], v)
		}
		// A record carries the 16 bytes alone: fe80::1%eth0 would be
		// served as fe80::1, and beside fe80::1%eth1 twice (checkZone
		// refuses a zone in the gateways likewise).
		if a.Zone() != "" {
			return badInput("must be an IPv6 address without a zone (%%%s), got %q", a.Zone(), v)
		}
	case "CNAME":
		// A DNS name, not a host name: targets such as DKIM's
		// selector._domainkey.example.org hold underscores (RFC 2181 §11).
		if !dnsName(strings.ToLower(strings.TrimSuffix(v, "."))) {
			return badInput("must be a DNS name (labels of letters, digits, '-' and '_', in ASCII), got %q", v)
		}
		// resolvers would look the address up as a name under the TLD
		// of its last byte; an address wants an A or AAAA record
		if _, err := netip.ParseAddr(strings.TrimSuffix(v, ".")); err == nil {
			return badInput("must be a DNS name, not an IP address (use an A or AAAA record): %q", v)
		}
	case "TXT":
		if len(v) == 0 || len(v) > 2048 {
			return badInput("a TXT value holds 1 to 2048 bytes, got %d", len(v))
		}
	}
	return nil
}

// recordType normalizes a record route's {type}.
func recordType(s string) (string, error) {
	t := strings.ToUpper(s)
	switch t {
	case "A", "AAAA", "CNAME", "TXT":
		return t, nil
	}
	return "", badInput("record type must be A, AAAA, CNAME or TXT, got %q", s)
}
