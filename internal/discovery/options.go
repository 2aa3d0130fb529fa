package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

// Keys looks up a host's enrolment. *store.Store satisfies it. An error
// means the host is not enrolled, except while the bus is down or when
// Options.KeysUnavailable says the store could not answer, when the check
// is retried later instead.
type Keys interface {
	GetHostKey(ctx context.Context, hostID string) (*route.HostKey, error)
}

// Options configure a [Discovery]. Conn, Cluster, GatewayID, Builder and
// Keys are required. Negative durations and counts are errors.
type Options struct {
	// Conn is the bus connection; the caller owns it.
	Conn *nats.Conn
	// Cluster is the cluster id whose hosts subjects are read.
	Cluster string
	// GatewayID names this gateway in challenges.
	GatewayID string
	// Builder receives every host change.
	Builder *route.Builder
	// Keys holds the enrolments.
	Keys Keys
	// KeysUnavailable reports whether an error from Keys says the store
	// could not answer now (store.Unavailable: JetStream disabled or
	// without quorum, a call timed out) rather than that the host is not
	// enrolled. Such a lookup says nothing about the host: the check is
	// retried a heartbeat interval later and the host keeps what it had,
	// as while the bus is down. Nil: every error means not enrolled.
	KeysUnavailable func(error) bool
	// HTTPClient challenges and probes hosts. Nil means verify.NewClient().
	// Its transport must be an *http.Transport (or nil) for hosts that
	// announce a host name: each is dialed at the address that passed its
	// challenge, never by its name (see verify.Pin).
	HTTPClient *http.Client
	// Resolver resolves the host names hosts announce, once per check
	// (see verify.Pin). Nil means net.DefaultResolver.
	Resolver verify.AddrResolver
	// HeartbeatInterval is the hosts' heartbeat period. Zero means 5 s.
	HeartbeatInterval time.Duration
	// MissedHeartbeats is how many intervals without a heartbeat make a
	// host unhealthy. Zero means 3.
	MissedHeartbeats int
	// HostTTL is how long without a heartbeat before a host is removed.
	// Zero means 60 s. It must exceed MissedHeartbeats intervals.
	HostTTL time.Duration
	// Reverify is how often a verified host is challenged again. Zero
	// means 10 min.
	Reverify time.Duration
	// VerifyTimeout bounds one verification or probe. Zero means 5 s.
	VerifyTimeout time.Duration
	// Workers bounds concurrent verifications and probes. Zero means 16.
	Workers int
	// MaxHosts bounds how many hosts are tracked. Hosts that never
	// verified are also held to a tenth of it (at least 1): a new host
	// beyond either bound evicts the one of them announced first, and is
	// dropped and counted only when every tracked host has verified (see
	// unproven.go). Zero means 100000.
	MaxHosts int
	// Logger receives dropped messages (at most 10 lines per reason a
	// minute, see doc.go) and verification results. Nil discards.
	Logger *slog.Logger
	// Registry receives the collectors (see metrics.go), registered by
	// New. Nil registers nothing.
	Registry prometheus.Registerer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = host.DefaultHeartbeatInterval
	}
	if o.MissedHeartbeats == 0 {
		o.MissedHeartbeats = 3
	}
	if o.HostTTL == 0 {
		o.HostTTL = 60 * time.Second
	}
	if o.Reverify == 0 {
		o.Reverify = 10 * time.Minute
	}
	if o.VerifyTimeout == 0 {
		o.VerifyTimeout = 5 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = 16
	}
	if o.MaxHosts == 0 {
		o.MaxHosts = 100000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) validate() error {
	switch {
	case o.Conn == nil:
		return errors.New("discovery: Conn is required")
	case !host.ValidCluster(o.Cluster):
		return fmt.Errorf("discovery: Cluster %q is not a DNS label", o.Cluster)
	case o.GatewayID == "" || len(o.GatewayID) > 253:
		return errors.New("discovery: GatewayID is required (at most 253 bytes)")
	case o.Builder == nil:
		return errors.New("discovery: Builder is required")
	case o.Keys == nil:
		return errors.New("discovery: Keys is required")
	case o.HeartbeatInterval < 0:
		return fmt.Errorf("discovery: HeartbeatInterval %s is negative", o.HeartbeatInterval)
	case o.MissedHeartbeats < 0:
		return fmt.Errorf("discovery: MissedHeartbeats %d is negative", o.MissedHeartbeats)
	case o.Reverify < 0:
		return fmt.Errorf("discovery: Reverify %s is negative", o.Reverify)
	case o.VerifyTimeout < 0:
		return fmt.Errorf("discovery: VerifyTimeout %s is negative", o.VerifyTimeout)
	case o.Workers < 0:
		return fmt.Errorf("discovery: Workers %d is negative", o.Workers)
	case o.MaxHosts < 0:
		return fmt.Errorf("discovery: MaxHosts %d is negative", o.MaxHosts)
	case o.HostTTL <= time.Duration(o.MissedHeartbeats)*o.HeartbeatInterval:
		return fmt.Errorf("discovery: HostTTL %s must exceed %d heartbeat intervals of %s", o.HostTTL, o.MissedHeartbeats, o.HeartbeatInterval)
	}
	// The gateway id is signed into challenges; the same rule as the host
	// applies to it.
	r := host.ChallengeRequest{HostID: "x", Nonce: "AAAAAAAAAAAAAAAAAAAAAA==", Gateway: o.GatewayID}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("discovery: GatewayID: %v", err)
	}
	return nil
}
