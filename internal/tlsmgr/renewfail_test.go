package tlsmgr

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// TestACMEFailedRenewalBacksOff: a custom domain whose stored certificate
// has expired is renewed in the handshake that needs it; when that
// renewal fails (the name points elsewhere), the name's backoff window
// opens as for a first order: the handshakes after it get the bootstrap
// certificate at once and place no order. Before, renewals were left out
// of the backoff, and every handshake ordered again (4 orders each).
func TestACMEFailedRenewalBacksOff(t *testing.T) {
	// Not parallel: certmagic keeps active challenges in one process-wide
	// map keyed by name.
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	const name = "expired.customer.test"
	p.DNS.PointAway(name, true)
	dir := t.TempDir()
	writeExpired(t, dir, p.Directory, name)

	opts := acmeOptions(p, r, dir, "api.example.test")
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(context.Context, string) error { return nil } // a verified mapping
	var logs testutil.SyncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, m)
	r.issued(t, p, m, "api.example.test")
	before := p.Orders()

	addr := serveTLS(t, m.TLSConfig())
	for i := range 3 {
		leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake %d: %v", i, err)
		}
		if !leaf.Equal(m.boot.Load().Leaf) {
			t.Fatalf("handshake %d: served %v (expires %v), want the bootstrap certificate", i, leaf.DNSNames, leaf.NotAfter)
		}
	}
	orders := p.Orders() - before
	t.Logf("3 handshakes, %d orders", orders)
	if orders < 1 || orders > 2 {
		t.Fatalf("3 handshakes placed %d orders, want the one renewal attempt (1 or 2)", orders)
	}
	if n := strings.Count(logs.String(), "on-demand certificate failed"); n != 1 {
		t.Errorf("the failure was logged %d times, want once for the window:\n%s", n, logs.String())
	}
}

// writeExpired stores, where certmagic looks for the certificate of name
// issued by the CA at directory, one that expired an hour ago.
func writeExpired(t *testing.T, dir, directory, name string) {
	t.Helper()
	cert, _ := testutil.SelfSignedFor(t, name, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	der := cert.Certificate[0]
	kder, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	st := &certmagic.FileStorage{Path: dir}
	iss := (&certmagic.ACMEIssuer{CA: directory}).IssuerKey()
	for k, v := range map[string][]byte{
		certmagic.StorageKeys.SiteCert(iss, name):       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		certmagic.StorageKeys.SitePrivateKey(iss, name): pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		certmagic.StorageKeys.SiteMeta(iss, name):       []byte(`{"sans":["` + name + `"]}`),
	} {
		if err := st.Store(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestACMEUndecodableStoredCertSaysSo: a managed name whose stored
// certificate does not decode (written around gatehouse) is not loaded,
// and certmagic orders no replacement while it is stored: its clients
// get the bootstrap certificate. That was silent (certmagic's own
// logger); the manager now says which name and why, every checkEvery.
func TestACMEUndecodableStoredCertSaysSo(t *testing.T) {
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	const name = "api.example.test"
	dir := t.TempDir()
	st := &certmagic.FileStorage{Path: dir}
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	for _, k := range []string{certmagic.StorageKeys.SiteCert(iss, name), certmagic.StorageKeys.SitePrivateKey(iss, name), certmagic.StorageKeys.SiteMeta(iss, name)} {
		if err := st.Store(t.Context(), k, []byte("garbage")); err != nil {
			t.Fatal(err)
		}
	}
	opts := acmeOptions(p, r, dir, name)
	var logs testutil.SyncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	m.checkEvery = 100 * time.Millisecond
	r.start(t, m)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "the stored certificate of a managed name does not load") && strings.Contains(logs.String(), "name="+name)
	}, "nothing said of the stored certificate that does not load")
}
