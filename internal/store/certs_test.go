package store_test

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

const (
	crt  = "certificates/acme-v02.api.letsencrypt.org-directory/example.com/example.com.crt"
	key  = "certificates/acme-v02.api.letsencrypt.org-directory/example.com/example.com.key"
	meta = "certificates/acme-v02.api.letsencrypt.org-directory/example.com/example.com.json"
	wild = "certificates/acme-v02.api.letsencrypt.org-directory/wildcard_.example.com/wildcard_.example.com.crt"
	acct = "acme/acme-v02.api.letsencrypt.org-directory/users/me@example.com/me.json"
)

func TestCertKVStorageSemantics(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j, _ := js(t, ns.ClientURL())
	c := open(t, j, store.Options{}).Certs()
	ctx := t.Context()

	if _, err := c.Load(ctx, crt); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load missing: %v", err)
	}
	if _, _, _, err := c.Stat(ctx, crt); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat missing: %v", err)
	}
	if _, err := c.List(ctx, "certificates", false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("List missing: %v", err)
	}
	if err := c.Delete(ctx, crt); err != nil { // certmagic: missing is not an error
		t.Fatalf("Delete missing: %v", err)
	}
	if c.Exists(ctx, crt) {
		t.Fatal("Exists on empty storage")
	}

	before := time.Now().Add(-time.Second)
	for _, k := range []string{crt, key, meta, wild, acct} {
		mustPut(t, c.Store(ctx, k, []byte("v:"+k)))
	}
	mustPut(t, c.Store(ctx, crt, []byte("new"))) // overwrite
	if v, err := c.Load(ctx, crt); err != nil || string(v) != "new" {
		t.Fatalf("Load = %q, %v", v, err)
	}
	mod, size, term, err := c.Stat(ctx, crt)
	if err != nil || size != 3 || !term || mod.Before(before) {
		t.Fatalf("Stat file = %v %d %v %v", mod, size, term, err)
	}
	if _, _, term, err := c.Stat(ctx, "certificates/acme-v02.api.letsencrypt.org-directory"); err != nil || term {
		t.Fatalf("Stat dir = terminal %v, %v", term, err)
	}
	for _, k := range []string{crt, "certificates", "acme/acme-v02.api.letsencrypt.org-directory/users"} {
		if !c.Exists(ctx, k) {
			t.Errorf("Exists(%q) = false", k)
		}
	}
	// "certificates/acme" is a string prefix of nothing component-wise.
	if c.Exists(ctx, "certificates/acme") || c.Exists(ctx, "certificates/acme-v02.api.letsencrypt.org-directory/example") {
		t.Error("a partial component counted as a directory")
	}

	issuer := "certificates/acme-v02.api.letsencrypt.org-directory"
	lists := []struct {
		path      string
		recursive bool
		want      []string
	}{
		{"", false, []string{"acme", "certificates"}},
		{"certificates", false, []string{issuer}},
		{issuer, false, []string{issuer + "/example.com", issuer + "/wildcard_.example.com"}},
		{issuer + "/example.com", false, []string{crt, meta, key}},
		{"certificates", true, []string{issuer, issuer + "/example.com", crt, meta, key, issuer + "/wildcard_.example.com", wild}},
		{crt, false, nil},
	}
	for _, l := range lists {
		got, err := c.List(ctx, l.path, l.recursive)
		if err != nil || !reflect.DeepEqual(got, l.want) {
			t.Errorf("List(%q, %v) = %q, %v\nwant %q", l.path, l.recursive, got, err, l.want)
		}
	}

	// Deleting a directory deletes everything under it, and nothing else.
	mustPut(t, c.Delete(ctx, issuer+"/example.com"))
	for _, k := range []string{crt, key, meta} {
		if c.Exists(ctx, k) {
			t.Errorf("%s survived its directory's delete", k)
		}
	}
	if !c.Exists(ctx, wild) || !c.Exists(ctx, acct) {
		t.Fatal("delete removed a sibling")
	}
	mustPut(t, c.Delete(ctx, acct))
	if c.Exists(ctx, "acme") {
		t.Fatal("empty directory still exists")
	}

	for _, bad := range []string{"", "/x", "x/", "a//b"} {
		if err := c.Store(ctx, bad, []byte("x")); err == nil {
			t.Errorf("Store(%q) accepted", bad)
		}
	}
}

// Two gateways contend for one lock: only one holds it at a time. Each
// holder does a read-modify-write of a shared counter through the storage;
// a lost update would show two holders at once.
func TestLockMutualExclusion(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	j1, _ := js(t, ns.ClientURL())
	j2, _ := js(t, ns.ClientURL())
	c1 := open(t, j1, store.Options{}).Certs()
	c2 := open(t, j2, store.Options{}).Certs()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const perWorker = 4
	var holders, maxHolders atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, c := range []*store.CertKV{c1, c1, c2, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				if err := c.Lock(ctx, "issue_cert_example.com"); err != nil {
					errs <- err
					return
				}
				n := holders.Add(1)
				if n > maxHolders.Load() {
					maxHolders.Store(n)
				}
				v, err := c.Load(ctx, "counter")
				cur := 0
				if err == nil {
					cur, _ = strconv.Atoi(string(v))
				}
				err = c.Store(ctx, "counter", []byte(strconv.Itoa(cur+1)))
				holders.Add(-1)
				if uerr := c.Unlock(ctx, "issue_cert_example.com"); uerr != nil || err != nil {
					errs <- errors.Join(err, uerr)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := maxHolders.Load(); m != 1 {
		t.Fatalf("%d holders at once", m)
	}
	v, err := c1.Load(ctx, "counter")
	if err != nil || string(v) != strconv.Itoa(4*perWorker) {
		t.Fatalf("counter = %q, %v; want %d (lost updates mean overlapping holders)", v, err, 4*perWorker)
	}
	if err := c1.Unlock(ctx, "issue_cert_example.com"); err == nil {
		t.Fatal("Unlock of a lock not held succeeded")
	}
}

// A live holder keeps its lock past the TTL; a dead holder's lock expires
// and another gateway takes it.
func TestLockRefreshAndStaleExpiry(t *testing.T) {
	t.Parallel()
	// 3 s, not less: the holder refreshes every TTL/3, and on a loaded
	// machine (2 cores, -race, the package's other tests) two refreshes in
	// a row were once late enough at 2 s for the lock to expire while held.
	const ttl = 3 * time.Second
	ns := testutil.StartBus(t)
	j1, nc1 := js(t, ns.ClientURL())
	j2, _ := js(t, ns.ClientURL())
	c1 := open(t, j1, store.Options{LockTTL: ttl}).Certs()
	c2 := open(t, j2, store.Options{LockTTL: ttl}).Certs()
	ctx := t.Context()
	mustPut(t, c1.Lock(ctx, "renew"))

	// Refreshed while held: still taken after twice the TTL.
	short, cancel := context.WithTimeout(ctx, 2*ttl)
	err := c2.Lock(short, "renew")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock while held = %v, want deadline exceeded", err)
	}

	// The holder dies (its connection goes away without unlocking).
	nc1.Close()
	start := time.Now()
	long, cancel := context.WithTimeout(ctx, 5*ttl)
	defer cancel()
	if err := c2.Lock(long, "renew"); err != nil {
		t.Fatalf("stale lock never expired: %v", err)
	}
	t.Logf("stale lock taken over after %s (ttl %s)", time.Since(start).Round(10*time.Millisecond), ttl)
	if err := c1.Unlock(ctx, "renew"); err == nil {
		t.Fatal("the dead holder's Unlock succeeded after losing the lock")
	}
	mustPut(t, c2.Unlock(ctx, "renew"))
	// Released: free at once (well within the TTL a stale key would hold).
	quick, cancel2 := context.WithTimeout(ctx, ttl/2)
	defer cancel2()
	mustPut(t, c1Reopen(t, ns.ClientURL(), ttl).Lock(quick, "renew"))
}

func c1Reopen(t *testing.T, url string, ttl time.Duration) *store.CertKV {
	j, _ := js(t, url)
	c := open(t, j, store.Options{LockTTL: ttl}).Certs()
	t.Cleanup(func() { _ = c.Unlock(context.Background(), "renew") })
	return c
}
