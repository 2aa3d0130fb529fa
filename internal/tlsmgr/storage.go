package tlsmgr

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"
)

// KV is the shared key-value store with locks that certificates, keys,
// ACME accounts and ACME locks live in. internal/store's CertKV satisfies
// it over NATS JetStream; tlsmgr adapts it to certmagic.Storage.
//
// Contract (certmagic's): keys are slash-separated paths; Load and Stat of
// a missing key return an error wrapping fs.ErrNotExist; List lists keys
// under path (recursively or one level); Lock blocks until the named lock is
// held or ctx ends, and a lock whose holder died must expire by itself (a
// TTL), so one dead gateway cannot stall the cluster; Unlock releases a lock
// this process holds. Safe for concurrent use, across processes.
type KV interface {
	Load(ctx context.Context, key string) ([]byte, error)
	Store(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Exists(ctx context.Context, key string) bool
	List(ctx context.Context, path string, recursive bool) ([]string, error)
	Stat(ctx context.Context, key string) (modified time.Time, size int64, isTerminal bool, err error)
	Lock(ctx context.Context, name string) error
	Unlock(ctx context.Context, name string) error
}

// DNSProvider writes and removes the TXT records of ACME DNS-01
// challenges in a zone, in the libdns shape certmagic drives. AppendRecords
// gets zone with a trailing dot and names relative to it.
type DNSProvider interface {
	libdns.RecordAppender
	libdns.RecordDeleter
}

// kvStorage adapts a KV to certmagic.Storage, counting the locks held
// through it in held.
type kvStorage struct {
	KV
	held *heldLocks
}

var _ certmagic.Storage = kvStorage{}

// Store ends the on-demand order or renewal it writes for when the write
// fails (storeFailure): certmagic would try that order again a minute
// later, and a write that fails after the CA issued (the certificate
// itself) would have the CA issue again, each issuance counted against
// its duplicate-certificate limit. The order's caller opens the name's
// backoff window instead. An OCSP staple is no part of the order:
// certmagic writes it once the certificate is stored, only warns when the
// write fails, and fetches it again later; ended there, an order that got
// its certificate was logged and backed off as failed.
func (s kvStorage) Store(ctx context.Context, key string, value []byte) error {
	err := s.KV.Store(ctx, key, value)
	if err != nil && !strings.HasPrefix(key, ocspPrefix) {
		if f, ok := ctx.Value(storeFailureKey{}).(*storeFailure); ok {
			f.fail(err)
		}
	}
	return err
}

// storeFailure is in the context of an on-demand order or renewal
// (orderOnDemand, renewOnDemand): the first write to the store that failed
// under it, which ended it.
type storeFailure struct {
	end context.CancelFunc // ends the order's context
	mu  sync.Mutex
	err error
}

type storeFailureKey struct{}

// ocspPrefix begins the keys of certmagic's OCSP staples
// (certmagic.StorageKeys.OCSPStaple).
const ocspPrefix = "ocsp/"

// withStoreFailure returns ctx carrying f, whose fail calls end.
func withStoreFailure(ctx context.Context, end context.CancelFunc) (context.Context, *storeFailure) {
	f := &storeFailure{end: end}
	return context.WithValue(ctx, storeFailureKey{}, f), f
}

func (f *storeFailure) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	f.end()
}

// failed returns the first write's error; nil when none failed.
func (f *storeFailure) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (s kvStorage) Lock(ctx context.Context, name string) error {
	if err := s.KV.Lock(ctx, name); err != nil {
		return err
	}
	s.held.add()
	return nil
}

func (s kvStorage) Unlock(ctx context.Context, name string) error {
	defer s.held.done()
	return s.KV.Unlock(ctx, name)
}

func (s kvStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	mod, size, term, err := s.KV.Stat(ctx, key)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	return certmagic.KeyInfo{Key: key, Modified: mod, Size: size, IsTerminal: term}, nil
}

// heldLocks counts the locks certmagic holds through a kvStorage, so that
// Run can wait for the orders it stopped: certmagic runs them on
// goroutines of its own that Run cannot join, and an order holds its lock
// until it has ended, its challenge record removed (with a context
// certmagic does not cancel) included.
type heldLocks struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n is 0; replaced when n leaves 0
}

func newHeldLocks() *heldLocks {
	z := make(chan struct{})
	close(z)
	return &heldLocks{zero: z}
}

func (h *heldLocks) add() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.zero = make(chan struct{})
	}
	h.n++
}

func (h *heldLocks) done() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 0 {
		if h.n--; h.n == 0 {
			close(h.zero)
		}
	}
}

// idle is closed while no lock is held.
func (h *heldLocks) idle() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.zero
}
