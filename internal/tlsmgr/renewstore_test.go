package tlsmgr

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	t.Parallel()
	for _, tc := range []struct {
		name   string
		due    bool   // a due certificate is stored: a renewal; else a first order
		failed string // the log line of the failure
	}{
		{"due.customer.test", true, "renewal failed; the name keeps its certificate"},
		{"new.customer.test", false, "on-demand certificate failed; the name gets the bootstrap certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := own(t, tc.name)
			r := newRig(t)
			hp, tp := r.ports()
			p := tlsmgrtest.Start(t, hp, tp)
			dir := t.TempDir()
			var seeded *x509.Certificate
			if tc.due {
				seeded = seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
			}
			iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
			st := &writesFail{fileKV: fileKV{&certmagic.FileStorage{Path: dir}}, prefix: certmagic.StorageKeys.CertsSitePrefix(iss, name)}
			opts := acmeOptions(p, r, "", own(t, "api.example.test"))
			opts.Storage = st
			opts.CustomDomains = CustomDomainsAuto
			opts.Allow = func(_ context.Context, n string) error {
				if n == name {
					return nil
				}
				return errors.New("not a verified mapping")
			}
			opts.HandshakeTimeout = time.Second
			m, logs := r.startLogged(t, opts, 0)
			r.issued(t, p, m, own(t, "api.example.test")) // the ACME account exists: orders from here on are the name's
			before := p.Orders()

			addr := serveTLS(t, m.TLSConfig())
			cfg := &tls.Config{ServerName: name, InsecureSkipVerify: true}
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
				return strings.Contains(logs.String(), tc.failed) && m.orders.running(name) == nil
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

// lockGate is a store whose lock of key blocks until open is closed, and
// says when it was asked for: another gateway renewing the name.
type lockGate struct {
	fileKV
	key     string
	waiting chan struct{}
	open    chan struct{}
}

func (s *lockGate) Lock(ctx context.Context, name string) error {
	if name == s.key {
		select {
		case s.waiting <- struct{}{}:
		default:
		}
		select {
		case <-s.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.fileKV.Lock(ctx, name)
}

// TestACMEOnDemandRenewalEndsWhenTheMappingGoes: a custom domain's
// renewal whose mapping is deleted while it runs (here, while it waits for
// the name's lock) asks the CA for nothing and stores nothing: the name is
// no longer the gateway's to certify. It ordered all the same, for a name
// its own gateways then refused to answer the challenges of: a failed
// validation counted against the CA's limits, and a "renewal failed"
// error and backoff window for a name nobody maps.
func TestACMEOnDemandRenewalEndsWhenTheMappingGoes(t *testing.T) {
	t.Parallel()
	name := own(t, "leaving.customer.test")
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	seeded := seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	certFile := filepath.Join(dir, filepath.FromSlash(certmagic.StorageKeys.SiteCert(iss, name)))
	stored, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	st := &lockGate{fileKV: fileKV{&certmagic.FileStorage{Path: dir}}, key: issueLock(name), waiting: make(chan struct{}, 1), open: make(chan struct{})}
	var mapped atomic.Bool
	mapped.Store(true)
	opts := acmeOptions(p, r, "", own(t, "api.example.test"))
	opts.Storage = st
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name && mapped.Load() {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	m, logs := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test")) // the ACME account exists: orders from here on are the name's
	before := p.Orders()

	addr := serveTLS(t, m.TLSConfig())
	leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Equal(seeded) {
		t.Fatalf("served %v, want the stored certificate while it is renewed", leaf.DNSNames)
	}
	select {
	case <-st.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the renewal never asked for the name's lock")
	}
	mapped.Store(false) // the mapping is deleted
	close(st.open)
	testutil.WaitFor(t, 30*time.Second, func() bool { return m.orders.running(name) == nil }, "the renewal did not end")
	if n := p.Orders() - before; n != 0 {
		t.Errorf("the renewal placed %d orders for a name no longer mapped, want none", n)
	}
	if now, err := os.ReadFile(certFile); err != nil || !bytes.Equal(now, stored) {
		t.Errorf("the stored certificate changed (err %v): a renewal stored one for a name no longer mapped", err)
	}
	if strings.Contains(logs.String(), "renewal failed") {
		t.Errorf("a renewal ended for a deleted mapping was logged as failed:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "no longer allowed") {
		t.Errorf("the renewal's end was not logged:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "certmagic: will retry") {
		t.Errorf("the ended renewal is logged as to be retried:\n%s", logs.String())
	}
}

// TestACMEOnDemandStapleWriteIsNoFailedOrder: a custom domain's order
// whose certificate was issued and stored, and whose OCSP staple the
// store then refused to save (certmagic fetches it again later, and says
// so at warn), is no failed order: the name is served its certificate,
// and no failure is logged nor window opened. The store's failure ended
// the order as failed all the same: "the name gets the bootstrap
// certificate" logged, at error, for a name served its certificate.
func TestACMEOnDemandStapleWriteIsNoFailedOrder(t *testing.T) {
	t.Parallel()
	name := own(t, "stapled.customer.test")
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.StartWithOCSP(t, hp, tp)
	st := &writesFail{fileKV: fileKV{&certmagic.FileStorage{Path: t.TempDir()}}, prefix: "ocsp/"}
	opts := acmeOptions(p, r, "", own(t, "api.example.test"))
	opts.Storage = st
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	m, logs := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test"))
	stapled := st.n.Load() // the managed name's staple write

	r.issued(t, p, m, name)
	testutil.WaitFor(t, 30*time.Second, func() bool { return m.orders.running(name) == nil }, "the order did not end")
	if st.n.Load() == stapled {
		t.Fatalf("no staple was written for %s: the test proves nothing", name)
	}
	if strings.Contains(logs.String(), "on-demand certificate failed") {
		t.Errorf("an order whose certificate was issued and stored is logged as failed for its staple:\n%s", logs.String())
	}
	if _, blocked := m.failed.blocked(name, time.Now()); blocked {
		t.Errorf("an order whose certificate was issued and stored opened the name's window for its staple")
	}
}

// TestACMEOnDemandOrderEndsWhenTheMappingGoes: a custom domain's first
// order whose mapping is deleted while it waits for the name's lock asks
// the CA nothing, and its end is logged with renewal=false, as tlsmgr's
// other certificate lines say it. certmagic's cert_obtaining of an order
// carries no "renewal": the line said renewal=<nil>.
func TestACMEOnDemandOrderEndsWhenTheMappingGoes(t *testing.T) {
	t.Parallel()
	name := own(t, "gone.customer.test")
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	st := &lockGate{fileKV: fileKV{&certmagic.FileStorage{Path: t.TempDir()}}, key: issueLock(name), waiting: make(chan struct{}, 1), open: make(chan struct{})}
	var mapped atomic.Bool
	mapped.Store(true)
	opts := acmeOptions(p, r, "", own(t, "api.example.test"))
	opts.Storage = st
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name && mapped.Load() {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	opts.HandshakeTimeout = time.Second
	m, logs := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test"))
	before := p.Orders()

	addr := serveTLS(t, m.TLSConfig())
	leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Equal(m.boot.Load().Leaf) {
		t.Fatalf("served %v, want the bootstrap certificate while the order waits", leaf.DNSNames)
	}
	select {
	case <-st.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the order never asked for the name's lock")
	}
	mapped.Store(false)
	close(st.open)
	testutil.WaitFor(t, 30*time.Second, func() bool { return m.orders.running(name) == nil }, "the order did not end")
	if n := p.Orders() - before; n != 0 {
		t.Errorf("the order placed %d orders for a name no longer mapped, want none", n)
	}
	var ended string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "no longer allowed; its order is ended") {
			ended = l
		}
	}
	if !strings.Contains(ended, " renewal=false ") {
		t.Errorf("the order's end is logged %q, want renewal=false:\n%s", ended, logs.String())
	}
}
