package tlsmgr

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
	"github.com/libdns/libdns"
)

// failingDNS is a DNS-01 provider that cannot write records, so no
// renewal of the wildcard succeeds while the test runs.
type failingDNS struct{}

func (failingDNS) AppendRecords(context.Context, string, []libdns.Record) ([]libdns.Record, error) {
	return nil, errors.New("dns provider down")
}

func (failingDNS) DeleteRecords(context.Context, string, []libdns.Record) ([]libdns.Record, error) {
	return nil, nil
}

// seedDueWildcard writes into certmagic's file storage a certificate for
// name that is due for renewal (10 of its 70 days left), as a gateway
// finds its wildcard some weeks after it was issued.
func seedDueWildcard(t *testing.T, dir, directory, name string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-60 * 24 * time.Hour),
		NotAfter:     now.Add(10 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	issuerKey := (&certmagic.ACMEIssuer{CA: directory}).IssuerKey()
	meta, _ := json.Marshal(map[string]any{"sans": []string{name}, "issuer_data": map[string]any{}})
	files := map[string][]byte{
		certmagic.StorageKeys.SiteCert(issuerKey, name):       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		certmagic.StorageKeys.SitePrivateKey(issuerKey, name): pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		certmagic.StorageKeys.SiteMeta(issuerKey, name):       meta,
	}
	for k, v := range files {
		p := filepath.Join(dir, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return leaf
}

// TestACMEDueWildcardSurvivesOnDemand: with custom domains on, a
// handshake for an app under a zone whose wildcard is due for renewal
// must not make certmagic's on-demand path "renew" the wildcard for the
// app's name, which the decision refuses and which then drops the
// wildcard from the cache: every app of the zone would get the bootstrap
// certificate from the next handshake on. The wildcard is renewed by the
// managed names' own maintenance (DNS-01), and served until then.
func TestACMEDueWildcardSurvivesOnDemand(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	seeded := seedDueWildcard(t, dir, p.Directory, own(t, "*.example.test"))
	opts := acmeOptions(p, r, dir, own(t, "*.example.test"))
	opts.DNSProvider = failingDNS{}
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(context.Context, string) error { return errors.New("not a verified mapping") }
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, m)
	addr := serveTLS(t, m.TLSConfig())
	cfg := &tls.Config{ServerName: own(t, "web.example.test"), InsecureSkipVerify: true}
	testutil.WaitFor(t, 30*time.Second, func() bool {
		leaf, _, err := handshake(addr, cfg)
		return err == nil && leaf.Equal(seeded)
	}, "the stored wildcard was never served")
	for i := range 30 {
		leaf, _, err := handshake(addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !leaf.Equal(seeded) {
			t.Fatalf("handshake %d after the first: served %v (the bootstrap: %v), want the stored wildcard", i+1, leaf.DNSNames, leaf.Equal(m.boot.Load().Leaf))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestACMEOnDemandDueIsRenewed: a custom domain's certificate that is due
// for renewal is served as it is while one renewal runs in the background
// (the gateway's own, under Run, since certmagic's could not be stopped:
// TestStopDuringOnDemandRenewal); the renewed certificate is served once
// it arrives. A renewal that fails (the name's DNS points elsewhere)
// leaves the name its certificate, is logged once, and is not tried again
// at the handshakes of its window.
func TestACMEOnDemandDueIsRenewed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		away bool // the CA cannot validate the name
	}{
		{"renewed.customer.test", false},
		{"stuck.customer.test", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := own(t, tc.name)
			r := newRig(t)
			hp, tp := r.ports()
			p := tlsmgrtest.Start(t, hp, tp)
			dir := t.TempDir()
			seeded := seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
			opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
			opts.CustomDomains = CustomDomainsAuto
			opts.Allow = func(_ context.Context, n string) error {
				if n == name {
					return nil
				}
				return errors.New("not a verified mapping")
			}
			m, logs := r.startLogged(t, opts, 0)
			r.issued(t, p, m, own(t, "api.example.test")) // the ACME account exists: orders from here on are the name's
			before := p.Orders()
			p.DNS.PointAway(name, tc.away)

			addr := serveTLS(t, m.TLSConfig())
			cfg := &tls.Config{ServerName: name, InsecureSkipVerify: true}
			leaf, _, err := handshake(addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !leaf.Equal(seeded) {
				t.Fatalf("first handshake served %v, want the stored certificate while it is renewed", leaf.DNSNames)
			}
			if !tc.away {
				testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
					_, _, err := handshake(addr, &tls.Config{ServerName: name, RootCAs: p.Roots})
					return err == nil
				}, "the renewed certificate was never served")
				if n := p.Orders() - before; n != 1 {
					t.Fatalf("the renewal placed %d orders, want 1", n)
				}
				return
			}
			testutil.WaitFor(t, 30*time.Second, func() bool {
				return strings.Contains(logs.String(), "renewal failed; the name keeps its certificate")
			}, "the failed renewal was not logged")
			orders := p.Orders()
			for i := range 5 {
				leaf, _, err := handshake(addr, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if !leaf.Equal(seeded) {
					t.Fatalf("handshake %d after the failure served %v, want the stored certificate (still valid)", i+1, leaf.DNSNames)
				}
			}
			if n := p.Orders(); n != orders {
				t.Errorf("handshakes in the window placed %d orders, want none", n-orders)
			}
			if n := strings.Count(logs.String(), "renewal failed"); n != 1 {
				t.Errorf("the failure was logged %d times, want once:\n%s", n, logs.String())
			}
		})
	}
}

// readsFailAfterSave is a store whose reads of prefix fail once something
// was stored under it: the store unreachable just after a renewal saved
// the renewed certificate.
type readsFailAfterSave struct {
	fileKV
	prefix string
	saved  atomic.Bool
}

func (s *readsFailAfterSave) Store(ctx context.Context, key string, v []byte) error {
	err := s.fileKV.Store(ctx, key, v)
	if strings.HasPrefix(key, s.prefix) {
		s.saved.Store(true)
	}
	return err
}

func (s *readsFailAfterSave) Load(ctx context.Context, key string) ([]byte, error) {
	if s.saved.Load() && strings.HasPrefix(key, s.prefix) {
		return nil, errors.New("store unreachable")
	}
	return s.fileKV.Load(ctx, key)
}

// TestACMEOnDemandRenewalKeepsItsCertificateUntilTheRenewedLoads: a custom
// domain whose renewed certificate does not load from the store (the
// store unreachable just after the renewal saved it) keeps its current
// certificate, still valid, until the renewed one loads. The renewal
// dropped the current one from the cache before it loaded the renewed
// one: the domain's clients got the bootstrap certificate while a valid
// certificate of theirs was there to serve.
func TestACMEOnDemandRenewalKeepsItsCertificateUntilTheRenewedLoads(t *testing.T) {
	t.Parallel()
	name := own(t, "renewed.customer.test")
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	seeded := seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
	opts := acmeOptions(p, r, "", own(t, "api.example.test"))
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	opts.Storage = &readsFailAfterSave{fileKV: fileKV{&certmagic.FileStorage{Path: dir}}, prefix: certmagic.StorageKeys.CertsSitePrefix(iss, name)}
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	opts.HandshakeTimeout = time.Second
	m, logs := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test"))

	addr := serveTLS(t, m.TLSConfig())
	cfg := &tls.Config{ServerName: name, InsecureSkipVerify: true}
	leaf, _, err := handshake(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Equal(seeded) {
		t.Fatalf("first handshake served %v, want the stored certificate while it is renewed", leaf.DNSNames)
	}
	testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
		return strings.Contains(logs.String(), `cert_obtained" identifier=`+name)
	}, "the due certificate was not renewed")
	// Then the renewal swaps the certificates, or tries to.
	testutil.WaitFor(t, 10*time.Second, func() bool { return m.orders.running(name) == nil }, "the renewal did not end")
	for i := range 3 {
		leaf, _, err := handshake(addr, cfg)
		if err != nil {
			t.Fatalf("handshake %d: %v", i+1, err)
		}
		if !leaf.Equal(seeded) {
			t.Fatalf("handshake %d served %v (expires %v), want the current certificate, valid until %v",
				i+1, leaf.DNSNames, leaf.NotAfter, seeded.NotAfter)
		}
	}
}

// TestACMEFailedRenewalWithoutStoredItemsKeepsTheCertificate: a custom
// domain's due certificate whose stored items are gone (deleted from the
// store while it stayed cached) is renewed by a new order, certmagic's
// way; when that fails, the name keeps its certificate as after any
// failed renewal, and the log says so. It said the name got the
// bootstrap certificate, which its clients never did.
func TestACMEFailedRenewalWithoutStoredItemsKeepsTheCertificate(t *testing.T) {
	t.Parallel()
	name := own(t, "vanished.customer.test")
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	p.DNS.PointAway(name, true) // every renewal fails
	dir := t.TempDir()
	seeded := seedDueWildcard(t, dir, p.Directory, name) // 10 of 70 days left
	clk := newClock()
	opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	opts.Now = clk.Now
	m, logs := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test"))
	addr := serveTLS(t, m.TLSConfig())
	cfg := &tls.Config{ServerName: name, InsecureSkipVerify: true}
	served := func(step string) {
		t.Helper()
		leaf, _, err := handshake(addr, cfg)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !leaf.Equal(seeded) {
			t.Fatalf("%s: served %v, want the current certificate (still valid)", step, leaf.DNSNames)
		}
	}
	const keeps, boot = "renewal failed; the name keeps its certificate", "on-demand certificate failed; the name gets the bootstrap certificate"
	failures := func() int { return strings.Count(logs.String(), keeps) + strings.Count(logs.String(), boot) }

	served("first handshake") // caches the certificate and starts its renewal
	testutil.WaitFor(t, 30*time.Second, func() bool { return failures() == 1 }, "the first renewal did not fail")
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(certmagic.StorageKeys.CertsSitePrefix(iss, name)))); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * backoffFirst) // the window is over
	served("handshake after the window")
	testutil.WaitFor(t, 30*time.Second, func() bool { return failures() == 2 }, "the second renewal did not fail")
	served("handshake after the second failure")
	if n := strings.Count(logs.String(), boot); n != 0 {
		t.Errorf("logged %d times that the name gets the bootstrap certificate, which it never did:\n%s", n, logs.String())
	}
}
