package tlsmgr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// writesFail is a store that refuses every write under prefix (a
// certificate's items), and counts them: the store failing to save what
// the CA just issued.
type writesFail struct {
	fileKV
	prefix string
	n      atomic.Int32
}

func (s *writesFail) Store(ctx context.Context, key string, v []byte) error {
	if strings.HasPrefix(key, s.prefix) {
		s.n.Add(1)
		return errors.New("store refuses writes")
	}
	return s.fileKV.Store(ctx, key, v)
}

// TestACMEOnDemandStoreFailureBacksOff: a custom domain's order or
// renewal whose certificate the store refuses to save ends there, says so
// with the store's error, and opens the name's window as the CA's failure
// does: the handshakes after it place no order and write nothing, and a
// due certificate is kept meanwhile. It opened none: certmagic ordered
// again a minute later in the same attempt, and the next handshake after
// the attempt's budget started another one, each issuance counted against
// the CA's duplicate-certificate limit.
func TestACMEOnDemandStoreFailureBacksOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		due    bool   // a due certificate is stored: a renewal; else a first order
		failed string // the log line of the failure
	}{
		{"due.customer.test", true, "renewal failed; the name keeps its certificate"},
		{"new.customer.test", false, "on-demand certificate failed; the name gets the bootstrap certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			hp, tp := r.ports()
			p := tlsmgrtest.Start(t, hp, tp)
			dir := t.TempDir()
			var seeded *x509.Certificate
			if tc.due {
				seeded = seedDueWildcard(t, dir, p.Directory, tc.name) // 10 of 70 days left
			}
			iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
			st := &writesFail{fileKV: fileKV{&certmagic.FileStorage{Path: dir}}, prefix: certmagic.StorageKeys.CertsSitePrefix(iss, tc.name)}
			opts := acmeOptions(p, r, "", "api.example.test")
			opts.Storage = st
			opts.CustomDomains = CustomDomainsAuto
			opts.Allow = func(_ context.Context, n string) error {
				if n == tc.name {
					return nil
				}
				return errors.New("not a verified mapping")
			}
			opts.HandshakeTimeout = time.Second
			m, logs := r.startLogged(t, opts, 0)
			r.issued(t, p, m, "api.example.test") // the ACME account exists: orders from here on are the name's
			before := p.Orders()

			addr := serveTLS(t, m.TLSConfig())
			cfg := &tls.Config{ServerName: tc.name, InsecureSkipVerify: true}
			served := func(step string) {
				t.Helper()
				leaf, _, err := handshake(addr, cfg)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				want := seeded
				if want == nil {
					want = m.boot.Load().Leaf
				}
				if !leaf.Equal(want) {
					t.Fatalf("%s: served %v (expires %v), want %v (expires %v)", step, leaf.DNSNames, leaf.NotAfter, want.DNSNames, want.NotAfter)
				}
			}
			served("first handshake") // starts the order
			testutil.WaitFor(t, 30*time.Second, func() bool {
				return strings.Contains(logs.String(), tc.failed) && m.orders.running(tc.name) == nil
			}, "the attempt the store could not save did not end as failed")
			if !strings.Contains(logs.String(), "store refuses writes") {
				t.Errorf("the failure does not name the store's error:\n%s", logs.String())
			}
			orders, writes := p.Orders(), st.n.Load()
			for i := range 5 {
				served(fmt.Sprintf("handshake %d in the window", i+1))
			}
			time.Sleep(200 * time.Millisecond) // an order the handshakes started would be under way by now
			if n := p.Orders() - orders; n != 0 {
				t.Errorf("handshakes in the window placed %d orders, want none", n)
			}
			if n := st.n.Load() - writes; n != 0 {
				t.Errorf("handshakes in the window wrote to the failing store %d times, want none", n)
			}
			if n := orders - before; n != 1 {
				t.Errorf("the attempt placed %d orders, want 1", n)
			}
			if n := strings.Count(logs.String(), tc.failed); n != 1 {
				t.Errorf("the failure was logged %d times, want once:\n%s", n, logs.String())
			}
		})
	}
}
