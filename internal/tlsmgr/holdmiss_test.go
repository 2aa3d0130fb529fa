package tlsmgr

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// readsKV is a memKV that counts, per name, the reads (Load, Exists) of
// the keys under that name.
type readsKV struct {
	memKV
	rmu   sync.Mutex
	reads map[string]int
}

func (k *readsKV) note(key string) {
	k.rmu.Lock()
	defer k.rmu.Unlock()
	for _, n := range []string{"held.customer.test", "expired.customer.test", "kept.customer.test"} {
		if strings.Contains(key, n) {
			k.reads[n]++
		}
	}
}

func (k *readsKV) Load(ctx context.Context, key string) ([]byte, error) {
	k.note(key)
	return k.memKV.Load(ctx, key)
}

func (k *readsKV) Exists(ctx context.Context, key string) bool {
	k.note(key)
	return k.memKV.Exists(ctx, key)
}

func (k *readsKV) count(name string) int {
	k.rmu.Lock()
	defer k.rmu.Unlock()
	return k.reads[name]
}

// TestHeldNameMissCostsOneRead: a custom domain kept without orders (a
// suspended app's, ErrNoNewOrder) that has no certificate to serve (none
// stored, or the stored one expired) gets the bootstrap certificate. Any
// client can send its name at the rate it likes: each such handshake read
// the shared storage (certmagic's loads, and for an expired one its
// renewal check too), where an unknown name costs none and an allowed
// one's failed order backs off. A miss is now remembered for a short
// while, in which the name's handshakes read nothing; past it, the
// storage is read again (another gateway's certificate may be there). A
// held name with a valid stored certificate is loaded once and then
// served from the cache. An expired one is not handed to certmagic's
// renewal, which the decision refuses with two errors logged.
func TestHeldNameMissCostsOneRead(t *testing.T) {
	const directory = "https://127.0.0.1:9/dir" // never asked: nothing is ordered
	kv := &readsKV{memKV: memKV{m: map[string][]byte{}}, reads: map[string]int{}}
	iss := (&certmagic.ACMEIssuer{CA: directory}).IssuerKey()
	expired, _ := testutil.SelfSignedFor(t, "expired.customer.test", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	certPEM, keyPEM := pemPair(t, expired)
	storeSite(t, kvStorage{KV: &kv.memKV}, iss, "expired.customer.test", certPEM, keyPEM, siteMeta("expired.customer.test"))
	kept, _ := testutil.SelfSignedFor(t, "kept.customer.test", time.Now().Add(-time.Hour), time.Now().Add(30*24*time.Hour))
	certPEM, keyPEM = pemPair(t, kept)
	storeSite(t, kvStorage{KV: &kv.memKV}, iss, "kept.customer.test", certPEM, keyPEM, siteMeta("kept.customer.test"))

	clk := newClock()
	logs := new(testutil.SyncBuffer)
	m, err := New(Options{Directory: directory, Storage: kv, CustomDomains: CustomDomainsAuto, Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Allow: func(_ context.Context, name string) error {
			if strings.HasSuffix(name, ".customer.test") {
				return fmt.Errorf("%w: app suspended", ErrNoNewOrder)
			}
			return errors.New("not a verified mapping")
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, 5*time.Second, func() bool { return m.od.Load() != nil }, "no on-demand config")
	addr := serveTLS(t, m.TLSConfig())

	shake := func(name string) bool { // served its own certificate
		t.Helper()
		leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return !leaf.Equal(m.boot.Load().Leaf)
	}
	for _, name := range []string{"held.customer.test", "expired.customer.test", "kept.customer.test"} {
		want := name == "kept.customer.test"
		if got := shake(name); got != want {
			t.Fatalf("%s: served its own certificate: %v, want %v", name, got, want)
		}
		first := kv.count(name)
		if first == 0 {
			t.Fatalf("%s: the first handshake read nothing", name)
		}
		for i := range 5 {
			if got := shake(name); got != want {
				t.Fatalf("%s, handshake %d: served its own certificate: %v, want %v", name, i+2, got, want)
			}
		}
		if n := kv.count(name) - first; n != 0 {
			t.Errorf("%s: 5 more handshakes read the storage %d times, want 0 (the first read it %d times)", name, n, first)
		}
	}
	// Nor did the expired one go to certmagic's renewal, which the
	// decision refuses: two errors logged a handshake.
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs.String())
	}
	// Past the window, a miss reads the storage again, once.
	clk.Add(2 * heldMissWait)
	for _, name := range []string{"held.customer.test", "expired.customer.test"} {
		before := kv.count(name)
		for range 3 {
			if shake(name) {
				t.Fatalf("%s: served its own certificate past the window", name)
			}
		}
		if kv.count(name) == before {
			t.Errorf("%s: not looked up in the storage again past the window", name)
		}
	}
}
