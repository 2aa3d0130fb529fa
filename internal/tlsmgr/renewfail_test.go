package tlsmgr

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"slices"
	"strings"
	"sync/atomic"
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
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	name := own(t, "expired.customer.test")
	p.DNS.PointAway(name, true)
	dir := t.TempDir()
	writeExpired(t, dir, p.Directory, name)

	opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(context.Context, string) error { return nil } // a verified mapping
	m, logs := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test"))
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
	certPEM, keyPEM := pemPair(t, cert)
	storeSite(t, &certmagic.FileStorage{Path: dir}, (&certmagic.ACMEIssuer{CA: directory}).IssuerKey(), name, certPEM, keyPEM, siteMeta(name))
}

// storeSite stores name's certificate, key and metadata, each unless nil,
// where certmagic looks for those issued by iss.
func storeSite(t *testing.T, st certmagic.Storage, iss, name string, cert, key, meta []byte) {
	t.Helper()
	for k, v := range map[string][]byte{
		certmagic.StorageKeys.SiteCert(iss, name):       cert,
		certmagic.StorageKeys.SitePrivateKey(iss, name): key,
		certmagic.StorageKeys.SiteMeta(iss, name):       meta,
	} {
		if v == nil {
			continue
		}
		if err := st.Store(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// pemPair is c's leaf certificate and its EC key in PEM, as certmagic
// stores them.
func pemPair(t *testing.T, c tls.Certificate) (cert, key []byte) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// siteMeta is certmagic's metadata for a certificate of name.
func siteMeta(name string) []byte { return []byte(`{"sans":["` + name + `"]}`) }

// TestACMEUnusableStoredCertIsReplaced: a managed name whose stored
// certificate does not decode (written around gatehouse) is not loaded,
// and certmagic orders no replacement while it is stored: its clients got
// the bootstrap certificate until an operator deleted it by hand. The
// manager now says so, deletes it and orders a new one, which is served.
func TestACMEUnusableStoredCertIsReplaced(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	name := own(t, "api.example.test")
	dir := t.TempDir()
	st := &certmagic.FileStorage{Path: dir}
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	garbage := []byte("garbage")
	storeSite(t, st, iss, name, garbage, garbage, garbage)
	opts := acmeOptions(p, r, dir, name)
	m, logs := r.startLogged(t, opts, 100*time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "is deleted and a new one ordered") && strings.Contains(logs.String(), "name="+name)
	}, "nothing said of the stored certificate that does not load")
	leaf := r.issued(t, p, m, name)
	if !slices.Contains(leaf.DNSNames, name) {
		t.Fatalf("served %v, want a certificate for %s", leaf.DNSNames, name)
	}
	b, err := st.Load(t.Context(), certmagic.StorageKeys.SiteCert(iss, name))
	if err != nil || bytes.Equal(b, []byte("garbage")) {
		t.Fatalf("stored certificate after the order: %q, %v", b, err)
	}
}

// TestACMEStoredCertNotLoadingSaysSo: a stored certificate that does
// not load for a reason deleteUnusable does not prove (here a key pair
// with no names, which certmagic refuses) is kept, and the manager says
// which name does not load, every checkEvery, as it did before it
// deleted any.
func TestACMEStoredCertNotLoadingSaysSo(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	name := own(t, "api.example.test")
	dir := t.TempDir()
	st := &certmagic.FileStorage{Path: dir}
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certKey := certmagic.StorageKeys.SiteCert(iss, name)
	storeSite(t, st, iss, name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), siteMeta(name))
	opts := acmeOptions(p, r, dir, name)
	_, logs := r.startLogged(t, opts, 100*time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return strings.Count(logs.String(), "the stored certificate of a managed name does not load") >= 2 && strings.Contains(logs.String(), "name="+name)
	}, "nothing said of the stored certificate that does not load")
	if !st.Exists(t.Context(), certKey) {
		t.Fatal("a certificate not proven unusable was deleted")
	}
}

// TestDeleteUnusable: only a certificate whose three items are all read
// and do not make a certificate is deleted; a usable one (expired
// included), a missing item, or an item the store cannot read now is
// left where it is.
func TestDeleteUnusable(t *testing.T) {
	const iss, name = "ca.example.test-directory", "app.example.test"
	good, _ := testutil.SelfSignedFor(t, name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	expired, _ := testutil.SelfSignedFor(t, name, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	other, _ := testutil.SelfSignedFor(t, name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	goodCert, goodKey := pemPair(t, good)
	expiredCert, expiredKey := pemPair(t, expired)
	_, otherKey := pemPair(t, other)
	meta := siteMeta(name)
	errDown := errors.New("store down")
	for _, tc := range []struct {
		name          string
		cert, key, md []byte // nil: not stored
		loadErr       error
		want          bool
	}{
		{"usable", goodCert, goodKey, meta, nil, false},
		{"expired is usable", expiredCert, expiredKey, meta, nil, false},
		{"garbage certificate", []byte("garbage"), goodKey, meta, nil, true},
		{"key of another certificate", goodCert, otherKey, meta, nil, true},
		{"metadata no JSON", goodCert, goodKey, []byte("garbage"), nil, true},
		{"metadata JSON but no object", goodCert, goodKey, []byte("[]"), nil, true},
		{"key missing", []byte("garbage"), nil, meta, nil, false},
		{"store down", []byte("garbage"), []byte("garbage"), []byte("garbage"), errDown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &certmagic.FileStorage{Path: t.TempDir()}
			keys := []string{certmagic.StorageKeys.SiteCert(iss, name), certmagic.StorageKeys.SitePrivateKey(iss, name), certmagic.StorageKeys.SiteMeta(iss, name)}
			storeSite(t, fs, iss, name, tc.cert, tc.key, tc.md)
			st := failingLoad{fs, tc.loadErr}
			// The first check only notes what it judged unusable.
			first, err := deleteUnusable(t.Context(), st, iss, name, [32]byte{})
			if first.deleted || (first.why != nil) != tc.want {
				t.Fatalf("first check: deleted %v, why %v (err %v); want nothing deleted, why set = %v", first.deleted, first.why, err, tc.want)
			}
			v, err := deleteUnusable(t.Context(), st, iss, name, first.digest)
			if v.deleted != tc.want {
				t.Fatalf("second check: deleted = %v (why %v, err %v), want %v", v.deleted, v.why, err, tc.want)
			}
			if (err != nil) != (tc.loadErr != nil) {
				t.Fatalf("err = %v, want one only when the store cannot be read", err)
			}
			for i, k := range keys {
				if want := !tc.want && ([][]byte{tc.cert, tc.key, tc.md})[i] != nil; fs.Exists(t.Context(), k) != want {
					t.Errorf("%s stored = %v, want %v", k, !want, want)
				}
			}
		})
	}
}

// TestDeleteUnusableOnlyWhatItSawTwice: items that changed between two
// checks are not deleted at the second, whether they now make a
// certificate (a renewal a lagging replica had shown half-written) or
// are unusable in another way; the same unusable items a check later are.
func TestDeleteUnusableOnlyWhatItSawTwice(t *testing.T) {
	const iss, name = "ca.example.test-directory", "app.example.test"
	good, _ := testutil.SelfSignedFor(t, name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	goodCert, goodKey := pemPair(t, good)
	st := &certmagic.FileStorage{Path: t.TempDir()}
	put := func(cert, key []byte) { t.Helper(); storeSite(t, st, iss, name, cert, key, siteMeta(name)) }
	check := func(seen [32]byte) verdict {
		t.Helper()
		v, err := deleteUnusable(t.Context(), st, iss, name, seen)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	put([]byte("garbage"), goodKey)
	v := check([32]byte{})
	put(goodCert, goodKey) // the renewal, whole now
	if v2 := check(v.digest); v2.deleted || v2.why != nil {
		t.Fatalf("a certificate that makes one now: deleted %v, why %v", v2.deleted, v2.why)
	}

	put([]byte("garbage"), goodKey)
	v = check([32]byte{})
	put([]byte("other garbage"), goodKey)
	v = check(v.digest)
	if v.deleted || v.why == nil {
		t.Fatalf("other unusable items than the check before: deleted %v, why %v; want kept, noted", v.deleted, v.why)
	}
	if v = check(v.digest); !v.deleted {
		t.Fatalf("the same unusable items a check later were kept (why %v)", v.why)
	}
	if st.Exists(t.Context(), certmagic.StorageKeys.SiteCert(iss, name)) {
		t.Fatal("deleted, but the certificate is still stored")
	}
}

// failingLoad is a storage whose reads fail with err, when set: the store
// unreachable.
type failingLoad struct {
	*certmagic.FileStorage
	err error
}

func (f failingLoad) Load(ctx context.Context, key string) ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.FileStorage.Load(ctx, key)
}

// TestACMEUnusableStoredOnDemandCertIsReplaced: a custom domain whose
// stored certificate does not decode (written around gatehouse) is not
// loaded at its handshakes, and certmagic orders no replacement while it
// is stored (its obtain finds the items there and does nothing): the
// domain got the bootstrap certificate for ever, with nothing said. As
// for a managed name, the manager says so, deletes it once judged so
// twice and orders a new one at the next handshake.
func TestACMEUnusableStoredOnDemandCertIsReplaced(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	name := own(t, "shop.customer.test")
	dir := t.TempDir()
	st := &certmagic.FileStorage{Path: dir}
	iss := (&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey()
	garbage := []byte("garbage")
	storeSite(t, st, iss, name, garbage, garbage, garbage)
	opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
	opts.CustomDomains = CustomDomainsAuto
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	m, logs := r.startLogged(t, opts, 100*time.Millisecond)
	addr := serveTLS(t, m.TLSConfig())
	// Handshakes keep coming, as clients do; each is bounded.
	var leaf *x509.Certificate
	testutil.WaitFor(t, tlsmgrtest.IssueTimeout, func() bool {
		l, _, err := handshake(addr, &tls.Config{ServerName: name, RootCAs: p.Roots})
		leaf = l
		return err == nil
	}, "the custom domain's unusable stored certificate was never replaced")
	if !slices.Contains(leaf.DNSNames, name) {
		t.Fatalf("served %v, want a certificate for %s", leaf.DNSNames, name)
	}
	if !strings.Contains(logs.String(), "is deleted and a new one ordered") || !strings.Contains(logs.String(), "name="+name) {
		t.Errorf("nothing said of the stored certificate that does not load:\n%s", logs.String())
	}
	b, err := st.Load(t.Context(), certmagic.StorageKeys.SiteCert(iss, name))
	if err != nil || bytes.Equal(b, garbage) {
		t.Fatalf("stored certificate after the order: %q, %v", b, err)
	}
}

// TestACMEExpiredRenewalKeepsTheHandshakeBound: while an order renews a
// custom domain's expired certificate, the other handshakes for the name
// wait for it at most their bound (HandshakeTimeout here) and then get
// the bootstrap certificate, as the handshake that placed the order does.
// They found the expired certificate cached and waited in certmagic
// (renewDynamicCertificate) for as long as the order ran, up to 2
// minutes and deaf to their context: past the listener's bound, each
// holding its goroutine, and answered by a closed connection.
func TestACMEExpiredRenewalKeepsTheHandshakeBound(t *testing.T) {
	t.Parallel()
	name := own(t, "lapsed.customer.test")
	r := newRig(t)
	r.slowHost, r.slowBy = name, time.Minute // Pebble gives up after 10 s
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	writeExpired(t, dir, p.Directory, name)
	opts := acmeOptions(p, r, dir, own(t, "api.example.test"))
	opts.CustomDomains = CustomDomainsAuto
	opts.DisableTLSALPNChallenge = true // HTTP-01 only: the slow one
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	opts.HandshakeTimeout = time.Second
	m, _ := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test")) // the ACME account exists: orders from here on are the name's
	addr := serveTLS(t, m.TLSConfig())

	type result struct {
		took time.Duration
		boot bool
		err  error
	}
	results := make(chan result, 3)
	for i := range 3 {
		go func() {
			began := time.Now()
			leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
			results <- result{time.Since(began), leaf != nil && leaf.Equal(m.boot.Load().Leaf), err}
		}()
		time.Sleep(time.Duration(i+1) * 300 * time.Millisecond) // the first places the order
	}
	for i := range 3 {
		res := <-results
		if res.err != nil || !res.boot || res.took > m.obtainWait+2*time.Second {
			t.Errorf("handshake %d: %v after %v (bootstrap certificate: %v), want the bootstrap certificate within %v",
				i+1, res.err, res.took, res.boot, m.obtainWait+2*time.Second)
		}
	}
}

// orderAfterHandshake is a store that lays out, around reads of key, the
// interleaving a burst of handshakes meets: the background order's first
// read waits until a second handshake (second) reads too, and that
// handshake's read waits until the order's renewal is at the CA (ordered
// reports it), so the handshake found no expired certificate cached when
// it looked, and finds the renewal under way afterwards.
type orderAfterHandshake struct {
	fileKV
	key     string
	ordered func() bool
	loads   atomic.Int32 // handshakes' reads of key
	second  chan struct{}
	order   atomic.Bool // the order's first read is done
}

func (s *orderAfterHandshake) Load(ctx context.Context, key string) ([]byte, error) {
	if key == s.key {
		switch ctx.Value(handshakeObtain{}).(type) {
		case handshakeEnd:
			if s.loads.Add(1) == 2 {
				close(s.second)
				for deadline := time.Now().Add(20 * time.Second); !s.ordered() && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
			}
		case context.CancelFunc:
			if s.order.CompareAndSwap(false, true) {
				select {
				case <-s.second:
				case <-time.After(20 * time.Second):
				}
			}
		}
	}
	return s.fileKV.Load(ctx, key)
}

// TestACMEExpiredRenewalBoundsAHandshakeThatLoadedIt: a handshake that
// found no expired certificate cached (the order renewing it not yet at
// it, as in a burst of handshakes for the name), and loaded it from the
// store itself, waits for that renewal no longer than its bound either.
// It was handed to certmagic, which made it wait for the renewal as long
// as it ran (renewDynamicCertificate), deaf to its bound.
func TestACMEExpiredRenewalBoundsAHandshakeThatLoadedIt(t *testing.T) {
	t.Parallel()
	name := own(t, "lapsed.customer.test")
	r := newRig(t)
	r.slowHost, r.slowBy = name, time.Minute // Pebble gives up after 10 s
	hp, tp := r.ports()
	p := tlsmgrtest.Start(t, hp, tp)
	dir := t.TempDir()
	writeExpired(t, dir, p.Directory, name)
	opts := acmeOptions(p, r, "", own(t, "api.example.test"))
	var before atomic.Int64
	before.Store(1 << 30)
	st := &orderAfterHandshake{
		fileKV:  fileKV{&certmagic.FileStorage{Path: dir}},
		key:     certmagic.StorageKeys.SitePrivateKey((&certmagic.ACMEIssuer{CA: p.Directory}).IssuerKey(), name),
		ordered: func() bool { return int64(p.Orders()) > before.Load() },
		second:  make(chan struct{}),
	}
	opts.Storage = st
	opts.CustomDomains = CustomDomainsAuto
	opts.DisableTLSALPNChallenge = true // HTTP-01 only: the slow one
	opts.Allow = func(_ context.Context, n string) error {
		if n == name {
			return nil
		}
		return errors.New("not a verified mapping")
	}
	opts.HandshakeTimeout = time.Second
	m, _ := r.startLogged(t, opts, 0)
	r.issued(t, p, m, own(t, "api.example.test")) // the ACME account exists: orders from here on are the name's
	before.Store(int64(p.Orders()))
	addr := serveTLS(t, m.TLSConfig())
	bound := m.obtainWait + 2*time.Second

	for i := range 2 { // the first places the order, which waits for the second
		began := time.Now()
		leaf, _, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		took := time.Since(began)
		if err != nil || !leaf.Equal(m.boot.Load().Leaf) || took > bound {
			t.Errorf("handshake %d: %v after %v, want the bootstrap certificate within %v", i+1, err, took, bound)
		}
	}
}
