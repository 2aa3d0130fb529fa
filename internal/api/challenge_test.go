package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
)

// platformVerifier is what gatehouse serve gives the API: a verifier of
// issuer idp's key, on a fixed clock.
func platformVerifier(t *testing.T, now time.Time) (verify func(*http.Request) error, session func(*http.Request) (string, error), pub ed25519.PublicKey, priv ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Options{Issuers: []auth.Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	verify = func(r *http.Request) error {
		tok, err := auth.BearerToken(r)
		if err != nil {
			return err
		}
		_, err = v.VerifyPlatform(tok)
		return err
	}
	session = func(r *http.Request) (string, error) {
		tok, err := auth.BearerToken(r)
		if err != nil {
			return "", err
		}
		c, err := v.VerifyAny(tok)
		if err != nil {
			return "", err
		}
		return c.Subject, nil
	}
	return verify, session, pub, priv
}

// TestUnauthorizedSaysWhy: a 401 says what was wrong with the credential,
// in the RFC 6750 challenge (error and error_description) and in the
// problem's detail alike: an expired platform token and one not valid yet
// are named as such, so the platform fetches a new one (or fixes its
// clock) rather than doubting its key, while a forged one, one from an
// and one from an unknown issuer are one answer that names no issuer or
// key; a request with no token gets the bare challenge
// (RFC 6750 §3.1). Control and resolve routes alike.
func TestUnauthorizedSaysWhy(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	verify, session, pub, priv := platformVerifier(t, now)
	_, _, _, otherPriv := platformVerifier(t, now)
	e := newEnv(t, func(o *Options) {
		o.VerifyPlatform = verify
		o.VerifySession = session
		o.ResolveZones = nil
	})
	mint := func(k ed25519.PrivateKey, hdr map[string]any, mod func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": "idp", "sub": "platform-svc", "scope": "platform", "exp": now.Add(time.Hour).Unix()}
		if mod != nil {
			mod(c)
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		for k, v := range hdr {
			tok.Header[k] = v
		}
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const forged = "signature does not verify"
	for _, c := range []struct {
		name string
		auth []string // Authorization fields
		code string   // error in the challenge; "" none
		says string   // in error_description and the detail
	}{
		{"no token", nil, "", ""},
		{"basic", []string{"Basic cGxhdGZvcm06eA=="}, "", "no Bearer token"},
		{"expired", []string{"Bearer " + mint(priv, nil, func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })}, "invalid_token", "expired"},
		{"nbf ahead", []string{"Bearer " + mint(priv, nil, func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })}, "invalid_token", "not valid yet"},
		{"iat ahead", []string{"Bearer " + mint(priv, nil, func(c jwt.MapClaims) { c["iat"] = now.Add(time.Hour).Unix() })}, "invalid_token", "not valid yet"},
		{"forged", []string{"Bearer " + mint(otherPriv, nil, nil)}, "invalid_token", forged},
		{"forged and expired", []string{"Bearer " + mint(otherPriv, nil, func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })}, "invalid_token", forged},
		{"unknown issuer", []string{"Bearer " + mint(priv, nil, func(c jwt.MapClaims) { c["iss"] = "evil-idp" })}, "invalid_token", forged},
		{"not a jwt", []string{"Bearer " + token + "x"}, "invalid_token", "neither the control token nor"},
		{"no exp", []string{"Bearer " + mint(priv, nil, func(c jwt.MapClaims) { delete(c, "exp") })}, "invalid_token", "no exp"},
		{"logout token", []string{"Bearer " + mint(priv, map[string]any{"typ": "logout+jwt"}, nil)}, "invalid_token", "typ"},
		{"two headers", []string{"Bearer " + token, "Bearer " + token}, "invalid_request", "one Authorization header"},
	} {
		for _, path := range []string{"/api/v3/apps", "/api/v3/dns/resolve?name=a.example.com"} {
			if c.name == "no exp" && path != "/api/v3/apps" {
				continue
			}
			var hdr []string
			for _, a := range c.auth {
				hdr = append(hdr, "Authorization", a)
			}
			r := e.do("GET", path, "", nil, hdr...)
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s, %s: %d, want 401: %s", c.name, path, r.status, r.body)
				continue
			}
			ch := r.header.Get("WWW-Authenticate")
			detail := problemOf(t, r).Detail
			if c.code == "" {
				if strings.Contains(ch, "error") {
					t.Errorf("%s, %s: challenge %q, want no error (RFC 6750 §3.1)", c.name, path, ch)
				}
			} else if !strings.HasPrefix(ch, `Bearer realm="gatehouse", error="`+c.code+`", error_description="`) {
				t.Errorf("%s, %s: challenge %q, want error=%q with a description", c.name, path, ch, c.code)
			} else if !strings.Contains(ch, c.says) {
				t.Errorf("%s, %s: challenge %q does not say %q", c.name, path, ch, c.says)
			}
			if !strings.Contains(detail, c.says) {
				t.Errorf("%s, %s: detail %q does not say %q", c.name, path, detail, c.says)
			}
			for _, secret := range []string{"evil-idp", token, "idp\"", string(pub)} {
				if strings.Contains(ch, secret) || strings.Contains(detail, secret) {
					t.Errorf("%s, %s: %q or %q names %q", c.name, path, ch, detail, secret)
				}
			}
		}
	}
	// a valid token without scope platform: good for resolving, not
	// for control, and told so with the scope it lacks
	user := mint(priv, nil, func(c jwt.MapClaims) { c["scope"] = "read" })
	r := e.do("GET", "/api/v3/apps", user, nil)
	ch := r.header.Get("WWW-Authenticate")
	if r.status != 401 || !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="platform"`) ||
		!strings.Contains(problemOf(t, r).Detail, "scope") {
		t.Errorf("token without scope platform: %d, challenge %q, %s; want 401, insufficient_scope, scope=\"platform\"", r.status, ch, r.body)
	}
	for _, tok := range []string{token, mint(priv, nil, nil)} {
		if r := e.do("GET", "/api/v3/apps", tok, nil); r.status != 200 {
			t.Errorf("a good credential: %d %s", r.status, r.body)
		}
	}
}
