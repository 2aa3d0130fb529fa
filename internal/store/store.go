package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotFound is returned by Get and Delete methods for a missing key.
var ErrNotFound = errors.New("store: not found")

// ErrBadValue is returned, wrapped, by Get and Update methods for a stored
// value that does not read: bad JSON, an invalid or oversized value, one
// under another item's key (written around the store). Delete and Put
// replace it as they would a good one.
var ErrBadValue = errors.New("bad stored value")

// ErrNoQuorum is returned, wrapped, by Probe when the bucket's stream
// cannot commit a write, as the server asked sees it: it is Unavailable.
var ErrNoQuorum = errors.New("no quorum")

// Bucket names. Every gateway of a cluster, and every cluster sharing one
// NATS, uses the same buckets.
const (
	bucketApps     = "gatehouse_apps"
	bucketDomains  = "gatehouse_domains"
	bucketZones    = "gatehouse_zones"
	bucketRecords  = "gatehouse_records"
	bucketHostKeys = "gatehouse_hostkeys"
	bucketCerts    = "gatehouse_certs"
	bucketLocks    = "gatehouse_locks"
)

// watchedBuckets are the buckets Run feeds to the routing table. The
// server republishes each of their writes as a plain message under
// republishPrefix+bucket, so a gateway learns a change from whichever
// node it is connected to, even while the node holding its watch consumer
// is down (see Run).
var watchedBuckets = map[string]bool{bucketApps: true, bucketDomains: true, bucketZones: true, bucketRecords: true}

// republishPrefix cannot collide with DESIGN §4's gatehouse.{cluster}.…
// subjects: '_' is not allowed in a cluster id. Only gateways may publish
// there, as only they may write the buckets themselves: hosts connect to
// the embedded bus without credentials and may publish only their own
// subjects (internal/bus), and an external NATS is given the same split
// by its operator (docs/config.md, "Bus security").
const republishPrefix = "gatehouse._store."

// maxValueSize bounds one stored value (a certificate bundle is a few KiB).
const maxValueSize = 1 << 20

// Store is gatehouse's routing state in JetStream KV. All methods are safe
// for concurrent use; Run is called at most once at a time.
type Store struct {
	js     jetstream.JetStream
	opts   Options
	log    *slog.Logger
	resync time.Duration

	apps     kind[route.App]
	domains  kind[route.Domain]
	zones    kind[route.Zone]
	records  kind[route.Record]
	hostKeys kind[route.HostKey]
	certs    *CertKV

	syncOnce sync.Once
	synced   chan struct{}

	// applied is how far Run's table has followed each routing bucket.
	applied applied
	// sortedApps and sortedDomains keep the table's names sorted for
	// the pages (tablepage.go).
	sortedApps, sortedDomains sortedNames

	// lose, set by tests before Run, makes the follower lose a change (both
	// of its copies) when it returns true, as a lost message or a bug
	// would. Nil loses none.
	lose func(bucket, key string, rev uint64) bool
	// checking, set by tests before Run, is called before each of a
	// check's stream requests, with the check's context: it may hold the
	// check (until ctx ends, at the latest) or fail it (its error), as a
	// slow or unreachable server would. Nil does neither.
	checking func(ctx context.Context, bucket string) error
}

// Open creates the buckets that do not exist yet and binds to them.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if js == nil {
		return nil, errors.New("store: jetstream is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Store{js: js, opts: opts, log: opts.logger().With("component", "store"), resync: opts.resync(), synced: make(chan struct{}),
		sortedApps: sortedNames{pick: appNames}, sortedDomains: sortedNames{pick: domainNames}}
	kvs := make(map[string]jetstream.KeyValue)
	var denyPurges []string
	for _, name := range []string{bucketApps, bucketDomains, bucketZones, bucketRecords, bucketHostKeys, bucketCerts, bucketLocks} {
		cfg := jetstream.KeyValueConfig{Bucket: name, History: 1, MaxValueSize: maxValueSize, Storage: jetstream.FileStorage}
		if watchedBuckets[name] {
			cfg.RePublish = &jetstream.RePublish{Source: "$KV." + name + ".>", Destination: republishPrefix + name + ".>"}
		}
		if name == bucketLocks {
			// Per-key TTLs make a dead holder's lock expire on the server,
			// with no clock shared between gateways.
			cfg.LimitMarkerTTL = time.Minute
		}
		kv, denies, err := s.bucket(ctx, cfg)
		if err != nil {
			return nil, err
		}
		kvs[name] = kv
		if denies {
			denyPurges = append(denyPurges, name)
		}
	}
	// Said once every bucket is bound: a start retries a failed Open
	// (internal/gatehouse, while a cluster elects leaders or a node is
	// down), and each try found the same bucket denying purges, so the
	// warning came again every few seconds for as long as the wait.
	for _, name := range denyPurges {
		// Said at the start: a delete only says "rollup not permitted",
		// and on the locks bucket every lock outlives its Unlock by its TTL.
		s.log.Warn("store: a bucket denies purges, so every delete from it fails; make it again without deny_purge",
			"bucket", name)
	}
	s.apps = appKind(kvs[bucketApps])
	s.domains = domainKind(kvs[bucketDomains])
	s.zones = zoneKind(kvs[bucketZones])
	s.records = recordKind(kvs[bucketRecords])
	s.hostKeys = hostKeyKind(kvs[bucketHostKeys])
	nc, lg := js.Conn(), newLeaderGets(js)
	s.apps.conn, s.domains.conn, s.zones.conn, s.records.conn, s.hostKeys.conn = nc, nc, nc, nc, nc
	s.apps.leader, s.domains.leader, s.zones.leader, s.records.leader, s.hostKeys.leader = lg, lg, lg, lg, lg
	s.certs = newCertKV(js, kvs[bucketCerts], kvs[bucketLocks], opts.lockTTL(), s.log)
	return s, nil
}

// bucket binds to cfg.Bucket, creating it if missing, and gives a bucket
// that exists what the gateway needs of it (shape), saying whether it
// denies purges.
func (s *Store) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, bool, error) {
	kv, err := s.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.Replicas = max(s.opts.Replicas, 1)
		kv, err = s.js.CreateKeyValue(ctx, cfg)
		if err == nil {
			return kv, false, nil
		}
		if errors.Is(err, jetstream.ErrBucketExists) { // another gateway won the race
			kv, err = s.js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: bucket %s (replicas %d): %w", cfg.Bucket, max(s.opts.Replicas, 1), err)
	}
	return s.shape(ctx, kv, cfg)
}

// shape updates the stream of kv, an existing bucket, for what the
// gateway needs of it, and only for that: Options.Replicas as a floor (an
// operator who raised a bucket past it, R5 on a 5-node cluster, keeps
// that), want's republish on the routing buckets (the followers read its
// copies: a bucket made before buckets republished, or by another tool,
// lacks it, and one another tool pointed elsewhere or cut to headers
// feeds them nothing, or empty values), rollups (every delete is a purge,
// which is one; but see reshape) and, on the locks bucket, per-message
// TTLs (every lock has one). Every other setting is the operator's and
// stays: direct gets, limits, history, placement, metadata. The update
// starts from the stream's own configuration, not from a
// jetstream.KeyValueConfig: UpdateKeyValue rebuilds the whole stream from
// one, which turned direct gets back on, limits back to none and deletes
// back to denied, and failed the start on a history past the 64 that
// config can say. A stream that needs nothing is sent no update. It
// reports a stream that denies purges, for Open to warn of.
//
// nats-server answers an update only from the stream's leader as it
// applies it, and an update that lands while the stream is between
// leaders (another gateway's raise from one replica to three, started a
// moment before) is applied with no answer at all: gateways started
// together waited out their whole context on it. So each update waits
// for its answer at most updateAttempt, and one that got none is
// followed by the stream's own configuration, read again: an update
// applied meanwhile leaves nothing to change, and one not yet applied is
// sent again. The update is the same either way, and ctx bounds the tries.
func (s *Store) shape(ctx context.Context, kv jetstream.KeyValue, want jetstream.KeyValueConfig) (jetstream.KeyValue, bool, error) {
	var notes []func() // what the first try found to change
	sent := false
	// Without a deadline of ctx's, the tries are bounded as one update
	// was, by the JetStream API timeout: a start retries a failed Open,
	// saying why, and a server that answers no update (its meta leader
	// without quorum) is named there rather than waited on in silence.
	tries := ctx
	if _, ok := ctx.Deadline(); !ok {
		if d := s.js.Options().DefaultTimeout; d > 0 {
			var cancel context.CancelFunc
			tries, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
	}
	for try := 0; ; try++ {
		stream, err := s.js.Stream(ctx, "KV_"+want.Bucket)
		if err != nil {
			return nil, false, fmt.Errorf("store: bucket %s: %w", want.Bucket, err)
		}
		cfg, changed, found := s.reshape(stream.CachedInfo().Config, want)
		denies := !cfg.AllowRollup
		if try == 0 {
			notes = found
		}
		if len(changed) == 0 && !sent {
			return kv, denies, nil
		}
		if len(changed) > 0 {
			sent = true
			actx, cancel := context.WithTimeout(tries, updateAttempt)
			_, err = s.js.UpdateStream(actx, cfg)
			cancel()
			if err != nil && tries.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
				continue
			}
			if err != nil {
				return nil, false, fmt.Errorf("store: bucket %s: update to %s: %w", want.Bucket, strings.Join(changed, ", "), err)
			}
		}
		// Said once done, not when about to be: an update that failed
		// was said again by every retry of the start.
		for _, note := range notes {
			note()
		}
		// Bound again: a KeyValue keeps what it read of the stream when bound.
		kv, err = s.js.KeyValue(ctx, want.Bucket)
		if err != nil {
			return nil, false, fmt.Errorf("store: bucket %s: %w", want.Bucket, err)
		}
		return kv, denies, nil
	}
}

// updateAttempt bounds the wait for the answer to one update of a
// bucket's stream (shape). An update is answered within milliseconds when
// it is answered at all; this leaves a loaded server room.
const updateAttempt = 2 * time.Second

// reshape is have with what the gateway needs of a bucket like want
// (shape), what it changed, for the update's error, and the notes to log
// once the update is done.
func (s *Store) reshape(have jetstream.StreamConfig, want jetstream.KeyValueConfig) (jetstream.StreamConfig, []string, []func()) {
	cfg := have
	var changed []string
	var notes []func()
	if cfg.Replicas < s.opts.Replicas {
		to := s.opts.Replicas
		notes = append(notes, func() {
			s.log.Info("store: raising a bucket's replicas", "bucket", want.Bucket, "from", have.Replicas, "to", to)
		})
		cfg.Replicas = s.opts.Replicas
		changed = append(changed, fmt.Sprintf("%d replicas", cfg.Replicas))
	}
	if r := want.RePublish; r != nil && (cfg.RePublish == nil || *cfg.RePublish != *r) {
		if from := have.RePublish; from != nil {
			notes = append(notes, func() {
				// Both ends: a republish may differ in its source alone.
				s.log.Warn("store: replacing a bucket's republish with the one every gateway reads", "bucket", want.Bucket,
					"from_source", from.Source, "from", from.Destination, "headers_only", from.HeadersOnly,
					"to_source", r.Source, "to", r.Destination)
			})
		}
		cfg.RePublish = r
		changed = append(changed, "republishing")
	}
	// A stream that denies purges cannot allow rollups (the server refuses
	// the update) and no update can lift the denial: it keeps both, and
	// its deletes fail, as they did, instead of the start (Open warns).
	if !cfg.AllowRollup && !cfg.DenyPurge {
		cfg.AllowRollup = true
		changed = append(changed, "rollups")
	}
	if want.LimitMarkerTTL > 0 && !cfg.AllowMsgTTL {
		cfg.AllowMsgTTL = true
		changed = append(changed, "per-message TTLs")
	}
	return cfg, changed, notes
}

// Certs returns the certificate storage and ACME locks for certmagic.
func (s *Store) Certs() *CertKV { return s.certs }

// Synced is closed once Run has loaded every bucket and published the
// first table: a gateway may report ready after it.
func (s *Store) Synced() <-chan struct{} { return s.synced }

// Probe asks for the state of the apps bucket's stream, and fails
// (ErrNoQuorum) when the answer shows the stream cannot commit a write: no
// leader (a server cut off from the rest of its cluster, a replica of the
// stream, answers from its own copy), or a leader that has not heard from
// a majority of the stream's servers for quorumSilence (a leader cut off
// answers so until it finds its quorum lost and steps down, 10 to 20 s).
// One light request, classified by Unavailable.
func (s *Store) Probe(ctx context.Context) error {
	info, err := s.streamInfo(ctx, bucketApps)
	if err != nil {
		return err
	}
	c := info.Cluster
	if c == nil { // one server: its own quorum
		return nil
	}
	if c.Leader == "" {
		return fmt.Errorf("store: stream of %s has no leader: %w", bucketApps, ErrNoQuorum)
	}
	heard := 1 // the leader, which answered
	for _, r := range c.Replicas {
		if r.Active < quorumSilence {
			heard++
		}
	}
	if n := len(c.Replicas) + 1; heard <= n/2 {
		return fmt.Errorf("store: stream of %s: its leader %s has heard from %d of its %d servers within %s: %w",
			bucketApps, c.Leader, heard, n, quorumSilence, ErrNoQuorum)
	}
	return nil
}

// quorumSilence is how long a stream's leader may not have heard from a
// replica before Probe counts it out of reach: a leader hears from each
// at least every second (its heartbeats' answers), and gives up its
// leadership only after 10 s without a majority.
const quorumSilence = 5 * time.Second
