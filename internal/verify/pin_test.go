package verify_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/verify"
)

// resolverFunc answers every name with what its func says, counting
// lookups.
type resolverFunc struct {
	calls atomic.Int32
	f     func(host string) ([]netip.Addr, error)
}

func (r *resolverFunc) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.calls.Add(1)
	return r.f(host)
}

// Pin resolves a name once and challenges its addresses in order until
// one passes, and returns that one; the Host header and the TLS server
// name are the announced name's. An IP literal is challenged as it is.
func TestPin(t *testing.T) {
	k := key(t)
	pub := k.Public().(ed25519.PublicKey)
	other := key(t)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			honestLn, wrongLn, port := testutil.ListenTwin(t)
			addr := net.JoinHostPort("web.pin.test", port)
			var mu sync.Mutex
			var seen []string
			record := func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					sni := "-"
					if r.TLS != nil {
						sni = r.TLS.ServerName
					}
					mu.Lock()
					seen = append(seen, r.Host+" "+sni)
					mu.Unlock()
					h.ServeHTTP(w, r)
				})
			}
			for ln, k := range map[net.Listener]ed25519.PrivateKey{honestLn: k, wrongLn: other} {
				srv := httptest.NewUnstartedServer(record(signer(k, "web-1", func() string { return addr })))
				srv.Listener.Close()
				srv.Listener = ln
				if scheme == "https" {
					srv.StartTLS()
				} else {
					srv.Start()
				}
				t.Cleanup(srv.Close)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res := &resolverFunc{f: func(h string) ([]netip.Addr, error) {
				if h != "web.pin.test" {
					return nil, errors.New("no such host")
				}
				// Nothing listens on 127.0.0.3; 127.0.0.2 signs with another key.
				return []netip.Addr{netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("127.0.0.3"),
					netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::ffff:127.0.0.1")}, nil
			}}
			claim := verify.Claim{HostID: "web-1", Addr: addr, Scheme: scheme}
			got, err := verify.Pin(ctx, nil, res, claim, "gw-1", pub)
			if err != nil || got != "127.0.0.1:"+port {
				t.Fatalf("Pin = %q, %v; want 127.0.0.1:%s", got, err, port)
			}
			if res.calls.Load() != 1 {
				t.Fatalf("resolved %d times", res.calls.Load())
			}
			mu.Lock()
			for _, s := range seen {
				if want := addr + " " + map[string]string{"http": "-", "https": "web.pin.test"}[scheme]; s != want {
					t.Errorf("a challenge came with Host and server name %q, want %q", s, want)
				}
			}
			if len(seen) != 2 {
				t.Errorf("challenges %q, want one at 127.0.0.2 and one at 127.0.0.1", seen)
			}
			mu.Unlock()

			// None passes: the first address's error.
			res.f = func(string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}, nil
			}
			if got, err := verify.Pin(ctx, nil, res, claim, "gw-1", pub); got != "" || !errors.Is(err, verify.ErrBadSignature) {
				t.Fatalf("Pin with no honest address = %q, %v", got, err)
			}
			res.f = func(string) ([]netip.Addr, error) { return nil, errors.New("no such host") }
			if got, err := verify.Pin(ctx, nil, res, claim, "gw-1", pub); got != "" || !errors.Is(err, verify.ErrUnreachable) {
				t.Fatalf("Pin of a name that does not resolve = %q, %v", got, err)
			}
			// An IP literal is its own address, not resolved.
			calls := res.calls.Load()
			lit := verify.Claim{HostID: "web-1", Addr: "127.0.0.1:" + port, Scheme: scheme}
			if got, err := verify.Pin(ctx, nil, res, lit, "gw-1", pub); got != "" || !errors.Is(err, verify.ErrBadSignature) || res.calls.Load() != calls {
				// The host signs the name it announced, not this literal.
				t.Fatalf("Pin of an IP literal = %q, %v (%d lookups)", got, err, res.calls.Load()-calls)
			}
		})
	}
}
