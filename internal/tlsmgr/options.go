package tlsmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Options configures a Manager. The zero value serves a bootstrap
// certificate for "localhost" and never talks to an ACME CA.
type Options struct {
	// Names are the gateway's own names: internal/gatehouse gives the
	// wildcard *.{zone} (which needs a DNSProvider with a Directory), which
	// covers api.{zone} and every {app}.{zone}. The bootstrap certificate
	// covers them, and with a Directory each gets an ACME certificate. More
	// can be added later with Manage. Empty means only "localhost" for the
	// bootstrap. The first is the default certificate's: a hello without
	// SNI gets its ACME certificate once one is held, the bootstrap
	// certificate until then.
	Names []string

	// Directory is the ACME directory URL (tls.acme.directory). Empty: no
	// ACME at all; the bootstrap certificate is all the gateway serves.
	Directory string
	// Email is the ACME account contact (tls.acme.email); may be empty.
	Email string
	// CARoot is a PEM file of roots to trust when talking to the ACME
	// directory (tls.acme.ca_root), for a test or private CA; empty means
	// the system roots.
	CARoot string

	// CustomDomains is tls.custom_domains: "auto" issues on demand for a
	// name Allow accepts; "off" (or empty, the default) never does.
	CustomDomains string
	// Allow decides whether a custom domain may get a certificate on demand;
	// it is asked during the handshake of a name that is not one of Names,
	// before any ACME traffic. Wire it to "mapping verified". nil refuses
	// every name. An error wrapping ErrNoNewOrder keeps the name the
	// certificate it has but orders and renews none.
	Allow func(ctx context.Context, name string) error

	// PQOnly (tls.pq_only) accepts only clients offering X25519MLKEM768.
	PQOnly bool

	// HandshakeTimeout is the listeners' bound on a handshake
	// (listeners.read_header_timeout). A handshake waits for its name's
	// on-demand order at most this long, or 8 s if less: past it the
	// listener has closed the connection, and a wait going on would only
	// hold the handshake's goroutine and memory. 0: 8 s.
	HandshakeTimeout time.Duration

	// Storage holds certificates, keys, ACME accounts and locks, shared by
	// every gateway of the cluster. nil: a directory of files at StorageDir.
	Storage KV
	// StorageDir is used when Storage is nil; empty with a Directory set is
	// an error.
	StorageDir string

	// HTTPPort and TLSPort are the ports the gateway's http and https
	// listeners take ACME challenges on: the ports the CA connects to
	// (80 and 443 in production, which zero means).
	HTTPPort, TLSPort int
	// DisableHTTPChallenge and DisableTLSALPNChallenge turn a challenge
	// type off, for a deployment where that port is not reachable.
	DisableHTTPChallenge, DisableTLSALPNChallenge bool

	// DNSProvider answers ACME DNS-01 challenges by writing TXT records in
	// the gateway's own zones (internal/dns implements it). When set, the
	// managed Names (which may then include wildcards such as "*.{zone}")
	// are validated by DNS-01 only; custom domains on demand keep HTTP-01
	// and TLS-ALPN-01. nil: no DNS-01 and no wildcard names.
	DNSProvider DNSProvider
	// DNSResolvers (host:port) are asked for the SOA of a challenge name to
	// find its zone and then, once the TXT record is written, for that
	// record until they answer it (certmagic's propagation check, up to 2
	// minutes) before the CA is asked to validate. The gateway gives its
	// own DNS server here, so the check proves the record reached the
	// table that server answers from, and nothing leaves the machine.
	// Empty means the system resolvers for the zone, and no propagation
	// check (it would ask the zone's authoritative servers by NS name).
	DNSResolvers []string
	// DNSPropagationDelay is how long to wait after writing a challenge
	// record before asking the CA to validate it, so that every gateway's
	// DNS server has it. Zero waits not at all (a single gateway).
	DNSPropagationDelay time.Duration

	// BootstrapTTL is the bootstrap certificate's lifetime; zero means 24 h.
	BootstrapTTL time.Duration
	// Logger receives certificate events; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Values of Options.CustomDomains.
const (
	CustomDomainsAuto = "auto"
	CustomDomainsOff  = "off"
)

func (o *Options) validate() error {
	switch o.CustomDomains {
	case "", CustomDomainsOff, CustomDomainsAuto:
	default:
		return fmt.Errorf("tlsmgr: custom_domains must be \"auto\" or \"off\", got %q", o.CustomDomains)
	}
	if o.Directory != "" && o.Storage == nil && o.StorageDir == "" {
		return errors.New("tlsmgr: acme needs Storage or StorageDir")
	}
	if o.CARoot != "" {
		if _, err := os.Stat(o.CARoot); err != nil {
			return fmt.Errorf("tlsmgr: acme ca_root: %w", err)
		}
	}
	if o.HTTPPort < 0 || o.HTTPPort > 65535 || o.TLSPort < 0 || o.TLSPort > 65535 {
		return fmt.Errorf("tlsmgr: challenge ports out of range: %d, %d", o.HTTPPort, o.TLSPort)
	}
	if o.BootstrapTTL < 0 {
		return fmt.Errorf("tlsmgr: bootstrap ttl must not be negative, got %s", o.BootstrapTTL)
	}
	for _, n := range o.Names {
		if n == "" {
			return errors.New("tlsmgr: empty name")
		}
		if strings.HasPrefix(n, "*.") && o.DNSProvider == nil && o.Directory != "" {
			return fmt.Errorf("tlsmgr: wildcard name %s needs a DNS provider (DNS-01)", n)
		}
	}
	if o.DNSPropagationDelay < 0 {
		return fmt.Errorf("tlsmgr: dns propagation delay must not be negative, got %s", o.DNSPropagationDelay)
	}
	return nil
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) bootstrapTTL() time.Duration {
	if o.BootstrapTTL == 0 {
		return 24 * time.Hour
	}
	return o.BootstrapTTL
}
