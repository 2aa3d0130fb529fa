package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CertKV is certificate storage shared by every gateway on the bus, with
// the semantics of certmagic.Storage (v0.25.6 storage.go) without
// importing certmagic: internal/tlsmgr adapts it. Keys are certmagic
// paths ("certificates/<issuer>/<name>/<name>.crt"): '/'-separated, no
// leading or trailing slash; a "directory" is any proper prefix of a key.
// Each path component is escaped (keys.go) and the components are joined
// by '.', so a directory is a subject prefix.
//
// Safe for concurrent use. Locks live in their own bucket with per-key
// TTLs (see Lock).
type CertKV struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	locks jetstream.KeyValue
	// leader reads kv's keys where every acknowledged write is seen: a
	// certificate just stored by the gateway that obtained it.
	leader *leaderGets
	ttl    time.Duration
	poll   time.Duration
	log    *slog.Logger
	owner  string

	mu   sync.Mutex
	held map[string]*heldLock
}

func newCertKV(js jetstream.JetStream, kv, locks jetstream.KeyValue, ttl time.Duration, log *slog.Logger) *CertKV {
	return &CertKV{js: js, kv: kv, locks: locks, leader: newLeaderGets(js), ttl: ttl, poll: min(250*time.Millisecond, ttl/4),
		log: log, owner: randomID(), held: make(map[string]*heldLock)}
}

func notExist(key string) error {
	return fmt.Errorf("store: certs %s: %w", key, fs.ErrNotExist)
}

func (c *CertKV) keyOf(key string) (string, error) {
	k, err := pathKey(key)
	if err != nil {
		return "", fmt.Errorf("store: certs: %w", err)
	}
	return k, nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (c *CertKV) Load(ctx context.Context, key string) ([]byte, error) {
	k, err := c.keyOf(key)
	if err != nil {
		return nil, err
	}
	e, err := c.leader.get(ctx, c.kv.Bucket(), k)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, notExist(key)
	}
	if err == nil {
		err = checkSize(e.Value())
	}
	if err != nil {
		return nil, fmt.Errorf("store: certs load %s: %w", key, err)
	}
	return e.Value(), nil
}

// Store puts value at key, replacing any value there.
func (c *CertKV) Store(ctx context.Context, key string, value []byte) error {
	k, err := c.keyOf(key)
	if err != nil {
		return err
	}
	if err := checkSize(value); err != nil {
		return fmt.Errorf("store: certs store %s: %w", key, err)
	}
	if _, err := c.kv.Put(ctx, k, value); err != nil {
		return fmt.Errorf("store: certs store %s: %w", key, err)
	}
	return nil
}

// Delete deletes key and, if key is a directory, every key under it. As
// certmagic.Storage requires, a missing key is not an error (nil).
func (c *CertKV) Delete(ctx context.Context, key string) error {
	k, err := c.keyOf(key)
	if err != nil {
		return err
	}
	keys, err := keysUnder(ctx, c.leader, c.kv, k, k+".>")
	if err != nil {
		return fmt.Errorf("store: certs delete %s: %w", key, err)
	}
	for _, kk := range keys {
		if err := c.kv.Purge(ctx, kk); err != nil {
			return fmt.Errorf("store: certs delete %s: %w", key, err)
		}
	}
	return nil
}

// Exists reports whether key is a file or a directory; false on error.
func (c *CertKV) Exists(ctx context.Context, key string) bool {
	_, _, _, err := c.Stat(ctx, key)
	return err == nil
}

// Stat reports on key: for a file its time of last write and size; for a
// directory isTerminal false; for neither an error wrapping fs.ErrNotExist.
func (c *CertKV) Stat(ctx context.Context, key string) (modified time.Time, size int64, isTerminal bool, err error) {
	k, err := c.keyOf(key)
	if err != nil {
		return time.Time{}, 0, false, err
	}
	e, err := c.leader.get(ctx, c.kv.Bucket(), k)
	switch {
	case err == nil:
		return e.Created(), int64(len(e.Value())), true, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted):
		return time.Time{}, 0, false, fmt.Errorf("store: certs stat %s: %w", key, err)
	}
	keys, err := keysUnder(ctx, c.leader, c.kv, k+".>")
	if err != nil {
		return time.Time{}, 0, false, fmt.Errorf("store: certs stat %s: %w", key, err)
	}
	if len(keys) == 0 {
		return time.Time{}, 0, false, notExist(key)
	}
	return time.Time{}, 0, false, nil
}

// List returns the keys under path ("" is the root), sorted. Not recursive:
// its direct children, files and directories. Recursive: every file and
// directory below it, as certmagic's FileStorage walks them. A path that
// does not exist gives an error wrapping fs.ErrNotExist; a file gives none.
func (c *CertKV) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	filter, prefix := jetstream.AllKeys, ""
	if path != "" {
		k, err := c.keyOf(path)
		if err != nil {
			return nil, err
		}
		filter, prefix = k+".>", path+"/"
	}
	keys, err := keysUnder(ctx, c.leader, c.kv, filter)
	if err != nil {
		return nil, fmt.Errorf("store: certs list %s: %w", path, err)
	}
	if len(keys) == 0 && path != "" {
		if _, _, terminal, err := c.Stat(ctx, path); err == nil && terminal {
			return nil, nil
		}
		return nil, notExist(path)
	}
	seen := make(map[string]bool)
	for _, kk := range keys {
		p, err := parsePathKey(kk)
		if err != nil || !strings.HasPrefix(p, prefix) {
			c.log.Warn("skipping bad certificate key", "key", kk, "err", err)
			continue
		}
		rest := strings.Split(p[len(prefix):], "/")
		if !recursive {
			rest = rest[:1]
		}
		for i := range rest {
			seen[prefix+strings.Join(rest[:i+1], "/")] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// keysUnder lists the live keys matching any of filters (see loadAll).
func keysUnder(ctx context.Context, leader *leaderGets, kv jetstream.KeyValue, filters ...string) ([]string, error) {
	entries, err := loadAll(ctx, leader, kv, true, filters...)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for k := range entries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}
