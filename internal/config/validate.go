package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/edkey"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"golang.org/x/net/http/httpguts"
)

// Validate returns the first problem found, as one line naming the key:
//
//	config: http.mode: must be one of redirect, acme-only, serve, got "x"
//
// It checks that the key files named exist, and nothing else outside c.
func (c *Config) Validate() error {
	for _, check := range []func() error{
		c.validateListeners, c.validateRecursion, c.validateBus, c.validateCluster, c.validatePeers,
		c.validateTLS, c.validateAuth, c.validateLimits, c.validateTimers,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func bad(key, format string, args ...any) *keyError {
	return &keyError{key: key, msg: fmt.Sprintf(format, args...)}
}

// or gives e the refusal as the other key it involves says it (alt), for
// Load to give when that key's value, not e.key's, came from a variable
// or a flag: the line then names what the operator changed.
func (e *keyError) or(key, format string, args ...any) *keyError {
	e.alt = bad(key, format, args...)
	return e
}

// keyError is a refused value of one key (key may carry an index, as
// "trusted_proxies[1]"). Load adds the variable or flag the value came
// from ([Config.Key]): the key alone sends an operator to the file, which
// may be right.
type keyError struct {
	key, msg string
	// alt is the same refusal named by another key it involves, for Load
	// to give when that key's value came from a variable or a flag and
	// key's did not; nil: none.
	alt *keyError
}

func (e *keyError) Error() string { return fmt.Sprintf("config: %s: %s", e.key, e.msg) }

func oneOf(key, got string, allowed ...string) error {
	for _, a := range allowed {
		if got == a {
			return nil
		}
	}
	return bad(key, "must be one of %s, got %q", strings.Join(allowed, ", "), got)
}

func (c *Config) validateListeners() error {
	if strings.TrimSpace(c.DataDir) == "" {
		return bad("data_dir", "must not be empty")
	}
	if c.Zone != "" {
		if n, ok := route.NormalizeHost(c.Zone); !ok || n != c.Zone || net.ParseIP(c.Zone) != nil {
			return bad("zone", "must be a DNS name like apps.example.com, got %q", c.Zone)
		}
		if route.PublicSuffix(c.Zone) {
			return bad("zone", "%q is a public suffix (a top-level domain, or a registry's like co.uk), under which anyone registers names: serve a domain of yours under it, like apps.example.com", c.Zone)
		}
		if len(c.Zone) > route.MaxZoneName {
			return bad("zone", "must be at most %d characters, so that _acme-challenge.{zone}, hostmaster.{zone} and ns.{zone} are DNS names; got %d", route.MaxZoneName, len(c.Zone))
		}
	}
	for _, a := range []struct{ key, addr string }{
		{"http.addr", c.HTTP.Addr}, {"https.addr", c.HTTPS.Addr}, {"dns.addr", c.DNS.Addr},
	} {
		if a.addr != "" {
			if err := checkAddr(a.key, a.addr); err != nil {
				return err
			}
		}
	}
	if c.Management.Addr == "" {
		return bad("management.addr", "must not be empty")
	}
	if err := checkAddr("management.addr", c.Management.Addr); err != nil {
		return err
	}
	if err := c.onePortEach(); err != nil {
		return err
	}
	if err := oneOf("http.mode", c.HTTP.Mode, HTTPModeRedirect, HTTPModeACMEOnly, HTTPModeServe); err != nil {
		return err
	}
	if n := c.Listeners.MaxRequestLine; n < minRequestLine {
		return bad("listeners.max_request_line", "must be at least %d bytes, got %d", minRequestLine, n)
	}
	if n := c.Listeners.MaxHeaderBytes; n < minHeaderBytes {
		return bad("listeners.max_header_bytes", "must be at least %d bytes (1 KiB), got %d", minHeaderBytes, n)
	}
	for _, l := range []struct {
		key string
		n   int
	}{{"listeners.max_request_line", c.Listeners.MaxRequestLine}, {"listeners.max_header_bytes", c.Listeners.MaxHeaderBytes}} {
		if l.n > maxHeadBytes {
			return bad(l.key, "must be at most %d bytes (8 MiB), got %d", maxHeadBytes, l.n)
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"listeners.read_header_timeout", c.Listeners.ReadHeaderTimeout},
		{"listeners.idle_timeout", c.Listeners.IdleTimeout},
	} {
		if d.v < minListenerTimeout {
			return bad(d.key, "must be at least %s, got %s", minListenerTimeout, d.v)
		}
	}
	if d := c.Listeners.IdleTimeout; d > maxIdleTimeout {
		return bad("listeners.idle_timeout", "must be at most %s, got %s", maxIdleTimeout, d)
	}
	// Under a second it would cut a tunnel between a client's keystrokes,
	// as tls.passthrough_idle_timeout would a pipe.
	if d := c.Listeners.TunnelIdleTimeout; d != 0 && d < time.Second {
		return bad("listeners.tunnel_idle_timeout", "must be 0 (never) or at least 1s, got %s", d)
	}
	if c.Listeners.MaxConnections < 0 {
		return bad("listeners.max_connections", "must be 0 (a quarter of the file descriptor limit) or positive, got %d", c.Listeners.MaxConnections)
	}
	if n := c.Listeners.MaxConnectionsPerSource; n < 0 {
		return bad("listeners.max_connections_per_source", "must be 0 (no per-source cap) or positive, got %d", n)
	} else if m := c.Listeners.MaxConnections; m > 0 && n > m {
		return bad("listeners.max_connections_per_source", "%d is over listeners.max_connections (%d): one source could never reach it", n, m).
			or("listeners.max_connections", "%d is under listeners.max_connections_per_source (%d): one source could never reach that", m, n)
	}
	return nil
}

// onePortEach refuses two listeners on one TCP port (every one, the DNS
// listener included, listens on TCP). The second would fail to bind with
// "address already in use", as if another program held the port, which
// sends the operator looking for a program that is not there.
func (c *Config) onePortEach() error {
	ls := []struct{ key, addr string }{
		{"http.addr", c.HTTP.Addr}, {"https.addr", c.HTTPS.Addr}, {"dns.addr", c.DNS.Addr},
		{"management.addr", c.Management.Addr},
	}
	if len(c.Bus.URL) == 0 { // bus.listen is unused with an external bus
		ls = append(ls, struct{ key, addr string }{"bus.listen", c.Bus.Listen})
	}
	for i, a := range ls {
		for _, b := range ls[:i] {
			if SamePort(a.addr, b.addr) {
				msg := "%s is %s's port too (%s is %s): give each listener its own port"
				return &keyError{
					key: a.key, msg: fmt.Sprintf(msg, a.addr, b.key, b.key, b.addr),
					// Load names b instead when b's value, not a's, came
					// from a variable or a flag.
					alt: &keyError{key: b.key, msg: fmt.Sprintf(msg, b.addr, a.key, a.key, a.addr)},
				}
			}
		}
	}
	return nil
}

// SamePort reports whether listeners on addresses a and b would take the
// same TCP port: one port number, not 0 (any free port), and the same
// host as the bind sees it, or either one every interface (Go listens on
// every interface of both families for an empty host, 0.0.0.0 and [::]
// alike). localhost is 127.0.0.1, where Go listens for it, and an
// IPv4-mapped address its IPv4 address; other host names are compared as
// written: only the bind knows what they resolve to. The demo checks its
// flags with it too.
func SamePort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false // refused by checkAddr, or left to the bus to name
	}
	na, errA := strconv.Atoi(pa)
	nb, errB := strconv.Atoi(pb)
	if errA != nil || errB != nil || na == 0 || na != nb {
		return false
	}
	every := func(h string) bool {
		ip, err := netip.ParseAddr(h)
		return h == "" || err == nil && ip.IsUnspecified()
	}
	return bindHost(ha) == bindHost(hb) || every(ha) || every(hb)
}

// bindHost is h as a listener binds it, for SamePort.
func bindHost(h string) string {
	if strings.EqualFold(h, "localhost") {
		return "127.0.0.1"
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return strings.ToLower(h)
}

func (c *Config) validateRecursion() error {
	r := c.DNS.Recursion
	for i, u := range r.Upstreams {
		if err := checkUpstream(u); err != nil {
			return bad(fmt.Sprintf("dns.recursion.upstreams[%d]", i), "%v", err)
		}
	}
	for i, p := range r.Allow {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return bad(fmt.Sprintf("dns.recursion.allow[%d]", i), "must be a CIDR like 10.0.0.0/8 or an IP, got %q", p)
		}
		// DESIGN §8: the gateway is not an open resolver, and recursion
		// is for the platform only.
		if pfx.Bits() == 0 {
			return bad(fmt.Sprintf("dns.recursion.allow[%d]", i), "%q lets every source recurse, an open resolver; list the platform's networks", p)
		}
		if v4, ok := mappedV4(pfx); ok {
			fix := "write " + v4.String()
			if v4.Bits() == 0 { // the IPv4 form is the open resolver refused above
				fix = "its IPv4 form 0.0.0.0/0 would let every source recurse, an open resolver; list the platform's networks"
			}
			return bad(fmt.Sprintf("dns.recursion.allow[%d]", i), "%q is IPv4-mapped and never matches (sources are compared as IPv4); %s", p, fix)
		}
	}
	// The bounds are the DNS server's (internal/dns), as BIND's.
	if n := c.DNS.RateLimit; n < 0 || n > 1000 {
		return bad("dns.rate_limit", "must be 0 (no limit) to 1000 responses a second, got %d", n)
	}
	if n := c.DNS.RateLimitSlip; n < 0 || n > 10 {
		return bad("dns.rate_limit_slip", "must be 0 (drop every response over the limit) to 10, got %d", n)
	}
	if len(r.Allow) > 0 && len(r.Upstreams) == 0 {
		return bad("dns.recursion.allow", "needs dns.recursion.upstreams: without upstreams recursion is off").
			or("dns.recursion.upstreams", "empty turns recursion off, and dns.recursion.allow lists sources that may recurse: give upstreams, or empty dns.recursion.allow too")
	}
	return nil
}

// mappedV4 reports whether p lies wholly inside the IPv4-mapped range
// ::ffff:0:0/96, and returns its IPv4 form. Such a prefix can never match:
// the DNS server and the gateway unmap every address before they compare
// it, and netip.Prefix.Contains never matches an IPv4 address against an
// IPv6 prefix. Accepted, it would fail closed without a word.
func mappedV4(p netip.Prefix) (netip.Prefix, bool) {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), true
}

// checkUpstream accepts a resolver as host:port, the host an IP or a DNS
// name, the port 1-65535 (normalize has given a bare host port 53).
func checkUpstream(s string) error {
	want := fmt.Errorf("must be a resolver host:port like 192.0.2.53:53 or [2001:db8::53]:53 (port 53 if left out), got %q", s)
	host, port, err := net.SplitHostPort(s)
	if err != nil || strings.Contains(s, "/") { // a URL, not an address
		return want
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be a number 1-65535, got %q", s)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || a.IsUnspecified() {
			return want
		}
		return nil
	}
	if n, ok := route.NormalizeHost(host); !ok || n != host || strings.HasPrefix(host, "[") {
		return want
	}
	return nil
}

// checkAddr accepts host:port with a numeric port 0-65535; the host may be
// empty (all interfaces), an IP or a name.
func checkAddr(key, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return bad(key, "must be host:port like 127.0.0.1:8080 or :8080, got %q", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return bad(key, "port must be a number 0-65535, got %q", addr)
	}
	if strings.ContainsAny(host, " /") {
		return bad(key, "bad host in %q", addr)
	}
	// No TCP socket binds a group or the broadcast address: the start
	// would fail at the bind, and a zone seeded from https.addr would
	// send its clients there.
	if a, err := netip.ParseAddr(host); err == nil {
		if a = a.Unmap(); a.IsMulticast() || a.Is4() && a.As4() == [4]byte{255, 255, 255, 255} {
			return bad(key, "%s is a multicast or broadcast address, which no listener can bind: give an address of this machine, or none for every interface, got %q", a, addr)
		}
	}
	return nil
}

func (c *Config) validateBus() error {
	for _, u := range c.Bus.URL {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			return bad("bus.url", "must be nats://host:port URLs, got %q", redactUser(u, p))
		}
		if err := oneOf("bus.url", p.Scheme, "nats", "tls", "ws", "wss"); err != nil {
			return bad("bus.url", "scheme must be one of nats, tls, ws, wss, got %q", redactUser(u, p))
		}
	}
	// The rest of what the bus refuses (a port out of range, a path, ws
	// mixed with nats, a listen host that is a name) internal/gatehouse's
	// New checks by the bus's own rules: config imports no bus.
	if len(c.Bus.URL) == 0 {
		if err := checkAddr("bus.listen", c.Bus.Listen); err != nil {
			return err
		}
	}
	return nil
}

// RedactURL hides the user info of bus URL raw: a bus URL may carry a
// credential (nats://user:password@host), which no error or log line may
// repeat. It handles URLs that do not parse, and ones without "//".
func RedactURL(raw string) string {
	p, err := url.Parse(raw)
	if err != nil {
		p = nil
	}
	return redactUser(raw, p)
}

// redactUser is [RedactURL] for raw already parsed as p (nil if it did
// not parse).
func redactUser(raw string, p *url.URL) string {
	if p != nil && p.Opaque == "" {
		if p.User == nil {
			return raw
		}
		c := *p
		c.User = url.User("xxxxx")
		return c.String()
	}
	// Unparsable, or without "//", where user:password@host parses as
	// scheme:opaque and p.User is nil: hide all before the last '@'.
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			return scheme + "://xxxxx@" + rest[i+1:]
		}
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "xxxxx@" + raw[i+1:]
	}
	return raw
}

func (c *Config) validateCluster() error {
	if !route.ValidLabel(c.Cluster.ID) {
		return bad("cluster.id", "must be a DNS label (a-z, 0-9, '-'), got %q", c.Cluster.ID)
	}
	if u := c.Cluster.URL; u != "" {
		// peers.New applies cluster.ParseURL to it too: caught here,
		// before anything starts, and without repeating a password.
		p, err := cluster.ParseURL(u)
		if err != nil || (p.Path != "" && p.Path != "/") {
			return bad("cluster.url", "must be a base URL like https://eu-1.gw.example.com, without user info, query or fragment, got %q", RedactURL(u))
		}
		// Peers forward to an http:// URL in plain HTTP, which reaches
		// this gateway's http listener: outside serve mode it answers
		// every forward 308 or 404, while its /healthz answers 200 in
		// every mode, so peers keep this cluster active and its apps'
		// requests loop or fail for as long as it runs.
		if p.Scheme == "http" && c.HTTP.Addr == "" {
			return bad("cluster.url", "is http://, so peers forward to this gateway's plain HTTP listener, which http.addr empty does not start; use an https:// URL, or start the listener in http.mode serve, got %q", RedactURL(u)).
				or("http.addr", "empty does not start the plain HTTP listener that peers forward to at cluster.url %q, which is http://: start it, or give cluster.url an https:// URL", RedactURL(u))
		}
		if p.Scheme == "http" && c.HTTP.Mode != HTTPModeServe {
			answer := "a 308 to https"
			if c.HTTP.Mode == HTTPModeACMEOnly {
				answer = "404"
			}
			return bad("cluster.url", "is http://, so peers forward to this gateway's plain HTTP listener, which in http.mode %s answers every forward with %s; use an https:// URL, or http.mode serve, got %q", c.HTTP.Mode, answer, RedactURL(u)).
				or("http.mode", "%s answers with %s every forward peers send to cluster.url %q, which is http://: keep serve, or give cluster.url an https:// URL", c.HTTP.Mode, answer, RedactURL(u))
		}
	}
	// Under a second every request would end 504 before a host could
	// answer: a unit slip ("15ms" for "15s"), not a latency budget.
	if d := c.Cluster.Deadline; d < minTimer {
		return bad("cluster.deadline", "must be at least %s, got %s", minTimer, d)
	}
	if err := oneOf("cluster.hash", c.Cluster.Hash, HashModN, HashRendezvous); err != nil {
		return err
	}
	return checkFile("cluster.key", c.Cluster.Key)
}

// checkFile reports a named file that does not exist, or is not a regular
// file; empty is fine. The start reads a key file whole, and twice (to
// check it before anything is bound, then to use it): a device such as
// /dev/zero took memory until the process died, and a pipe was empty the
// second time.
func checkFile(key, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err != nil {
		return bad(key, "%v", err)
	} else if st.IsDir() {
		return bad(key, "%s is a directory, want a file", path)
	} else if !st.Mode().IsRegular() {
		return bad(key, "%s is not a regular file (a device, a pipe or a socket): want a file", path)
	}
	return nil
}

func (c *Config) validatePeers() error {
	seen := map[string]bool{}
	for i, p := range c.Clusters {
		key := fmt.Sprintf("clusters[%d]", i)
		// A field left out of the file is named missing: "must be 32
		// bytes, got 0" did not say the key was never given.
		switch {
		case p.ID == "":
			return bad(key+".id", "missing: give the peer cluster's id, a DNS label")
		case p.URL == "":
			return bad(key+".url", "missing: give the peer cluster's public base URL, like https://gw.example.com")
		case p.PublicKey == "":
			return bad(key+".public_key", "missing: give the peer cluster's public key, the std base64 gatehouse keygen prints")
		}
		if !route.ValidLabel(p.ID) {
			return bad(key+".id", "must be a DNS label, got %q", p.ID)
		}
		if seen[p.ID] {
			return bad(key+".id", "duplicate cluster %q", p.ID)
		}
		seen[p.ID] = true
		// The same rule peers.New applies: caught here, before anything
		// starts, and with a password in the URL not repeated.
		if _, err := cluster.ParseURL(p.URL); err != nil {
			return bad(key+".url", "must be an http(s) base URL like https://gw.example.com, without user info, query or fragment, got %q", RedactURL(p.URL))
		}
		if err := checkKey(p.PublicKey); err != nil {
			return bad(key+".public_key", "%v", err)
		}
	}
	return nil
}

// checkKey accepts the std base64 of a raw 32-byte Ed25519 public key.
func checkKey(s string) error {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("must be std base64, got %q", s)
	}
	if len(b) != 32 {
		return fmt.Errorf("must be 32 bytes (an Ed25519 key), got %d", len(b))
	}
	// One key, one spelling: the 44 characters keygen prints, as host keys
	// are held to (host.ParsePublicKey), which the gateway parses peers'
	// keys with at start.
	if base64.StdEncoding.EncodeToString(b) != s {
		return fmt.Errorf("must be the 44 characters of std base64 that gatehouse keygen prints, with no line breaks, got %q", s)
	}
	// A peer's key checks its forwards' client marks (DESIGN §5.3): one
	// that takes signatures nobody made would let anyone speak for it.
	if edkey.SmallOrder(b) {
		return errors.New("a point of small order, not a key: anyone can sign for it; give the cluster's real public key (gatehouse keygen)")
	}
	return nil
}

func (c *Config) validateTLS() error {
	if err := oneOf("tls.custom_domains", c.TLS.CustomDomains, "auto", "off"); err != nil {
		return err
	}
	// Under a second it would cut pipes between a client's keystrokes;
	// the kernel reports the idle time in milliseconds.
	if d := c.TLS.PassthroughIdleTimeout; d != 0 && d < time.Second {
		return bad("tls.passthrough_idle_timeout", "must be 0 (never) or at least 1s, got %s", d)
	}
	if d := c.TLS.ACME.Directory; d != "" {
		u, err := url.Parse(d)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return bad("tls.acme.directory", "must be an https URL (ACME runs over HTTPS only, RFC 8555 §6.1), got %q", d)
		}
	}
	// The wildcard *.{zone} is validated by DNS-01, answered by this
	// gateway's own DNS server (DESIGN §9): without it, no certificate
	// for any {app}.{zone} could be issued. Refused here rather than
	// falling back to one HTTP-01 order per app, which runs into the CA's
	// rate limits, or writing challenges nobody answers.
	if c.TLS.ACME.Directory != "" && c.DNS.Addr == "" {
		return bad("dns.addr", "must be set with tls.acme.directory: the wildcard *.{zone} certificate is validated by DNS-01, answered by this gateway's DNS server").
			or("tls.acme.directory", "needs dns.addr, which is empty: the wildcard *.{zone} certificate is validated by DNS-01, answered by this gateway's DNS server")
	}
	if c.TLS.CustomDomains == "auto" && c.TLS.ACME.Directory == "" {
		return bad("tls.custom_domains", "auto needs an ACME CA: set tls.acme.directory").
			or("tls.acme.directory", "empty leaves tls.custom_domains auto without an ACME CA: set one, or tls.custom_domains off too")
	}
	// The CA is sent mailto:{email} as the account's contact and refuses
	// the account for one that is no address, and with it every order:
	// found only in the log, long after the start.
	if e := c.TLS.ACME.Email; e != "" {
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e || a.Name != "" {
			return bad("tls.acme.email", "must be an email address like ops@example.com, got %q", e)
		}
	}
	return checkFile("tls.acme.ca_root", c.TLS.ACME.CARoot)
}

func (c *Config) validateAuth() error {
	seen := map[string]bool{}
	for i, is := range c.Auth.Issuers {
		key := fmt.Sprintf("auth.issuers[%d]", i)
		if is.Issuer == "" {
			return bad(key+".issuer", "must not be empty")
		}
		if seen[is.Issuer] {
			return bad(key+".issuer", "duplicate issuer %q", is.Issuer)
		}
		if !httpguts.ValidHeaderFieldValue(is.Issuer) || strings.TrimSpace(is.Issuer) != is.Issuer {
			// It reaches hosts as X-Gatehouse-Issuer.
			return bad(key+".issuer", "%q cannot be a header value: no control bytes, no leading or trailing space", is.Issuer)
		}
		seen[is.Issuer] = true
		if is.KeysFile == "" {
			return bad(key+".keys_file", "must not be empty")
		}
		if err := checkFile(key+".keys_file", is.KeysFile); err != nil {
			return err
		}
	}
	if c.Auth.MaxSubjects <= 0 {
		return bad("auth.max_subjects", "must be positive, got %d", c.Auth.MaxSubjects)
	}
	if n := c.Auth.MaxSubjects; n > maxLimiterKeys {
		return bad("auth.max_subjects", "must be at most %d, got %d", maxLimiterKeys, n)
	}
	if c.Auth.Leeway < 0 || c.Auth.Leeway > maxLeeway {
		return bad("auth.leeway", "must be between 0s and %s, got %s", maxLeeway, c.Auth.Leeway)
	}
	if strings.ContainsAny(c.Control.Token, " \t\r\n") {
		return bad("control.token", "must not contain white space")
	}
	// A token no Authorization header can carry would match no request:
	// the control API closed, without the start's warning that says so.
	if i := strings.IndexFunc(c.Control.Token, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return bad("control.token", "must not contain control bytes (here %#02x): it is sent in an Authorization header, which cannot carry them", c.Control.Token[i])
	}
	if n := len(c.Control.Token); n > 0 && n < minControlToken {
		return bad("control.token", "must be at least %d bytes, got %d; make one with: openssl rand -hex 16", minControlToken, n)
	}
	return nil
}

// minControlToken is the shortest control.token accepted: 16 bytes of a
// random hex token still hold 64 bits, out of reach of a guesser held to
// 100 tries a minute per address (internal/api), where a short word is
// not.
const minControlToken = 16

// minTimer is the floor of cluster.deadline, drain_timeout,
// heartbeat_interval and reverify_interval, as minListenerTimeout is of
// the listeners' timeouts: far below any sensible value, so only a unit
// mistake hits it. Each refuses 0s and negatives with the same words as
// 500ms: one floor, one message.
const minTimer = time.Second

// maxDrainDelay bounds drain_delay: a load balancer sees /readyz 503
// within a few health checks (one checking every 30 s, 3 failures to
// mark a target down: 90 s), and an orchestrator kills what has not
// exited by its own deadline (Kubernetes' default: 30 s). Ten minutes
// leaves room for a slow one; "10h" for "10s" is a slip that would hold
// every deploy for hours.
const maxDrainDelay = 10 * time.Minute

// maxGCFloorMB bounds runtime.gc_floor_mb at 64 GiB: a floor is about
// the garbage between collections, not a reservation, and a larger one is
// more likely a unit mistake.
const maxGCFloorMB = 64 << 10

// The listeners' lower bounds are far below what any client needs, so
// only a unit mistake hits them: a header block under 1 KiB (a browser
// sends about 500 bytes before cookies) would answer most requests 431,
// a request line under 256 bytes most 414, and a timeout under a second
// cuts off any client further away than the same rack.
const (
	minRequestLine     = 256
	minHeaderBytes     = 1 << 10
	minListenerTimeout = time.Second
)

// maxIdleTimeout bounds listeners.idle_timeout. The listeners arm a
// write's deadline a stall and a half ahead on a monotonic count of
// nanoseconds: past about 1,700,000h that sum wrapped negative, every
// deadline was in the past, and every connection, the management
// listener's too, was closed unanswered while the start said ready. A
// day is far past any keep-alive (nginx's is 75s) and as far as
// limits.window goes.
const maxIdleTimeout = 24 * time.Hour

// maxHeadBytes bounds listeners.max_request_line and max_header_bytes,
// Envoy's bound for its header limit (max_request_headers_kb: 8192). The
// listeners do arithmetic on the limit: HTTP/2 announces it (plus 320
// bytes) as a 32-bit setting, so 4 GiB wrapped to 320 bytes and a
// browser's requests were answered 431, and net/http adds 4 KiB to it,
// so a value near the int range wrapped negative and every request was
// answered 431.
const maxHeadBytes = 8 << 20

// minWindow and maxWindow bound limits.window as the control API bounds
// an app's own rate_limit.window (internal/api): the default is an app's
// window when it sets none, and both are one kind of value. A window
// outside them the limiter cannot enforce.
const (
	minWindow = time.Second
	maxWindow = 24 * time.Hour
)

// maxLimiterKeys bounds limits.max_keys and auth.max_subjects, the keys a
// limiter holds in memory: 100 million is gigabytes of counters, so a
// larger bound is a unit slip or a wish for "no bound". Taken as given,
// one near the int range (math.MaxInt64, say) overflowed the limiter's
// split of the bound over its shards and left room for one key per
// shard: every client past 32 evicted another's counter, and the rate
// limits let everyone through.
const maxLimiterKeys = 100_000_000

// maxLeeway bounds auth.leeway: past a few minutes the skew is a broken
// clock to fix, and every expired token lives on by the leeway.
const maxLeeway = 5 * time.Minute

func (c *Config) validateLimits() error {
	for _, n := range []struct {
		key string
		v   int
	}{
		{"limits.requests", c.Limits.Requests},
		{"limits.unknown_requests", c.Limits.UnknownRequests},
		{"limits.max_keys", c.Limits.MaxKeys},
	} {
		if n.v <= 0 {
			return bad(n.key, "must be positive, got %d", n.v)
		}
	}
	if n := c.Limits.MaxKeys; n > maxLimiterKeys {
		return bad("limits.max_keys", "must be at most %d, got %d", maxLimiterKeys, n)
	}
	if n := c.Runtime.GCFloorMB; n < 0 || n > maxGCFloorMB {
		return bad("runtime.gc_floor_mb", "must be 0 (off) to %d MiB, got %d", maxGCFloorMB, n)
	}
	if w := c.Limits.Window; w < minWindow || w > maxWindow {
		return bad("limits.window", "must be between 1s and 24h, got %s", w)
	}
	for i, p := range c.TrustedProxies {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return bad(fmt.Sprintf("trusted_proxies[%d]", i), "must be a CIDR like 10.0.0.0/8 or an IP, got %q", p)
		}
		if v4, ok := mappedV4(pfx); ok {
			return bad(fmt.Sprintf("trusted_proxies[%d]", i), "%q is IPv4-mapped and never matches (peers are compared as IPv4); write %s", p, v4)
		}
	}
	return nil
}

func (c *Config) validateTimers() error {
	// One refusal for all below the floor, 0s and negatives too: "must
	// be positive" for 0s but "at least 1s" for 500ms sent an operator
	// who fixed the first to the second.
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		// Under a second the drain cuts every request still in flight,
		// which is what a drain is for: "30ms" for "30s" is a unit slip.
		// A second SIGTERM already ends a drain at once.
		{"drain_timeout", c.DrainTimeout},
		// Hosts heartbeat on their own clock (5 s by default): a gateway
		// told 5ms would find every host three heartbeats late and route
		// to none, and sweep its hosts a thousand times a second.
		{"heartbeat_interval", c.HeartbeatInterval},
		// Each one is a challenge to every host: 1ns is a storm.
		{"reverify_interval", c.ReverifyInterval},
	} {
		if d.v < minTimer {
			return bad(d.key, "must be at least %s, got %s", minTimer, d.v)
		}
	}
	// Zero is the default: no delay, the drain of before.
	if c.DrainDelay < 0 || c.DrainDelay > maxDrainDelay {
		return bad("drain_delay", "must be between 0s and %s, got %s", maxDrainDelay, c.DrainDelay)
	}
	// Under a second no load balancer's health check sees the 503: as
	// drain_timeout's floor, "500ms" is a slip for "500s" or "5s".
	if c.DrainDelay > 0 && c.DrainDelay < minTimer {
		return bad("drain_delay", "must be 0s (no delay) or at least %s, got %s", minTimer, c.DrainDelay)
	}
	// discovery removes a host only after it is unhealthy. HostTTL > 3 ×
	// HeartbeatInterval, compared without multiplying: 3 × a huge
	// interval overflows to a negative that every host_ttl would pass.
	// This is host_ttl's only bound: 0s and negatives are refused by it
	// too, as heartbeat_interval is at least minTimer.
	if q, r := c.HostTTL/3, c.HostTTL%3; q < c.HeartbeatInterval || q == c.HeartbeatInterval && r == 0 {
		three := "3 × " + c.HeartbeatInterval.String()
		if c.HeartbeatInterval <= math.MaxInt64/3 {
			three = (3 * c.HeartbeatInterval).String()
		}
		e := bad("host_ttl", "must be more than 3 × heartbeat_interval (%s), got %s", three, c.HostTTL)
		// Raising the interval alone is the usual way here: Load then
		// names it rather than host_ttl, the file's or the default. Not
		// when no interval of at least minTimer would do: host_ttl is
		// what to change.
		if c.HostTTL > 3*minTimer {
			e = e.or("heartbeat_interval", "must be under a third of host_ttl (%s), got %s: raise host_ttl with it", c.HostTTL, c.HeartbeatInterval)
		}
		return e
	}
	return oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
}

// TrustedPrefixes returns TrustedProxies parsed; call it on a valid Config.
func (c *Config) TrustedPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.TrustedProxies))
	for _, p := range c.TrustedProxies {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			out = append(out, pfx)
		}
	}
	return out
}

// RecursionPrefixes returns DNS.Recursion.Allow parsed; call it on a valid
// Config.
func (c *Config) RecursionPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.DNS.Recursion.Allow))
	for _, p := range c.DNS.Recursion.Allow {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			out = append(out, pfx)
		}
	}
	return out
}
