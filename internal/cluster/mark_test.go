package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"
)

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestClientMark(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, otherPriv := newKey(t)
	now := time.Unix(1_764_439_200, 0)
	good := SignClient(priv, "eu", "203.0.113.7", now, "hello.apps.example.com")
	if !strings.HasPrefix(good, "ip=203.0.113.7; ts=1764439200; sig=") {
		t.Fatalf("mark = %q", good)
	}
	v6 := SignClient(priv, "eu", "2001:db8::1", now, "hello.apps.example.com")
	tests := []struct {
		name   string
		pub    ed25519.PublicKey
		from   string
		value  string
		host   string
		now    time.Time
		wantIP string
		err    error
	}{
		{"good", pub, "eu", good, "hello.apps.example.com", now, "203.0.113.7", nil},
		{"ipv6", pub, "eu", v6, "hello.apps.example.com", now, "2001:db8::1", nil},
		{"29s late", pub, "eu", good, "hello.apps.example.com", now.Add(29 * time.Second), "203.0.113.7", nil},
		{"30s early", pub, "eu", good, "hello.apps.example.com", now.Add(-30 * time.Second), "203.0.113.7", nil},
		{"expired", pub, "eu", good, "hello.apps.example.com", now.Add(31 * time.Second), "", ErrExpired},
		{"from the future", pub, "eu", good, "hello.apps.example.com", now.Add(-31 * time.Second), "", ErrExpired},
		{"other cluster's key", otherPub, "eu", good, "hello.apps.example.com", now, "", ErrSignature},
		{"claims another cluster", pub, "us", good, "hello.apps.example.com", now, "", ErrSignature},
		{"other host", pub, "eu", good, "shop.apps.example.com", now, "", ErrSignature},
		{"signed by a stranger", pub, "eu", SignClient(otherPriv, "eu", "203.0.113.7", now, "hello.apps.example.com"), "hello.apps.example.com", now, "", ErrSignature},
		{"ip swapped", pub, "eu", strings.Replace(good, "203.0.113.7", "203.0.113.8", 1), "hello.apps.example.com", now, "", ErrSignature},
		{"ts swapped", pub, "eu", strings.Replace(good, "1764439200", "1764439201", 1), "hello.apps.example.com", now, "", ErrSignature},
		{"no key", nil, "eu", good, "hello.apps.example.com", now, "", ErrSignature},
		{"empty", pub, "eu", "", "hello.apps.example.com", now, "", ErrMalformed},
		{"no sig", pub, "eu", "ip=203.0.113.7; ts=1764439200", "h", now, "", ErrMalformed},
		{"bad ip", pub, "eu", "ip=1.2.3; ts=1764439200; sig=x", "h", now, "", ErrMalformed},
		{"uncanonical ip", pub, "eu", strings.Replace(v6, "2001:db8::1", "2001:DB8::1", 1), "h", now, "", ErrMalformed},
		{"bad sig", pub, "eu", "ip=1.2.3.4; ts=1764439200; sig=!!", "h", now, "", ErrMalformed},
		{"extra key", pub, "eu", good + "; x=1", "hello.apps.example.com", now, "", ErrMalformed},
		{"negative ts", pub, "eu", "ip=1.2.3.4; ts=-5; sig=x", "h", now, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip, err := VerifyClient(tt.pub, tt.from, tt.value, tt.host, tt.now)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				if ip.IsValid() {
					t.Fatalf("ip %v returned with an error", ip)
				}
				return
			}
			if err != nil || ip.String() != tt.wantIP {
				t.Fatalf("VerifyClient = %v, %v; want %s", ip, err, tt.wantIP)
			}
		})
	}
}

func FuzzParseClient(f *testing.F) {
	_, priv := newKey(f)
	f.Add(SignClient(priv, "eu", "203.0.113.7", time.Unix(1_764_439_200, 0), "h"))
	f.Add(SignClient(priv, "eu", "2001:db8::1", time.Unix(0, 0), "h"))
	f.Add("ip=; ts=; sig=")
	f.Add(";;;")
	f.Fuzz(func(t *testing.T, v string) {
		m, err := ParseClient(v)
		if err != nil {
			return
		}
		if !m.IP.IsValid() || len(m.Sig) != ed25519.SignatureSize || m.TS < 0 {
			t.Fatalf("ParseClient(%q) accepted %+v", v, m)
		}
	})
}

// TestNoHostSignature: an owner's no-host answer verifies only with the
// owner's key, for the owner named, and for the very forward it answers.
func TestNoHostSignature(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	mark := SignClient(key, "ap", "203.0.113.9", time.Unix(1_700_000_000, 0), "app.example.test")
	v := SignNoHost(key, "us", mark)
	if !VerifyNoHost(pub, "us", mark, v) {
		t.Fatal("a good answer did not verify")
	}
	otherMark := SignClient(key, "ap", "203.0.113.9", time.Unix(1_700_000_001, 0), "app.example.test")
	for name, ok := range map[string]bool{
		"another key":     VerifyNoHost(other, "us", mark, v),
		"another owner":   VerifyNoHost(pub, "eu", mark, v),
		"another forward": VerifyNoHost(pub, "us", otherMark, v),
		"no mark":         VerifyNoHost(pub, "us", "", SignNoHost(key, "us", "")),
		"not base64":      VerifyNoHost(pub, "us", mark, "!!"),
		"short":           VerifyNoHost(pub, "us", mark, v[:20]),
		"zero signature":  VerifyNoHost(pub, "us", mark, strings.Repeat("A", 86)+"=="),
		"no key":          VerifyNoHost(nil, "us", mark, v),
	} {
		if ok {
			t.Errorf("%s: verified", name)
		}
	}
}
