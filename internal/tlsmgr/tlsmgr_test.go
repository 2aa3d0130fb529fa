package tlsmgr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveTLS runs a TLS listener with cfg that completes handshakes and
// closes; it returns its address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = tls.Server(c, cfg).Handshake()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// handshake dials addr and returns the server's leaf certificate.
func handshake(addr string, cfg *tls.Config) (*x509.Certificate, tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, tls.ConnectionState{}, err
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.PeerCertificates[0], st, nil
}

func TestBootstrap(t *testing.T) {
	names := []string{"api.example.test", "a.example.test"}
	m, err := New(Options{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, m.TLSConfig())
	boot := m.boot.Load().Leaf
	pool := x509.NewCertPool()
	pool.AddCert(boot)
	for _, n := range names {
		leaf, st, err := handshake(addr, &tls.Config{ServerName: n, RootCAs: pool})
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if !leaf.Equal(boot) {
			t.Fatalf("%s: not the bootstrap certificate", n)
		}
		if life := time.Until(leaf.NotAfter); life > 24*time.Hour || life < 23*time.Hour {
			t.Fatalf("bootstrap lifetime %v, want 24h", life)
		}
		if st.CurveID != tls.X25519MLKEM768 {
			t.Fatalf("curve %v, want X25519MLKEM768 preferred", st.CurveID)
		}
	}
	// No SNI and an unknown name get the default (bootstrap) certificate.
	for _, n := range []string{"", "other.test"} {
		leaf, _, err := handshake(addr, &tls.Config{ServerName: n, InsecureSkipVerify: true})
		if err != nil || !leaf.Equal(boot) {
			t.Fatalf("%q: %v", n, err)
		}
	}
}

func TestTLSPosture(t *testing.T) {
	cases := []struct {
		name      string
		pqOnly    bool
		client    *tls.Config
		wantErr   bool
		wantCurve tls.CurveID
	}{
		{"default client gets hybrid", false, &tls.Config{}, false, tls.X25519MLKEM768},
		{"classical client allowed", false, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}, false, tls.X25519},
		{"tls 1.2 allowed", false, &tls.Config{MaxVersion: tls.VersionTLS12}, false, tls.X25519},
		{"tls 1.1 refused", false, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, true, 0},
		// TLS 1.2 suites are Mozilla's intermediate ones: AEADs with
		// forward secrecy. The CBC-SHA1 ones Go would otherwise accept
		// are refused, as Caddy refuses them.
		{"tls 1.2 aes-gcm", false, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}, false, tls.X25519},
		{"tls 1.2 chacha20", false, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}}, false, tls.X25519},
		{"tls 1.2 cbc-sha refused", false, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
			tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
		}}, true, 0},
		{"pq_only: hybrid client", true, &tls.Config{}, false, tls.X25519MLKEM768},
		{"pq_only: x25519 client refused", true, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}, true, 0},
		{"pq_only: p256 client refused", true, &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}}, true, 0},
		{"pq_only: tls 1.2 client refused", true, &tls.Config{MaxVersion: tls.VersionTLS12}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Options{Names: []string{"a.example.test"}, PQOnly: tc.pqOnly})
			if err != nil {
				t.Fatal(err)
			}
			addr := serveTLS(t, m.TLSConfig())
			tc.client.ServerName = "a.example.test"
			tc.client.InsecureSkipVerify = true
			tc.client.NextProtos = []string{"h2", "http/1.1"}
			_, st, err := handshake(addr, tc.client)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("handshake succeeded with curve %v", st.CurveID)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.CurveID != tc.wantCurve || st.NegotiatedProtocol != "h2" {
				t.Fatalf("curve %v alpn %q", st.CurveID, st.NegotiatedProtocol)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"custom domains", Options{CustomDomains: "yes"}, "custom_domains"},
		{"acme without storage", Options{Directory: "https://ca/dir"}, "Storage"},
		{"missing ca root", Options{CARoot: "/nonexistent.pem"}, "ca_root"},
		{"port", Options{HTTPPort: 70000}, "ports"},
		{"empty name", Options{Names: []string{""}}, "empty name"},
	}
	for _, tc := range cases {
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "tlsmgr: ") {
			t.Errorf("%s: err = %v, want mention of %q", tc.name, err, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	allow := func(_ context.Context, name string) error {
		if name == "ok.example" {
			return nil
		}
		return errors.New("mapping not verified")
	}
	cases := []struct {
		custom string
		allow  func(context.Context, string) error
		name   string
		ok     bool
	}{
		{"auto", allow, "ok.example", true},
		{"auto", allow, "bad.example", false},
		{"auto", allow, "api.example.test", false}, // managed: never on demand
		{"auto", nil, "ok.example", false},
		{"off", allow, "ok.example", false},
		{"", allow, "ok.example", false},
	}
	for _, tc := range cases {
		m, err := New(Options{Names: []string{"api.example.test"}, CustomDomains: tc.custom, Allow: tc.allow})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.decide(context.Background(), tc.name); (err == nil) != tc.ok {
			t.Errorf("custom=%q name=%s: err = %v", tc.custom, tc.name, err)
		}
	}
}

// TestHTTPHandlerPassesThrough: with no ACME, every request reaches next.
func TestHTTPHandlerPassesThrough(t *testing.T) {
	m, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	hit := false
	h := m.HTTPHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit = true }))
	req, _ := http.NewRequest("GET", "http://a.example/.well-known/acme-challenge/x", nil)
	h.ServeHTTP(discard{}, req)
	if !hit {
		t.Fatal("request did not reach next")
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// TestUnmanage: an unmanaged name leaves the managed set, in any case,
// whether it was given at New or to Manage, and Manage takes it back.
func TestUnmanage(t *testing.T) {
	m, err := New(Options{Names: []string{"*.a.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Manage("*.b.example"); err != nil {
		t.Fatal(err)
	}
	m.Unmanage("*.A.example", "*.b.example", "*.never.example")
	for _, n := range []string{"*.a.example", "*.b.example", "*.never.example"} {
		if m.Managed(n) {
			t.Errorf("%s still managed", n)
		}
	}
	if err := m.Manage("*.a.example"); err != nil || !m.Managed("*.a.example") {
		t.Fatalf("managed again: %v, %v", m.Managed("*.a.example"), err)
	}
}
