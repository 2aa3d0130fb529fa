package tlsmgr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestNoSNIDefaultIsOnlyTheFirstNamesValidCertificate: a hello without
// SNI gets the first managed name's certificate from the cache only
// while it is valid: never a custom domain's on-demand certificate held
// beside it (the client named no server; that one is a customer's), and
// never the first name's expired one (a renewal that kept failing). Both
// leave it the bootstrap certificate.
func TestNoSNIDefaultIsOnlyTheFirstNamesValidCertificate(t *testing.T) {
	m, err := New(Options{Names: []string{"api.example.test"}, Directory: "https://127.0.0.1:9/dir",
		StorageDir: t.TempDir(), CustomDomains: CustomDomainsAuto,
		Allow: func(_ context.Context, name string) error {
			if name == "shop.customer.test" {
				return nil
			}
			return errors.New("not a verified mapping")
		}})
	if err != nil {
		t.Fatal(err)
	}
	// The configs and cache Run builds, without Run's orders.
	cache, err := m.startACME()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Stop)
	m.cache.Store(cache)
	addr := serveTLS(t, m.TLSConfig())
	noSNI := func() *x509.Certificate {
		t.Helper()
		leaf, st, err := handshake(addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.ServerName != "" {
			t.Fatalf("the client sent SNI %q", st.ServerName)
		}
		return leaf
	}
	hold := func(name string, notAfter time.Time) *x509.Certificate {
		t.Helper()
		c, _ := testutil.SelfSignedFor(t, name, notAfter.Add(-90*24*time.Hour), notAfter)
		if _, err := m.od.Load().CacheUnmanagedTLSCertificate(t.Context(), c, nil); err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	boot := m.boot.Load().Leaf
	for _, step := range []struct {
		name     string
		notAfter time.Time
		want     bool // served from then on; else the bootstrap certificate
	}{
		{"shop.customer.test", time.Now().Add(30 * 24 * time.Hour), false},
		{"api.example.test", time.Now().Add(-time.Hour), false},
		{"api.example.test", time.Now().Add(30 * 24 * time.Hour), true},
	} {
		leaf := hold(step.name, step.notAfter)
		want := boot
		if step.want {
			want = leaf
		}
		if got := noSNI(); !got.Equal(want) {
			t.Errorf("%s until %s cached: no SNI served %v until %s (the bootstrap: %v)",
				step.name, step.notAfter.Format(time.RFC3339), got.DNSNames, got.NotAfter.Format(time.RFC3339), got.Equal(boot))
		}
	}
}
