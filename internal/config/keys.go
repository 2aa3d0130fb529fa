package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// key is one configuration key: its YAML path, its flag (the variable name
// is derived from the flag), the help text, and the field it sets.
type key struct {
	name  string // YAML path, e.g. "http.mode"
	flag  string // flag name without '-', e.g. "http-mode"
	usage string
	field func(c *Config) any // pointer to the field
}

// env is the environment variable of k: GATEHOUSE_ + the flag upper-cased,
// '-' → '_'.
func (k key) env() string {
	return "GATEHOUSE_" + strings.ToUpper(strings.ReplaceAll(k.flag, "-", "_"))
}

// keys lists every key in the order of docs/config.md. A flag is the YAML
// path in kebab case, except the short forms DESIGN §11 and the issue name
// (-data, -http, -https, -dns, -management, -bus, -cluster, -peer,
// -issuer).
var keys = []key{
	{"data_dir", "data", "data directory: embedded bus store, generated keys", func(c *Config) any { return &c.DataDir }},
	{"zone", "zone", "zone seeded at first start, e.g. apps.example.com (empty: none)", func(c *Config) any { return &c.Zone }},
	{"http.addr", "http", "plaintext HTTP listen address (empty: off)", func(c *Config) any { return &c.HTTP.Addr }},
	{"http.mode", "http-mode", "plaintext HTTP: redirect, acme-only or serve", func(c *Config) any { return &c.HTTP.Mode }},
	{"https.addr", "https", "HTTPS listen address (empty: off)", func(c *Config) any { return &c.HTTPS.Addr }},
	{"dns.addr", "dns", "authoritative DNS listen address, udp+tcp (empty: off)", func(c *Config) any { return &c.DNS.Addr }},
	{"dns.recursion.upstreams", "dns-recursion-upstreams", "resolvers host:port (port 53 if left out) that off-zone names are forwarded to, comma separated (empty: recursion off)", func(c *Config) any { return &c.DNS.Recursion.Upstreams }},
	{"dns.recursion.allow", "dns-recursion-allow", "CIDRs whose UDP/TCP DNS queries may recurse, comma separated (empty: none)", func(c *Config) any { return &c.DNS.Recursion.Allow }},
	{"dns.rate_limit", "dns-rate-limit", "most UDP DNS responses a second to one source network for the same answer (0: no limit)", func(c *Config) any { return &c.DNS.RateLimit }},
	{"dns.rate_limit_slip", "dns-rate-limit-slip", "send one in every this many DNS responses over dns.rate_limit truncated, drop the rest (0: drop all)", func(c *Config) any { return &c.DNS.RateLimitSlip }},
	{"management.addr", "management", "management listen address: dashboard, healthz, readyz, metrics, control API", func(c *Config) any { return &c.Management.Addr }},
	{"listeners.max_request_line", "listeners-max-request-line", "longest request line in bytes (longer: 414)", func(c *Config) any { return &c.Listeners.MaxRequestLine }},
	{"listeners.max_header_bytes", "listeners-max-header-bytes", "largest header block in bytes (larger: 431)", func(c *Config) any { return &c.Listeners.MaxHeaderBytes }},
	{"listeners.read_header_timeout", "listeners-read-header-timeout", "time to read a request's headers", func(c *Config) any { return &c.Listeners.ReadHeaderTimeout }},
	{"listeners.idle_timeout", "listeners-idle-timeout", "idle keep-alive timeout", func(c *Config) any { return &c.Listeners.IdleTimeout }},
	{"listeners.tunnel_idle_timeout", "listeners-tunnel-idle-timeout", "close an upgraded connection (WebSocket) idle both ways this long (0: never)", func(c *Config) any { return &c.Listeners.TunnelIdleTimeout }},
	{"listeners.max_connections", "listeners-max-connections", "most open client connections, http and https together (0: a quarter of the file descriptor limit)", func(c *Config) any { return &c.Listeners.MaxConnections }},
	{"listeners.max_connections_per_source", "listeners-max-connections-per-source", "most open client connections from one IPv4 address or IPv6 /48, trusted proxies aside (0: no per-source cap)", func(c *Config) any { return &c.Listeners.MaxConnectionsPerSource }},
	{"listeners.fast_path", "listeners-fast-path", "serve plain HTTP/1.1 requests with gatehouse's own loop (false: net/http alone)", func(c *Config) any { return &c.Listeners.FastPath }},
	{"bus.url", "bus", "external NATS URL(s), comma separated (empty: embedded NATS)", func(c *Config) any { return (*[]string)(&c.Bus.URL) }},
	{"bus.listen", "bus-listen", "embedded NATS client listen address", func(c *Config) any { return &c.Bus.Listen }},
	{"cluster.id", "cluster", "cluster id (a DNS label)", func(c *Config) any { return &c.Cluster.ID }},
	{"cluster.url", "cluster-url", "public base URL of this cluster's gateways, announced to peers (empty: not announced)", func(c *Config) any { return &c.Cluster.URL }},
	{"cluster.affinity", "cluster-affinity", "forward requests to the app's owner cluster", func(c *Config) any { return &c.Cluster.Affinity }},
	{"cluster.failover", "cluster-failover", "fail over to peer clusters", func(c *Config) any { return &c.Cluster.Failover }},
	{"cluster.deadline", "cluster-deadline", "overall deadline for local attempt, owner forward and peers (at least 1s)", func(c *Config) any { return &c.Cluster.Deadline }},
	{"cluster.hash", "cluster-hash", "owner function: modn or rendezvous (all clusters must agree)", func(c *Config) any { return &c.Cluster.Hash }},
	{"cluster.key", "cluster-key", "PKCS#8 PEM Ed25519 private key file of this cluster (empty: generated in the data dir)", func(c *Config) any { return &c.Cluster.Key }},
	{"clusters", "peer", "static peer cluster id=URL,key=BASE64 (repeatable)", func(c *Config) any { return &c.Clusters }},
	{"control.token", "control-token", "static platform bearer token for the control API", func(c *Config) any { return &c.Control.Token }},
	{"tls.pq_only", "tls-pq-only", "refuse clients without X25519MLKEM768", func(c *Config) any { return &c.TLS.PQOnly }},
	{"tls.passthrough_idle_timeout", "tls-passthrough-idle-timeout", "close a passthrough pipe idle both ways this long (0: never)", func(c *Config) any { return &c.TLS.PassthroughIdleTimeout }},
	{"tls.custom_domains", "tls-custom-domains", "certificates for verified custom domains: auto or off", func(c *Config) any { return &c.TLS.CustomDomains }},
	{"tls.acme.directory", "tls-acme-directory", "ACME directory URL (empty: bootstrap certificate only)", func(c *Config) any { return &c.TLS.ACME.Directory }},
	{"tls.acme.email", "tls-acme-email", "ACME account email", func(c *Config) any { return &c.TLS.ACME.Email }},
	{"tls.acme.ca_root", "tls-acme-ca-root", "PEM file of roots trusted for the ACME server (empty: system roots)", func(c *Config) any { return &c.TLS.ACME.CARoot }},
	{"auth.issuers", "issuer", "trusted token issuer ISSUER=KEYS_FILE (repeatable)", func(c *Config) any { return &c.Auth.Issuers }},
	{"auth.max_subjects", "auth-max-subjects", "most token subjects (iss, sub pairs) with live limiters (LRU)", func(c *Config) any { return &c.Auth.MaxSubjects }},
	{"auth.leeway", "auth-leeway", "clock skew allowed on a token's exp, nbf and iat (0 to 5m)", func(c *Config) any { return &c.Auth.Leeway }},
	{"limits.requests", "limits-requests", "default requests per window per (app, client)", func(c *Config) any { return &c.Limits.Requests }},
	{"limits.window", "limits-window", "default rate-limit window", func(c *Config) any { return &c.Limits.Window }},
	{"limits.unknown_requests", "limits-unknown-requests", "requests per window per client to unknown hosts", func(c *Config) any { return &c.Limits.UnknownRequests }},
	{"limits.max_keys", "limits-max-keys", "most (app, client) counters kept (LRU)", func(c *Config) any { return &c.Limits.MaxKeys }},
	{"trusted_proxies", "trusted-proxies", "CIDRs whose X-Forwarded-* is trusted, comma separated", func(c *Config) any { return &c.TrustedProxies }},
	{"drain_timeout", "drain-timeout", "time in-flight work may take to finish on SIGTERM", func(c *Config) any { return &c.DrainTimeout }},
	{"drain_delay", "drain-delay", "time the listeners go on serving on SIGTERM, /readyz 503, before the drain (0 to 10m)", func(c *Config) any { return &c.DrainDelay }},
	{"host_ttl", "host-ttl", "remove a host after this long without heartbeat", func(c *Config) any { return &c.HostTTL }},
	{"heartbeat_interval", "heartbeat-interval", "host heartbeat interval, as the hosts' (at least 1s)", func(c *Config) any { return &c.HeartbeatInterval }},
	{"reverify_interval", "reverify-interval", "repeat every host's challenge this often (at least 1s)", func(c *Config) any { return &c.ReverifyInterval }},
	{"log.level", "log-level", "log level: debug, info, warn or error", func(c *Config) any { return &c.Log.Level }},
	{"runtime.gc_floor_mb", "runtime-gc-floor-mb", "heap MiB below which Go's garbage collector does not run (0: Go's default pacing)", func(c *Config) any { return &c.Runtime.GCFloorMB }},
}

// set parses s into k's field of c. list says whether s is one value of a
// repeatable flag (appended) rather than the whole list (replaced).
func (k key) set(c *Config, s string, appendOne bool) error {
	switch p := k.field(c).(type) {
	case *string:
		*p = s
	case *bool:
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		*p = v
	case *int:
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		*p = v
	case *time.Duration:
		v, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a duration like 30s, got %q", s)
		}
		*p = v
	case *[]string:
		v := splitList(s, ",")
		if appendOne {
			v = append(*p, v...)
		}
		*p = v
	case *[]Peer:
		v, err := parseRepeated(s, appendOne, *p, parsePeer)
		if err != nil {
			return err
		}
		*p = v
	case *[]Issuer:
		v, err := parseRepeated(s, appendOne, *p, parseIssuer)
		if err != nil {
			return err
		}
		*p = v
	default:
		panic(fmt.Sprintf("config: key %s has unhandled type %T", k.name, p))
	}
	return nil
}

// isBool reports whether k's flag may be given without a value.
func (k key) isBool() bool {
	_, ok := k.field(&Config{}).(*bool)
	return ok
}

// isRepeated reports whether each use of k's flag adds to a list.
func (k key) isRepeated() bool {
	switch k.field(&Config{}).(type) {
	case *[]Peer, *[]Issuer, *[]string:
		return true
	}
	return false
}

// parseRepeated parses s as one item (a flag use) or, from the environment,
// as several items separated by ';' or newlines.
func parseRepeated[T any](s string, appendOne bool, cur []T, parse func(string) (T, error)) ([]T, error) {
	var out []T
	if appendOne {
		out = cur
	}
	items := []string{s}
	if !appendOne {
		items = splitList(strings.ReplaceAll(s, "\n", ";"), ";")
	}
	for _, it := range items {
		v, err := parse(strings.TrimSpace(it))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// parsePeer reads "id=URL,key=BASE64".
func parsePeer(s string) (Peer, error) {
	bad := fmt.Errorf("want id=URL,key=BASE64, got %q", s)
	id, rest, ok := strings.Cut(s, "=")
	if !ok {
		return Peer{}, bad
	}
	i := strings.LastIndex(rest, ",key=")
	if i < 0 {
		return Peer{}, bad
	}
	return Peer{ID: strings.TrimSpace(id), URL: strings.TrimSpace(rest[:i]), PublicKey: strings.TrimSpace(rest[i+len(",key="):])}, nil
}

// parseIssuer reads "ISSUER=KEYS_FILE". The issuer may itself contain '='
// only if it is a URL with a query, which issuers do not use; the last '='
// separates.
func parseIssuer(s string) (Issuer, error) {
	i := strings.LastIndex(s, "=")
	if i <= 0 || i == len(s)-1 {
		return Issuer{}, fmt.Errorf("want ISSUER=KEYS_FILE, got %q", s)
	}
	return Issuer{Issuer: strings.TrimSpace(s[:i]), KeysFile: strings.TrimSpace(s[i+1:])}, nil
}

// splitList splits s on sep, trimming spaces and dropping empty items.
func splitList(s, sep string) []string {
	out := []string{}
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
