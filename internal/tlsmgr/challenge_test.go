package tlsmgr

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// memKV is an in-memory KV that records the keys Load was asked for.
type memKV struct {
	mu     sync.Mutex
	m      map[string][]byte
	loaded []string
}

func (k *memKV) Load(_ context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.loaded = append(k.loaded, key)
	if v, ok := k.m[key]; ok {
		return v, nil
	}
	return nil, fs.ErrNotExist
}

func (k *memKV) Store(_ context.Context, key string, v []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = v
	return nil
}

func (k *memKV) Delete(_ context.Context, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
	return nil
}

func (k *memKV) Exists(_ context.Context, key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[key]
	return ok
}

func (k *memKV) List(context.Context, string, bool) ([]string, error) { return nil, nil }

func (k *memKV) Stat(context.Context, string) (time.Time, int64, bool, error) {
	return time.Time{}, 0, false, fs.ErrNotExist
}

func (k *memKV) Lock(context.Context, string) error   { return nil }
func (k *memKV) Unlock(context.Context, string) error { return nil }

// challengeLoads returns the keys of ACME challenge data Load was asked for.
func (k *memKV) challengeLoads() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, key := range k.loaded {
		if strings.Contains(key, "challenge_tokens") {
			out = append(out, key)
		}
	}
	return out
}

// TestChallengeForForeignNameCostsNoStorage: anyone can send a
// TLS-ALPN-01 hello (ALPN acme-tls/1 alone) or an HTTP-01 request for
// any name. For a name the gateway would never order (not managed, and
// refused by the on-demand decision) it is refused without reading the
// shared storage, where certmagic looks for a challenge another gateway
// may have begun: otherwise each such handshake or request costs a read
// of the cluster's store, at the rate a client on the internet chooses.
func TestChallengeForForeignNameCostsNoStorage(t *testing.T) {
	kv := &memKV{m: map[string][]byte{}}
	m, err := New(Options{Directory: "https://127.0.0.1:9/dir", Storage: kv, CustomDomains: CustomDomainsAuto,
		Allow: func(_ context.Context, name string) error {
			if name == "shop.customer.test" {
				return nil
			}
			return errors.New("not a verified mapping")
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// With no name to order, Run only builds certmagic's configs: the
	// unreachable directory is never asked.
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for m.iss.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	m.mu.Lock()
	m.names["api.example.test"] = true // managed, as if its order were on
	m.mu.Unlock()

	addr := serveTLS(t, m.TLSConfig())
	for _, name := range []string{"random.attacker.test", "api.example.test", "shop.customer.test"} {
		_, _, err := handshake(addr, &tls.Config{ServerName: name, NextProtos: []string{ACMETLS1}, InsecureSkipVerify: true})
		if err == nil {
			t.Fatalf("%s: a challenge handshake with no challenge succeeded", name)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "http://"+name+"/.well-known/acme-challenge/tok", nil)
		m.HTTPHandler(http.NotFoundHandler()).ServeHTTP(rec, req)
		if rec.Code != 404 {
			t.Fatalf("%s: challenge request: %d", name, rec.Code)
		}
	}
	loads := kv.challengeLoads()
	for _, k := range loads {
		if strings.Contains(k, "random.attacker.test") {
			t.Fatalf("a foreign name's challenge read the storage: %v", loads)
		}
	}
	// The names the gateway may order still look there: another gateway
	// of the cluster may hold their challenge.
	for _, n := range []string{"api.example.test", "shop.customer.test"} {
		found := false
		for _, k := range loads {
			found = found || strings.Contains(k, n)
		}
		if !found {
			t.Errorf("%s: challenge not looked up in the shared storage: %v", n, loads)
		}
	}
}
