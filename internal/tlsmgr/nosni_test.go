package tlsmgr

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/tlsmgr/tlsmgrtest"
)

// TestACMENoSNIGetsTheWildcard: a client that sends no server name (an
// IP-literal URL, an old client, a load balancer's TLS check) gets the
// default certificate, the first managed name's: the bootstrap
// certificate until ACME holds it, then the CA's *.{zone}, as with SNI.
func TestACMENoSNIGetsTheWildcard(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	p.DNS.AddZone(own(t, "example.test"))
	opts := acmeOptions(p, r, t.TempDir(), own(t, "*.example.test"))
	opts.DNSProvider = p.DNS
	opts.DNSResolvers = []string{p.DNSAddr}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, m.TLSConfig())
	noSNI := &tls.Config{InsecureSkipVerify: true} // dialled by IP: crypto/tls sends no SNI
	leaf, st, err := handshake(addr, noSNI)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Equal(m.boot.Load().Leaf) {
		t.Fatalf("before ACME: served %v issued by %q, want the bootstrap certificate", leaf.DNSNames, leaf.Issuer.CommonName)
	}
	r.start(t, m)
	wildcard := r.issued(t, p, m, own(t, "any-app.example.test"))
	leaf, st, err = handshake(addr, noSNI)
	if err != nil {
		t.Fatal(err)
	}
	if st.ServerName != "" {
		t.Fatalf("the client sent SNI %q", st.ServerName)
	}
	if !leaf.Equal(wildcard) {
		t.Fatalf("no SNI: served %v issued by %q, want the ACME wildcard %v", leaf.DNSNames, leaf.Issuer.CommonName, wildcard.DNSNames)
	}
	inter := x509.NewCertPool()
	for _, c := range st.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: p.Roots, Intermediates: inter, DNSName: own(t, "web.example.test")}); err != nil {
		t.Fatalf("no SNI: %v", err)
	}
}
