package config

import (
	"log/slog"
	"path/filepath"
	"strings"
	"time"
)

// Config is the whole gateway configuration, one nested struct per part.
// The yaml tags are the keys of gatehouse.yaml; docs/config.md is the
// reference. A Config returned by [Load] is normalized and valid.
type Config struct {
	// DataDir holds the embedded bus's JetStream store and any generated
	// key. Required.
	DataDir string `yaml:"data_dir" json:"data_dir"`
	// Zone is seeded into the store at first start (a zone that already
	// exists is left alone). Empty seeds nothing.
	Zone string `yaml:"zone" json:"zone"`

	HTTP       HTTP      `yaml:"http" json:"http"`
	HTTPS      Listener  `yaml:"https" json:"https"`
	DNS        DNS       `yaml:"dns" json:"dns"`
	Management Listener  `yaml:"management" json:"management"`
	Listeners  Listeners `yaml:"listeners" json:"listeners"`
	Bus        Bus       `yaml:"bus" json:"bus"`
	Cluster    Cluster   `yaml:"cluster" json:"cluster"`
	Clusters   []Peer    `yaml:"clusters" json:"clusters"`
	Control    Control   `yaml:"control" json:"control"`
	TLS        TLS       `yaml:"tls" json:"tls"`
	Auth       Auth      `yaml:"auth" json:"auth"`
	Limits     Limits    `yaml:"limits" json:"limits"`
	Log        Log       `yaml:"log" json:"log"`
	Runtime    Runtime   `yaml:"runtime" json:"runtime"`

	// TrustedProxies are the peers (CIDR prefixes; a bare IP means one
	// address) whose Forwarded/X-Forwarded-* headers are believed. Empty
	// trusts nobody. Normalized to canonical prefixes; an IPv4-mapped one
	// is refused, as peers are compared unmapped and it would never match.
	TrustedProxies []string `yaml:"trusted_proxies" json:"trusted_proxies"`
	// DrainTimeout bounds how long in-flight requests and pipes may take to
	// finish after SIGTERM.
	DrainTimeout time.Duration `yaml:"drain_timeout" json:"drain_timeout"`
	// DrainDelay is how long the listeners go on serving after SIGTERM,
	// with /readyz already 503, before the drain: a load balancer needs
	// a few health checks to stop sending new connections. Zero: the
	// drain begins at once.
	DrainDelay time.Duration `yaml:"drain_delay" json:"drain_delay"`
	// HostTTL removes a host that sent no heartbeat for this long. At least
	// 3 × HeartbeatInterval.
	HostTTL time.Duration `yaml:"host_ttl" json:"host_ttl"`
	// HeartbeatInterval is how often hosts heartbeat; three missed ones
	// make a host unhealthy.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval" json:"heartbeat_interval"`
	// ReverifyInterval repeats every host's challenge this often.
	ReverifyInterval time.Duration `yaml:"reverify_interval" json:"reverify_interval"`

	// from names, by key, the variable or flag Load took the key's value
	// from; a key from the file or the defaults has no entry. See Key.
	from map[string]string
}

// Key is key as an error line names it: "cluster.key (-cluster-key)" or
// "cluster.key (GATEHOUSE_CLUSTER_KEY)" when Load took its value from a
// flag or a variable, else key alone, as Validate's errors name it. A flag
// wins over a variable and a variable over the file, so the key alone
// could send an operator to a file whose value is right. key may carry an
// index, as "auth.issuers[1].keys_file".
func (c *Config) Key(key string) string {
	name, _, _ := strings.Cut(key, "[") // trusted_proxies[1] is trusted_proxies'
	if f := c.from[name]; f != "" {
		return key + " (" + f + ")"
	}
	return key
}

// Listener is one listening address; empty means the listener is not
// started.
type Listener struct {
	Addr string `yaml:"addr" json:"addr"`
}

// DNS is the DNS listener and its recursion (DESIGN §8).
type DNS struct {
	// Addr is where it listens, UDP and TCP; empty: not started.
	Addr string `yaml:"addr" json:"addr"`
	// Recursion forwards names outside every zone upstream, for the
	// platform only. Off by default.
	Recursion Recursion `yaml:"recursion" json:"recursion"`
	// RateLimit is the most UDP responses a second to one source
	// network for one response (internal/dns, response rate limiting);
	// 0: off.
	RateLimit int `yaml:"rate_limit" json:"rate_limit"`
	// RateLimitSlip: one in every RateLimitSlip responses over RateLimit
	// is sent truncated, the rest dropped; 0: all dropped.
	RateLimitSlip int `yaml:"rate_limit_slip" json:"rate_limit_slip"`
}

// Recursion is DESIGN §8's opt-in forwarding of off-zone names. The
// gateway is not an open resolver: over UDP and TCP only the sources in
// Allow may recurse, over HTTP only the platform credential.
type Recursion struct {
	// Upstreams are the resolvers off-zone queries are forwarded to, as
	// host:port (normalized: a missing port is 53), tried in order. Empty:
	// recursion is off, and every off-zone name is REFUSED.
	Upstreams []string `yaml:"upstreams" json:"upstreams"`
	// Allow are the source networks (CIDR prefixes; a bare IP means one
	// address) whose UDP and TCP queries may recurse. Empty: none; the
	// platform may still recurse over the HTTP resolve API. Normalized to
	// canonical prefixes; an IPv4-mapped one is refused, as sources are
	// compared unmapped and it would never match.
	Allow []string `yaml:"allow" json:"allow"`
}

// HTTP is the plaintext listener (DESIGN §3).
type HTTP struct {
	// Addr is where it listens; empty: not started.
	Addr string `yaml:"addr" json:"addr"`
	// Mode is what it does with requests that are not ACME challenges:
	// HTTPModeRedirect (default), HTTPModeACMEOnly or HTTPModeServe.
	Mode string `yaml:"mode" json:"mode"`
}

// HTTP modes.
const (
	HTTPModeRedirect = "redirect"  // 308 to https
	HTTPModeACMEOnly = "acme-only" // ACME HTTP-01 challenges, everything else 404
	HTTPModeServe    = "serve"     // the full L7 path in plaintext
)

// Listeners are the limits on every HTTP listener (DESIGN §3).
type Listeners struct {
	// MaxRequestLine bounds the request line in bytes (longer: 414).
	MaxRequestLine int `yaml:"max_request_line" json:"max_request_line"`
	// MaxHeaderBytes bounds the header block in bytes (larger: 431).
	MaxHeaderBytes int `yaml:"max_header_bytes" json:"max_header_bytes"`
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" json:"read_header_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// TunnelIdleTimeout closes a connection upgraded after a 101
	// (WebSocket), both sides, that carried no byte either way this
	// long; 0: never.
	TunnelIdleTimeout time.Duration `yaml:"tunnel_idle_timeout" json:"tunnel_idle_timeout"`
	// MaxConnections caps the open client connections on the http and
	// https listeners together; 0: a quarter of the process's file
	// descriptor limit.
	MaxConnections int `yaml:"max_connections" json:"max_connections"`
	// MaxConnectionsPerSource caps the open client connections from one
	// source (an IPv4 address or an IPv6 /48) on the same listeners,
	// trusted proxies aside; 0: no per-source cap.
	MaxConnectionsPerSource int `yaml:"max_connections_per_source" json:"max_connections_per_source"`
	// FastPath serves plain HTTP/1.1 requests (the http listener in serve
	// mode, and https) with gatehouse's own HTTP/1.1 loop
	// (internal/lane), everything else with net/http. False: net/http
	// alone.
	FastPath bool `yaml:"fast_path" json:"fast_path"`
}

// Bus says which NATS to use (DESIGN §10).
type Bus struct {
	// URL lists external NATS servers; empty starts an embedded server
	// with JetStream in DataDir. YAML takes a list or one comma-separated
	// string.
	URL StringList `yaml:"url" json:"url"`
	// Listen is where the embedded server accepts clients (hosts). Unused
	// with an external bus.
	Listen string `yaml:"listen" json:"listen"`
}

// Cluster is this gateway's cluster (DESIGN §5).
type Cluster struct {
	// ID is the cluster id, a DNS label.
	ID string `yaml:"id" json:"id"`
	// Affinity forwards requests to the app's owner cluster.
	Affinity bool `yaml:"affinity" json:"affinity"`
	// Failover tries peer clusters when the local attempt fails.
	Failover bool `yaml:"failover" json:"failover"`
	// Deadline covers the local attempt, the owner forward and all peers.
	Deadline time.Duration `yaml:"deadline" json:"deadline"`
	// Hash picks the owner function: HashModN (default) or HashRendezvous.
	// Every cluster must agree.
	Hash string `yaml:"hash" json:"hash"`
	// URL is the public base URL of this cluster's gateways (e.g.
	// https://eu-1.gw.example.com), what peer clusters forward to and
	// probe at {URL}/healthz; it is announced with the cluster's key.
	// Empty: this cluster is not announced to peers.
	URL string `yaml:"url" json:"url"`
	// Key is a PKCS#8 PEM Ed25519 private key file (gatehouse keygen) that
	// signs forwards and cluster announcements. Empty: the assembly
	// generates one at first start and keeps it in DataDir.
	Key string `yaml:"key" json:"key"`
}

// Owner hash functions.
const (
	HashModN       = "modn"
	HashRendezvous = "rendezvous"
)

// Peer is one statically configured cluster (DESIGN §5.1), probed at
// {URL}/healthz.
type Peer struct {
	ID        string `yaml:"id" json:"id"`
	URL       string `yaml:"url" json:"url"`
	PublicKey string `yaml:"public_key" json:"public_key"` // std base64 of the raw 32-byte Ed25519 key
}

// Control is the static platform credential of the control API (DESIGN
// §7).
type Control struct {
	// Token is the static bearer token; empty: only platform JWTs (if an
	// issuer is configured) reach the control API.
	Token string `yaml:"token" json:"token"`
}

// TLS is certificate and handshake policy (DESIGN §3, §9).
type TLS struct {
	// PQOnly refuses clients that cannot do X25519MLKEM768.
	PQOnly bool `yaml:"pq_only" json:"pq_only"`
	// PassthroughIdleTimeout closes a passthrough pipe that carried no
	// byte either way for this long; 0: never.
	PassthroughIdleTimeout time.Duration `yaml:"passthrough_idle_timeout" json:"passthrough_idle_timeout"`
	// CustomDomains is "auto" (on-demand certificates for verified
	// mappings) or "off" (default).
	CustomDomains string `yaml:"custom_domains" json:"custom_domains"`
	ACME          ACME   `yaml:"acme" json:"acme"`
}

// ACME is the certificate authority to order from.
type ACME struct {
	// Directory is the ACME directory URL; empty: no ACME, the bootstrap
	// certificate only.
	Directory string `yaml:"directory" json:"directory"`
	// Email is the ACME account contact; may be empty.
	Email string `yaml:"email" json:"email"`
	// CARoot is a PEM file of roots to trust for the ACME server itself
	// (e.g. Pebble's); empty: the system roots.
	CARoot string `yaml:"ca_root" json:"ca_root"`
}

// Auth is edge token verification (DESIGN §6).
type Auth struct {
	// Issuers whose EdDSA JWTs are accepted; empty: verification off.
	Issuers []Issuer `yaml:"issuers" json:"issuers"`
	// MaxSubjects bounds the per-subject limiter population (LRU); a
	// subject is an (iss, sub) pair.
	MaxSubjects int `yaml:"max_subjects" json:"max_subjects"`
	// Leeway is the clock skew allowed between an issuer and the gateway
	// on a token's exp, nbf and iat.
	Leeway time.Duration `yaml:"leeway" json:"leeway"`
}

// Issuer is one trusted token issuer.
type Issuer struct {
	Issuer   string `yaml:"issuer" json:"issuer"`
	KeysFile string `yaml:"keys_file" json:"keys_file"` // JWKS or PEM public keys
}

// Limits are the default rate limits (DESIGN §2 steps 3 and 6).
type Limits struct {
	// Requests per Window per (app, client address), unless the app says
	// otherwise.
	Requests int           `yaml:"requests" json:"requests"`
	Window   time.Duration `yaml:"window" json:"window"`
	// UnknownRequests per Window per client address for unknown hosts.
	UnknownRequests int `yaml:"unknown_requests" json:"unknown_requests"`
	// MaxKeys bounds the number of (app, client) counters kept; the least
	// recently used are evicted.
	MaxKeys int `yaml:"max_keys" json:"max_keys"`
}

// Runtime tunes the Go runtime of the serving process.
type Runtime struct {
	// GCFloorMB is the heap size, in MiB, below which the garbage
	// collector does not run (internal/gcfloor); 0 leaves Go's default
	// pacing. A GOMEMLIMIT still applies, and GOGC=off is left alone.
	GCFloorMB int `yaml:"gc_floor_mb" json:"gc_floor_mb"`
}

// Log is logging.
type Log struct {
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level" json:"level"`
}

// Default returns the built-in defaults: the development listeners of
// DESIGN §3 and the limits of §2.
func Default() Config {
	return Config{
		DataDir:    "gatehouse-data",
		HTTP:       HTTP{Addr: ":8080", Mode: HTTPModeRedirect},
		HTTPS:      Listener{Addr: ":8443"},
		DNS:        DNS{Addr: ":5353", RateLimit: 200, RateLimitSlip: 2},
		Management: Listener{Addr: "127.0.0.1:9180"},
		Listeners: Listeners{
			MaxRequestLine:    8 << 10,
			MaxHeaderBytes:    64 << 10,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			TunnelIdleTimeout: time.Hour,
			FastPath:          true,
		},
		Bus: Bus{Listen: "127.0.0.1:4222"},
		Cluster: Cluster{
			ID:       "local",
			Affinity: true,
			Failover: true,
			Deadline: 15 * time.Second,
			Hash:     HashModN,
		},
		Auth:              Auth{MaxSubjects: 10000, Leeway: time.Minute},
		TLS:               TLS{CustomDomains: "off", PassthroughIdleTimeout: time.Hour},
		Limits:            Limits{Requests: 600, Window: 60 * time.Second, UnknownRequests: 100, MaxKeys: 100000},
		Log:               Log{Level: "info"},
		Runtime:           Runtime{GCFloorMB: 64},
		DrainTimeout:      30 * time.Second,
		HostTTL:           60 * time.Second,
		HeartbeatInterval: 5 * time.Second,
		ReverifyInterval:  10 * time.Minute,
	}
}

// SlogLevel is Level as a slog.Level; an unknown level (impossible after
// Validate) is Info.
func (l Log) SlogLevel() slog.Level {
	switch l.Level {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// ClusterKeyPath is where the cluster's private key lives: Cluster.Key,
// or cluster.key in DataDir when that is empty (the assembly generates it
// there at first start).
func (c *Config) ClusterKeyPath() string {
	if c.Cluster.Key != "" {
		return c.Cluster.Key
	}
	return filepath.Join(c.DataDir, "cluster.key")
}
