package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// heldLock is a lock this CertKV holds, kept alive by its refresher.
type heldLock struct {
	key  string
	rev  uint64 // written by the refresher until done is closed
	stop chan struct{}
	done chan struct{}
}

type lockValue struct {
	Owner   string    `json:"owner"`
	Created time.Time `json:"created"`
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func lockKey(name string) (string, error) {
	k, err := tokensKey(name)
	if err != nil {
		return "", errors.New("store: lock name is required")
	}
	return k, nil
}

// Lock acquires the named lock, blocking (polling) until it is free or
// ctx ends. Acquisition is an atomic KV Create, so exactly one holder
// across every gateway on the bus wins. The key carries a server-side TTL
// (Options.LockTTL) that the holder renews every TTL/3: if the holder dies
// or is cut off, the server expires the lock and another gateway takes
// it. Like every TTL lock, a holder cut off for longer than the TTL may
// overlap with the next one (certmagic tolerates that; see its Locker).
func (c *CertKV) Lock(ctx context.Context, name string) error {
	key, err := lockKey(name)
	if err != nil {
		return err
	}
	for {
		ok, err := c.tryLock(ctx, name, key)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(c.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("store: lock %s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// tryLock takes the lock name (under key) if no one holds it, and
// reports whether it did.
func (c *CertKV) tryLock(ctx context.Context, name, key string) (bool, error) {
	val, _ := json.Marshal(lockValue{Owner: c.owner, Created: time.Now().UTC()})
	rev, err := c.locks.Create(ctx, key, val, jetstream.KeyTTL(c.ttl))
	if err == nil {
		c.hold(name, key, rev)
		return true, nil
	}
	if !contended(err) {
		return false, fmt.Errorf("store: lock %s: %w", name, err)
	}
	return false, nil
}

// contended reports whether a conditional write lost to another writer:
// the key exists, or its last revision is not the one expected. Create
// over a delete marker reports the latter when two gateways race for it.
func contended(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (c *CertKV) hold(name, key string, rev uint64) {
	h := &heldLock{key: key, rev: rev, stop: make(chan struct{}), done: make(chan struct{})}
	c.mu.Lock()
	c.held[name] = h
	c.mu.Unlock()
	go c.refresh(name, h)
}

// refresh renews h's TTL every ttl/3 until stopped. It rewrites the key
// only if h still holds it (expected last revision); if another holder
// took the key, the lock is lost and refreshing ends.
func (c *CertKV) refresh(name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(c.ttl / 3)
	defer t.Stop()
	subject := "$KV." + bucketLocks + "." + h.key
	val, _ := json.Marshal(lockValue{Owner: c.owner, Created: time.Now().UTC()})
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		// Not while the bus is down: the publish would wait for it until
		// the next tick, and Unlock (a gateway's stop) waits for this.
		tctx, cancelT := context.WithTimeout(context.Background(), c.ttl/3)
		ctx, cancel := whileConnected(tctx, c.js.Conn())
		ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: val},
			jetstream.WithExpectLastSequencePerSubject(h.rev), jetstream.WithMsgTTL(c.ttl))
		cancel()
		cancelT()
		switch {
		case err == nil:
			h.rev = ack.Sequence
		case contended(err):
			c.log.Error("lock lost: it went stale and another holder took it", "lock", name)
			return
		default:
			c.log.Warn("lock refresh failed; retrying", "lock", name, "err", err)
		}
	}
}

// Unlock releases a lock this CertKV holds: it stops the refresher and
// deletes the key if it still holds it. It fails if the lock is not held
// here, or if it was lost to another holder after going stale.
func (c *CertKV) Unlock(ctx context.Context, name string) error {
	c.mu.Lock()
	h := c.held[name]
	delete(c.held, name)
	c.mu.Unlock()
	if h == nil {
		return fmt.Errorf("store: unlock %s: not locked here", name)
	}
	close(h.stop)
	<-h.done
	// While the bus is down the purge cannot reach a server and would
	// wait out the API timeout (5 s), holding up a gateway's stop; the
	// key expires by itself after the TTL instead.
	pctx, cancel := whileConnected(ctx, c.js.Conn())
	defer cancel()
	// The purge marker expires too, so lock names leave nothing behind.
	err := c.locks.Purge(pctx, h.key, jetstream.LastRevision(h.rev), jetstream.PurgeTTL(c.ttl))
	if errors.Is(err, context.Canceled) && ctx.Err() == nil {
		err = nats.ErrDisconnected
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("store: unlock %s: lock was lost to another holder after going stale", name)
	}
	if err != nil {
		return fmt.Errorf("store: unlock %s: %w", name, err)
	}
	return nil
}
