// Package tlsmgrtest runs a real Pebble ACME CA (Debian's pebble package)
// for tests, on loopback only: its VA resolves every name through an
// in-test DNS server answering 127.0.0.1, and connects to the challenge
// ports the test names. Imported by tests only.
package tlsmgrtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/libdns/libdns"
	"github.com/miekg/dns"
	"golang.org/x/crypto/ocsp"
)

// Pebble is a running Pebble.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// CARoot is a PEM file with the root that signs Pebble's own HTTPS
	// certificate: tlsmgr's Options.CARoot.
	CARoot string
	// Roots trusts the certificates Pebble issues (its issuance root).
	Roots *x509.CertPool
	// DNS is the DNS server Pebble validates against: A 127.0.0.1 for any
	// name, SOA at the zones added to it, and the TXT records its libdns
	// methods write (a DNS-01 provider for tlsmgr); PointAway sends a name
	// elsewhere. nil with StartWithDNS.
	DNS *Zones
	// DNSAddr is that server's address, for tlsmgr's DNSResolvers.
	DNSAddr string

	mgmt      string         // Pebble's management API, https://host:port
	mgmtRoots *x509.CertPool // trusts its HTTPS certificate

	mu  sync.Mutex
	log bytes.Buffer
}

// Orders counts the new-order requests Pebble received so far.
func (p *Pebble) Orders() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Count(p.log.String(), "POST /order-plz")
}

// IssueTimeout is how long a test should wait for a certificate. When
// an order fails (a challenge raced a listener that was still starting,
// on a loaded machine), certmagic retries it after 1 minute
// (certmagic's retryIntervals), so a test must outlast one retry.
const IssueTimeout = 150 * time.Second

// Log returns Pebble's output so far.
func (p *Pebble) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *Pebble) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

// Start runs Pebble whose VA validates HTTP-01 on httpPort and TLS-ALPN-01
// on tlsPort of 127.0.0.1. Without /usr/bin/pebble the test is skipped,
// unless CI is set, where it fails.
func Start(t testing.TB, httpPort, tlsPort int) *Pebble {
	t.Helper()
	zones := &Zones{txt: map[string][]string{}, apex: map[string]bool{}, away: map[string]bool{}}
	return start(t, httpPort, tlsPort, zones, "", "")
}

// StartWithOCSP is Start with the certificates Pebble issues naming an
// OCSP responder of the test's (Pebble has none), on loopback, that
// answers "good" for any of them, signed by Pebble's intermediate: so
// certmagic fetches a staple for each certificate it loads, and writes it
// to the store.
func StartWithOCSP(t testing.TB, httpPort, tlsPort int) *Pebble {
	t.Helper()
	var pb atomic.Pointer[Pebble]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := pb.Load()
		if p == nil {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		p.answerOCSP(w, r)
	}))
	t.Cleanup(srv.Close)
	zones := &Zones{txt: map[string][]string{}, apex: map[string]bool{}, away: map[string]bool{}}
	p := start(t, httpPort, tlsPort, zones, "", srv.URL)
	pb.Store(p)
	return p
}

// answerOCSP answers an OCSP request (RFC 6960, by POST or GET) "good",
// signed by Pebble's intermediate, valid for an hour.
func (p *Pebble) answerOCSP(w http.ResponseWriter, r *http.Request) {
	var raw []byte
	var err error
	if r.Method == http.MethodPost {
		raw, err = io.ReadAll(r.Body)
	} else {
		raw, err = base64.StdEncoding.DecodeString(strings.TrimPrefix(r.URL.Path, "/"))
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := ocsp.ParseRequest(raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	issuer, key, err := p.intermediate()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	now := time.Now()
	resp, err := ocsp.CreateResponse(issuer, issuer, ocsp.Response{Status: ocsp.Good, SerialNumber: req.SerialNumber,
		ThisUpdate: now.Add(-time.Minute), NextUpdate: now.Add(time.Hour)}, key)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/ocsp-response")
	_, _ = w.Write(resp)
}

// intermediate returns the certificate and key of Pebble's intermediate,
// which signs what it issues, from its management API.
func (p *Pebble) intermediate() (*x509.Certificate, crypto.Signer, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.mgmtRoots}}}
	defer hc.CloseIdleConnections()
	certPEM, keyPEM := get(hc, p.mgmt+"/intermediates/0"), get(hc, p.mgmt+"/intermediate-keys/0")
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("pebble's intermediate: %q %q", certPEM, keyPEM)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if k, err := x509.ParsePKCS1PrivateKey(kb.Bytes); err == nil {
		return cert, k, nil
	}
	if k, err := x509.ParseECPrivateKey(kb.Bytes); err == nil {
		return cert, k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("pebble's intermediate key: %T", k)
	}
	return cert, s, nil
}

// StartWithDNS is Start with Pebble's VA resolving every name through the
// DNS server at dnsAddr (a loopback host:port, UDP) instead of the
// in-test one: the gateway's own DNS server, which must answer there by
// the time Pebble validates.
func StartWithDNS(t testing.TB, httpPort, tlsPort int, dnsAddr string) *Pebble {
	t.Helper()
	return start(t, httpPort, tlsPort, nil, dnsAddr, "")
}

func start(t testing.TB, httpPort, tlsPort int, zones *Zones, dnsAddr, ocspURL string) *Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("pebble not installed (apt-get install pebble)")
		}
		t.Fatal("pebble not installed: CI must install the Debian pebble package")
	}
	dir := t.TempDir()
	caPEM, certFile, keyFile := serverCert(t, dir)
	if zones != nil {
		dnsAddr = startDNS(t, zones)
	}
	// Pebble's own ports are picked free and then bound by Pebble: another
	// test's socket can take one in between ("address already in use"),
	// so a start that fails that way is tried again on new ports.
	for attempt := 1; ; attempt++ {
		p, err := launch(t, bin, dir, caPEM, certFile, keyFile, zones, dnsAddr, ocspURL, httpPort, tlsPort)
		if err == nil {
			return p
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("pebble did not start: %v", err)
		}
	}
}

// launch starts one Pebble and waits until it serves its directory.
func launch(t testing.TB, bin, dir string, caPEM []byte, certFile, keyFile string, zones *Zones, dnsAddr, ocspURL string, httpPort, tlsPort int) (*Pebble, error) {
	t.Helper()
	acme, mgmt := testutil.FreePort(t), testutil.FreePort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", acme),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate":             certFile,
		"privateKey":              keyFile,
		"httpPort":                httpPort,
		"tlsPort":                 tlsPort,
		"ocspResponderURL":        ocspURL,
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Pebble{Directory: fmt.Sprintf("https://127.0.0.1:%d/dir", acme), CARoot: filepath.Join(dir, "ca.pem"), DNS: zones, DNSAddr: dnsAddr}
	if err := os.WriteFile(p.CARoot, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", dnsAddr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("pebble's log:\n%s", p.Log())
		}
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	var root []byte
	up := testutil.Eventually(20*time.Second, func() bool {
		select {
		case <-exited:
			return true // no use waiting
		default:
		}
		root = get(hc, fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmt))
		return root != nil && get(hc, p.Directory) != nil
	})
	select {
	case <-exited:
		up = false
	default:
	}
	if !up {
		_ = cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("%s", p.Log())
	}
	p.mgmt, p.mgmtRoots = fmt.Sprintf("https://127.0.0.1:%d", mgmt), pool
	p.Roots = x509.NewCertPool()
	if !p.Roots.AppendCertsFromPEM(root) {
		t.Fatalf("pebble root: %q", root)
	}
	return p, nil
}

func get(hc *http.Client, url string) []byte {
	resp, err := hc.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return nil
	}
	return b
}

// serverCert writes a CA and a leaf for 127.0.0.1/localhost, for Pebble's
// own HTTPS listeners.
func serverCert(t testing.TB, dir string) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	ca.Subject.CommonName = "pebble test ca"
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
}

// startDNS answers A 127.0.0.1 for every name, and SOA and TXT from z, so
// Pebble's validation never leaves loopback.
func startDNS(t testing.TB, z *Zones) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		for _, q := range r.Question {
			m.Answer = append(m.Answer, z.answer(q)...)
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return pc.LocalAddr().String()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int { return testutil.FreePort(t) }

// Zones is the test DNS server's data, written through libdns methods.
type Zones struct {
	mu   sync.Mutex
	apex map[string]bool     // fqdn, lower case
	txt  map[string][]string // fqdn -> values
	away map[string]bool     // fqdn answered 127.0.0.2, where no gateway listens
}

// PointAway makes name resolve to 127.0.0.2 (away true), where nothing
// listens, so Pebble's HTTP-01 and TLS-ALPN-01 validation of it fails at
// once, as for a custom domain whose DNS names another server; away
// false points it back at the gateways (127.0.0.1).
func (z *Zones) PointAway(name string, away bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.away[dns.Fqdn(strings.ToLower(name))] = away
}

// AddZone makes the server answer SOA at name.
func (z *Zones) AddZone(name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.apex[dns.Fqdn(strings.ToLower(name))] = true
}

// TXT returns the TXT values at name.
func (z *Zones) TXT(name string) []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]string(nil), z.txt[dns.Fqdn(strings.ToLower(name))]...)
}

// AppendRecords adds TXT records (libdns.RecordAppender).
func (z *Zones) AppendRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, r := range recs {
		rr := r.RR()
		if rr.Type != "TXT" {
			return nil, fmt.Errorf("test dns: only TXT, got %s", rr.Type)
		}
		name := dns.Fqdn(strings.ToLower(libdns.AbsoluteName(rr.Name, zone)))
		z.txt[name] = append(z.txt[name], rr.Data)
	}
	return recs, nil
}

// DeleteRecords removes TXT records (libdns.RecordDeleter).
func (z *Zones) DeleteRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, r := range recs {
		rr := r.RR()
		name := dns.Fqdn(strings.ToLower(libdns.AbsoluteName(rr.Name, zone)))
		vals := z.txt[name][:0]
		for _, v := range z.txt[name] {
			if v != rr.Data {
				vals = append(vals, v)
			}
		}
		z.txt[name] = vals
	}
	return recs, nil
}

func (z *Zones) answer(q dns.Question) []dns.RR {
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 1}
	name := strings.ToLower(q.Name)
	z.mu.Lock()
	defer z.mu.Unlock()
	switch q.Qtype {
	case dns.TypeA:
		if z.away[name] {
			return []dns.RR{&dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 2)}}
		}
		return []dns.RR{&dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1)}}
	case dns.TypeSOA:
		if z.apex[name] {
			return []dns.RR{&dns.SOA{Hdr: hdr, Ns: "ns." + name, Mbox: "hostmaster." + name, Serial: 1, Refresh: 60, Retry: 60, Expire: 600, Minttl: 1}}
		}
	case dns.TypeTXT:
		var out []dns.RR
		for _, v := range z.txt[name] {
			out = append(out, &dns.TXT{Hdr: hdr, Txt: []string{v}})
		}
		return out
	}
	return nil
}
