package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func key(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func sign(t *testing.T, priv ed25519.PrivateKey, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signHeader signs c with extra JOSE header members.
func signHeader(t *testing.T, priv ed25519.PrivateKey, hdr map[string]any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	for k, v := range hdr {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// respell returns tok with the last character of its signature changed in
// a bit that base64url decoding may ignore (an Ed25519 signature's 64
// bytes use 2 of the last character's 6 bits).
func respell(tok string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, tok[len(tok)-1])
	return tok[:len(tok)-1] + string(alphabet[i^1])
}

func claims(mod func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"iss": "idp", "sub": "alice", "aud": []string{"shop"}, "exp": now.Add(time.Hour).Unix(), "scope": "read write"}
	if mod != nil {
		mod(c)
	}
	return c
}

func TestVerify(t *testing.T) {
	pub, priv := key(t)
	_, other := key(t)
	v, err := New(Options{Issuers: []Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rs, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(nil)).SignedString(rsaKey)
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil)).SignedString([]byte(pub))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	good := sign(t, priv, "", claims(nil))
	cases := []struct {
		name   string
		tok    string
		app    string
		status int // 0: valid
	}{
		{"valid", good, "shop", 0},
		{"aud star", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["aud"] = "*" })), "any", 0},
		{"aud string", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["aud"] = "shop" })), "shop", 0},
		{"other app", good, "blog", 403},
		{"no aud", sign(t, priv, "", claims(func(c jwt.MapClaims) { delete(c, "aud") })), "shop", 403},
		{"malformed", "not.a.jwt", "shop", 401},
		{"garbage", "abc", "shop", 401},
		{"expired", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Second).Unix() })), "shop", 401},
		{"no exp", sign(t, priv, "", claims(func(c jwt.MapClaims) { delete(c, "exp") })), "shop", 401},
		{"not yet valid", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Minute).Unix() })), "shop", 401},
		{"nbf past", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(-time.Minute).Unix() })), "shop", 0},
		{"wrong key", sign(t, other, "", claims(nil)), "shop", 401},
		{"tampered", good[:len(good)-4] + "AAAA", "shop", 401},
		{"unknown issuer", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["iss"] = "evil" })), "shop", 401},
		{"alg none", none, "shop", 401},
		{"alg HS256 with the public key", hs, "shop", 401},
		{"alg RS256", rs, "shop", 401},
		{"negative limits", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["limits"] = map[string]int{"rps": -1} })), "shop", 401},
		{"limits without sub", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["limits"] = map[string]int{"rps": 1}; delete(c, "sub") })), "shop", 401},
		// sub and scope go to the host as X-Gatehouse-Subject/-Scopes:
		// bytes no header value may hold are refused, not sent raw by one
		// proxy path and refused with 502 by the other.
		{"sub with a NUL", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["sub"] = "al\x00ice" })), "shop", 401},
		{"sub with a line break", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["sub"] = "alice\r\nX-Admin: 1" })), "shop", 401},
		{"scope with a DEL", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["scope"] = "read wr\x7fite" })), "shop", 401},
		// A value the header would change names another user or other
		// scopes: " alice " arrives as alice, ["a b"] as the scopes a and b.
		{"sub with spaces around", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["sub"] = " alice " })), "shop", 401},
		{"scope with a space", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["scope"] = []string{"a b", "c"} })), "shop", 401},
		{"empty scope", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["scope"] = []string{"a", ""} })), "shop", 401},
		{"scope with a quote", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["scope"] = []string{`a"b`} })), "shop", 401},
		{"scope with a comma", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["scope"] = []string{"c,d"} })), "shop", 0},
		// RFC 7515 §4.1.11: crit names extensions the verifier must know.
		{"crit", signHeader(t, priv, map[string]any{"crit": []string{"exp2"}, "exp2": 1}, claims(nil)), "shop", 401},
		// Claim names are case-sensitive (RFC 7519 §4): a claim spelled in
		// another case is a private claim, never the registered one.
		{"AUD is not aud", sign(t, priv, "", claims(func(c jwt.MapClaims) { delete(c, "aud"); c["AUD"] = "*" })), "shop", 403},
		{"EXP is not exp", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["EXP"] = c["exp"]; delete(c, "exp") })), "shop", 401},
		{"Iss is not iss", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["Iss"] = c["iss"]; delete(c, "iss") })), "shop", 401},
		{"Limits is not limits", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["Limits"] = map[string]int{"rps": -1} })), "shop", 0},
		{"exp in a string", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["exp"] = fmt.Sprint(now.Add(time.Hour).Unix()) })), "shop", 401},
		{"nbf in a string", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = fmt.Sprint(now.Unix()) })), "shop", 401},
		// A date past what a time holds wrapped to the far past (or, on
		// another CPU, saturated): a token not valid until an unthinkable
		// year was valid now. Any such date is malformed, however meant.
		{"nbf past any date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = 1e19 })), "shop", 401},
		{"nbf far past any date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = 1e300 })), "shop", 401},
		{"nbf before any date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = -1e19 })), "shop", 401},
		{"exp past any date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["exp"] = 1e19 })), "shop", 401},
		{"iat past any date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["iat"] = 1e19 })), "shop", 401},
		// "Never expires" spelled as a huge but holdable date still is one.
		{"exp far but a date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["exp"] = int64(1 << 53) })), "shop", 0},
		{"nbf far in the past but a date", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = -int64(1 << 53) })), "shop", 0},
		{"sub not a string", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["sub"] = 7 })), "shop", 401},
		// The signature's last base64url character holds 4 spare bits:
		// set one and lenient decoding reads the same signature.
		{"signature spelled another way", respell(good), "shop", 401},
		// iat is when the issuer made the token: one from the future
		// (past the leeway, none here) comes from a clock that runs ahead.
		{"iat now", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["iat"] = now.Unix() })), "shop", 0},
		{"iat past", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["iat"] = now.Add(-time.Hour).Unix() })), "shop", 0},
		{"iat in the future", sign(t, priv, "", claims(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Minute).Unix() })), "shop", 401},
		// RFC 8725 §3.11: a typ naming another kind of token is refused;
		// the types an access token carries pass, in any case.
		{"typ JWT", signHeader(t, priv, map[string]any{"typ": "JWT"}, claims(nil)), "shop", 0},
		{"typ at+jwt", signHeader(t, priv, map[string]any{"typ": "at+jwt"}, claims(nil)), "shop", 0},
		{"typ application/AT+JWT", signHeader(t, priv, map[string]any{"typ": "application/AT+JWT"}, claims(nil)), "shop", 0},
		{"typ jwt", signHeader(t, priv, map[string]any{"typ": "jwt"}, claims(nil)), "shop", 0},
		{"typ vendor -at+jwt", signHeader(t, priv, map[string]any{"typ": "application/okta-internal-at+jwt"}, claims(nil)), "shop", 0},
		{"typ dpop+jwt", signHeader(t, priv, map[string]any{"typ": "dpop+jwt"}, claims(nil)), "shop", 401},
		{"typ JOSE", signHeader(t, priv, map[string]any{"typ": "JOSE"}, claims(nil)), "shop", 0},
		{"typ logout+jwt", signHeader(t, priv, map[string]any{"typ": "logout+jwt"}, claims(nil)), "shop", 401},
		{"typ secevent+jwt", signHeader(t, priv, map[string]any{"typ": "secevent+jwt"}, claims(nil)), "shop", 401},
		{"typ empty", signHeader(t, priv, map[string]any{"typ": ""}, claims(nil)), "shop", 401},
		{"typ not a string", signHeader(t, priv, map[string]any{"typ": 1}, claims(nil)), "shop", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl, err := v.Verify(c.tok, c.app)
			if c.status == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if cl.Subject != "alice" {
					t.Fatalf("claims %+v", cl)
				}
				return
			}
			if err == nil {
				t.Fatal("verified")
			}
			if got := Status(err); got != c.status {
				t.Fatalf("status %d, want %d (%v)", got, c.status, err)
			}
		})
	}
	cl, _ := v.Verify(sign(t, priv, "", claims(func(c jwt.MapClaims) {
		c["scope"] = []string{"a", "b"}
		c["limits"] = map[string]int{"rps": 5, "connections": 2, "read_Bps": 1000, "write_Bps": 2000}
	})), "shop")
	if strings.Join(cl.Scope, ",") != "a,b" || *cl.Limits != (Limits{5, 2, 1000, 2000}) {
		t.Fatalf("claims %+v %+v", cl, cl.Limits)
	}
	// The members of limits are read as spelled too: read_bps is not
	// read_Bps (and, after it, must not lift it), nor RPS rps.
	cl, err = v.Verify(sign(t, priv, "", claims(func(c jwt.MapClaims) {
		c["limits"] = map[string]int{"read_Bps": 1000, "read_bps": 0, "RPS": 9, "Connections": 1}
	})), "shop")
	if err != nil || *cl.Limits != (Limits{ReadBps: 1000}) {
		t.Fatalf("limits spelled in another case: %v %+v, want only read_Bps 1000", err, cl.Limits)
	}
	cl, _ = v.Verify(good, "shop")
	if strings.Join(cl.Scope, ",") != "read,write" || cl.Limits != nil {
		t.Fatalf("claims %+v", cl)
	}
}

// TestVerifyIssuedAtLeeway: an iat ahead of the gateway's clock is
// allowed the same skew as nbf and exp (auth.leeway), and refused past it.
func TestVerifyIssuedAtLeeway(t *testing.T) {
	t.Parallel()
	pub, priv := key(t)
	v, err := New(Options{Issuers: []Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}, Leeway: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ahead time.Duration
		ok    bool
	}{{30 * time.Second, true}, {time.Minute, true}, {time.Minute + time.Second, false}, {24 * time.Hour, false}} {
		tok := sign(t, priv, "", claims(func(m jwt.MapClaims) { m["iat"] = now.Add(c.ahead).Unix() }))
		_, err := v.Verify(tok, "shop")
		if c.ok != (err == nil) {
			t.Errorf("iat %s ahead: err %v, want ok %v", c.ahead, err, c.ok)
		}
		if err != nil && (Status(err) != 401 || !errors.Is(err, ErrInvalid)) {
			t.Errorf("iat %s ahead: status %d (%v), want 401 invalid_token", c.ahead, Status(err), err)
		}
	}
}

// TestVerifyPlatform: the control API's credential is a valid token with
// scope platform, whatever its aud (DESIGN §7).
func TestVerifyPlatform(t *testing.T) {
	pub, priv := key(t)
	_, other := key(t)
	v, err := New(Options{Issuers: []Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	platform := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		return claims(func(c jwt.MapClaims) {
			c["scope"] = "platform"
			if mod != nil {
				mod(c)
			}
		})
	}
	cases := []struct {
		name string
		tok  string
		ok   bool
	}{
		{"aud of an app", sign(t, priv, "", platform(nil)), true},
		{"aud star", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["aud"] = "*" })), true},
		{"no aud", sign(t, priv, "", platform(func(c jwt.MapClaims) { delete(c, "aud") })), true},
		{"scope list", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["scope"] = []string{"read", "platform"} })), true},
		{"no platform scope", sign(t, priv, "", claims(nil)), false},
		{"scope platform-ish", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["scope"] = "platform:read" })), false},
		{"expired", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Second).Unix() })), false},
		{"wrong key", sign(t, other, "", platform(nil)), false},
		{"unknown issuer", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["iss"] = "evil" })), false},
		{"Scope is not scope", sign(t, priv, "", claims(func(c jwt.MapClaims) { delete(c, "scope"); c["Scope"] = "platform" })), false},
		{"SCOPE is not scope", sign(t, priv, "", claims(func(c jwt.MapClaims) { delete(c, "scope"); c["SCOPE"] = []string{"platform"} })), false},
		// A scope string is split on spaces alone (RFC 6749 §3.3): one
		// scope holding a tab or a no-break space is not a scope-token,
		// and never the platform scope beside another.
		{"platform after a tab", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["scope"] = "read\tplatform" })), false},
		{"platform after a no-break space", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["scope"] = "x\u00a0platform" })), false},
		{"platform after a NEL", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["scope"] = "x\u0085platform" })), false},
		{"platform between spaces", sign(t, priv, "", platform(func(c jwt.MapClaims) { c["scope"] = " read  platform " })), true},
	}
	for _, c := range cases {
		if _, err := v.VerifyPlatform(c.tok); (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestKeysFiles(t *testing.T) {
	pub1, priv1 := key(t)
	pub2, priv2 := key(t)
	dir := t.TempDir()
	var pemBytes []byte
	for _, p := range []ed25519.PublicKey{pub1, pub2} {
		der, _ := x509.MarshalPKIXPublicKey(p)
		pemBytes = append(pemBytes, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	pemFile := filepath.Join(dir, "keys.pem")
	os.WriteFile(pemFile, pemBytes, 0o600)
	x := func(p ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(p) }
	jwksFile := filepath.Join(dir, "keys.json")
	os.WriteFile(jwksFile, []byte(`{"keys":[{"kty":"RSA","n":"x","e":"AQAB"},{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+x(pub1)+`"},{"kty":"OKP","crv":"Ed25519","kid":"k2","x":"`+x(pub2)+`"}]}`), 0o600)

	for _, f := range []string{pemFile, jwksFile} {
		v, err := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: f}}, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			priv ed25519.PrivateKey
			kid  string
		}{{priv1, ""}, {priv2, ""}, {priv2, "k2"}} {
			if _, err := v.Verify(sign(t, c.priv, c.kid, claims(nil)), "shop"); err != nil {
				t.Errorf("%s kid %q: %v", filepath.Base(f), c.kid, err)
			}
		}
	}
	// Two keys under one kid (RFC 7517 §4.5 says distinct kids SHOULD be
	// used, not must): the token of either verifies, not only the first's.
	dupFile := filepath.Join(dir, "dup.json")
	os.WriteFile(dupFile, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","x":"`+x(pub1)+`"},{"kty":"OKP","crv":"Ed25519","kid":"k","x":"`+x(pub2)+`"}]}`), 0o600)
	dup, err := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: dupFile}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []ed25519.PrivateKey{priv1, priv2} {
		if _, err := dup.Verify(sign(t, p, "k", claims(nil)), "shop"); err != nil {
			t.Errorf("key %d of two under kid k: %v", i+1, err)
		}
	}
	// kid names the wrong key: refused, not tried against the others.
	v, _ := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: jwksFile}}, Now: func() time.Time { return now }})
	if _, err := v.Verify(sign(t, priv1, "k2", claims(nil)), "shop"); err == nil {
		t.Error("token signed by k1 but naming k2 verified")
	}

	bad := map[string]string{
		"empty":     "",
		"rsa pem":   "rsa",
		"bad jwks":  `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"short"}]}`,
		"no ed key": `{"keys":[{"kty":"RSA"}]}`,
		"not json":  `{"keys":`,
		"text":      "hello",
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	der, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	for name, content := range bad {
		if content == "rsa" {
			content = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
		}
		f := filepath.Join(dir, "bad")
		os.WriteFile(f, []byte(content), 0o600)
		if _, err := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: f}}}); err == nil {
			t.Errorf("%s: keys accepted", name)
		}
	}
	// A key appended to a good one for a rotation, but cut short (its END
	// line lost in the copy): pem.Decode stops at it and the first key
	// alone was loaded, with no word; the new key's tokens were all 401.
	// Text around whole blocks (openssl's comments) stays allowed.
	one := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: func() []byte { d, _ := x509.MarshalPKIXPublicKey(pub1); return d }()})
	two := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: func() []byte { d, _ := x509.MarshalPKIXPublicKey(pub2); return d }()})
	if _, err := ParseKeys(append(append([]byte{}, one...), two[:len(two)-len("-----END PUBLIC KEY-----\n")]...)); err == nil {
		t.Error("a second PEM block without its END line was ignored")
	}
	if _, err := ParseKeys(append(append([]byte{}, one...), "-----BEGIN PUBLIC KEY-----\nnot base64!\n-----END PUBLIC KEY-----\n"...)); err == nil {
		t.Error("a second PEM block that does not decode was ignored")
	}
	if keys, err := ParseKeys(append(append([]byte("issuer key, 2026\n"), one...), "\n# next rotation: May\n"...)); err != nil || len(keys) != 1 {
		t.Errorf("text around a whole block: %d keys, %v", len(keys), err)
	}
	if _, err := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: filepath.Join(dir, "missing")}}}); err == nil {
		t.Error("missing file accepted")
	}
}

// TestKeyID: a token's kid picks the keys it is checked against. Keys
// without a kid (every PEM key, a JWKS entry without one) make no claim
// about kids and are tried for any token; a kid that names none of the
// issuer's keys, when every key has a kid, is refused at once, as a bad
// signature is, not tried against the issuer's other keys. A token
// without kid is tried against them all.
func TestKeyID(t *testing.T) {
	pub1, priv1 := key(t)
	pub2, priv2 := key(t)
	pub3, priv3 := key(t)
	x := func(p ed25519.PublicKey) string { return base64.RawURLEncoding.EncodeToString(p) }
	dir := t.TempDir()
	der, _ := x509.MarshalPKIXPublicKey(pub1)
	pemFile := filepath.Join(dir, "keys.pem")
	os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	jwksFile := filepath.Join(dir, "keys.json")
	os.WriteFile(jwksFile, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+x(pub1)+`"},{"kty":"OKP","crv":"Ed25519","kid":"k2","x":"`+x(pub2)+`"}]}`), 0o600)
	mixedFile := filepath.Join(dir, "mixed.json")
	os.WriteFile(mixedFile, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+x(pub1)+`"},{"kty":"OKP","crv":"Ed25519","x":"`+x(pub3)+`"}]}`), 0o600)
	for _, c := range []struct {
		name  string
		keys  string
		priv  ed25519.PrivateKey
		kid   any // nil: no kid
		ok    bool
		names string // what the error names, when refused
	}{
		{"jwks, no kid, first key", jwksFile, priv1, nil, true, ""},
		{"jwks, no kid, second key", jwksFile, priv2, nil, true, ""},
		{"jwks, kid of the signing key", jwksFile, priv2, "k2", true, ""},
		{"jwks, kid of another key", jwksFile, priv1, "k2", false, "signature"},
		{"jwks, kid of no key", jwksFile, priv1, "k9", false, `kid "k9"`},
		{"jwks, kid of no key, by a key the issuer lacks", jwksFile, priv3, "k9", false, `kid "k9"`},
		{"jwks, kid not a string", jwksFile, priv1, 1, false, "kid"},
		{"pem keys carry no kid: any kid is tried", pemFile, priv1, "k9", true, ""},
		{"mixed, kid of no key, by the key without kid", mixedFile, priv3, "k9", true, ""},
		{"mixed, kid of no key, by a key with another kid", mixedFile, priv1, "k9", false, "signature"},
		{"mixed, kid k1, by the key without kid", mixedFile, priv3, "k1", true, ""},
		{"mixed, kid k1", mixedFile, priv1, "k1", true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: c.keys}}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			hdr := map[string]any{}
			if c.kid != nil {
				hdr["kid"] = c.kid
			}
			_, err = v.Verify(signHeader(t, c.priv, hdr, claims(nil)), "shop")
			switch {
			case c.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !c.ok && err == nil:
				t.Fatal("verified")
			case !c.ok && (!errors.Is(err, ErrInvalid) || Status(err) != 401 || !strings.Contains(err.Error(), c.names)):
				t.Fatalf("err %v (status %d), want ErrInvalid, 401, naming %s", err, Status(err), c.names)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	pub, _ := key(t)
	good := Issuer{Name: "idp", Keys: []ed25519.PublicKey{pub}}
	cases := []struct {
		o    Options
		want string
	}{
		{Options{}, ""},
		{Options{Issuers: []Issuer{good}, ClaimLimits: true}, ""},
		{Options{ClaimLimits: true}, "verification is off"},
		{Options{MaxSubjects: -1}, "max_subjects"},
		{Options{Issuers: []Issuer{{Keys: good.Keys}}}, "name"},
		{Options{Issuers: []Issuer{good, good}}, "twice"},
		{Options{Issuers: []Issuer{{Name: "x"}}}, "no keys"},
		{Options{Issuers: []Issuer{{Name: "x", Keys: []ed25519.PublicKey{pub[:5]}}}}, "not an Ed25519"},
	}
	for _, c := range cases {
		err := c.o.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := New(Options{ClaimLimits: true}); err == nil {
		t.Error("New accepted claim limits without verification")
	}
	var v *Verifier
	if v.Enabled() {
		t.Error("nil verifier enabled")
	}
}

func TestBearerToken(t *testing.T) {
	cases := []struct {
		url, auth string
		tok       string
		err       error
	}{
		{"/", "Bearer abc", "abc", nil},
		{"/", "bearer abc", "abc", nil},
		{"/", "", "", ErrNoToken},
		{"/", "Bearer ", "", ErrNoToken},
		{"/", "Basic dXNlcjpwYXNz", "", ErrNoToken}, // no bearer credential at all (RFC 6750 §3.1)
		{"/", "Bearerabc", "", ErrNoToken},
		{"/", "Bearer", "", ErrNoToken},
		{"/?access_token=abc", "", "", ErrQueryToken},
		{"/?x=1&Token=abc", "Bearer abc", "", ErrQueryToken},
		{"/?jwt=abc", "", "", ErrQueryToken},
		{"/?q=token", "Bearer abc", "abc", nil},
		{"/?token=reset-123", "Bearer abc", "abc", nil},           // the app's own parameter
		{"/?access_token=other", "Bearer abc", "", ErrQueryToken}, // RFC 6750's name: a second method
		{"/?Access_Token=abc&x=1", "Bearer abc", "", ErrQueryToken},
		{"/?token=reset-123", "", "", ErrQueryToken},
		// ';' separates parameters to Rack 2, Python before 3.9.2 and Go
		// before 1.17, and net/url skips such a pair: a host of theirs
		// read a token the gateway never saw.
		{"/?x=1;access_token=other", "Bearer abc", "", ErrQueryToken},
		{"/?x=1;Token=abc", "Bearer abc", "", ErrQueryToken},
		{"/?a=b;access_token=abc", "", "", ErrQueryToken},
		{"/?token=reset-123;x=1", "Bearer abc", "abc", nil}, // still the app's own parameter
		{"/?access%5Ftoken=other", "Bearer abc", "", ErrQueryToken},
		// PHP's $_GET names: each of these is its access_token.
		{"/?access.token=other", "Bearer abc", "", ErrQueryToken},
		{"/?+access+token=other", "Bearer abc", "", ErrQueryToken},
		{"/?access[token=other", "Bearer abc", "", ErrQueryToken},
		{"/?access_token[0]=other", "Bearer abc", "", ErrQueryToken},
		{"/?access_token%00x=other", "Bearer abc", "", ErrQueryToken},
		// PHP's urldecode keeps an escape that does not decode and
		// decodes the rest, so the NUL still ends the name.
		{"/?access_token%00%zz=other", "Bearer abc", "", ErrQueryToken},
		{"/?access%5Ftoken%00%=abc", "", "", ErrQueryToken},
		{"/?access_token%zz=other", "Bearer abc", "abc", nil},
		{"/?id.token=abc", "", "", ErrQueryToken},
		{"/?access_token.x=1&access_token[x=2&[]=3", "Bearer abc", "abc", nil},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", c.url, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		tok, err := BearerToken(r)
		if tok != c.tok || !errors.Is(err, c.err) {
			t.Errorf("%s %q: %q, %v; want %q, %v", c.url, c.auth, tok, err, c.tok, c.err)
		}
		if err != nil && Status(err) != 401 {
			t.Errorf("%s: status %d", c.url, Status(err))
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Add("Authorization", "Bearer a")
	r.Header.Add("Authorization", "Bearer b")
	if _, err := BearerToken(r); !errors.Is(err, ErrTwoHeaders) || !errors.Is(err, ErrInvalid) {
		t.Errorf("two headers: %v", err)
	}
}

// TestWeakIssuerKeyRefused: an issuer key of small order (here the
// identity point) is refused, from a JWKS, a PEM file or Options.Keys.
// crypto/ed25519 verifies under it a signature nobody made (R the
// identity, S zero), so with it configured anyone could mint a platform
// token and take the control API.
func TestWeakIssuerKeyRefused(t *testing.T) {
	weak := make(ed25519.PublicKey, ed25519.PublicKeySize)
	weak[0] = 1 // y = 1: the identity
	dir := t.TempDir()
	jwksFile := filepath.Join(dir, "weak.json")
	os.WriteFile(jwksFile, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+base64.RawURLEncoding.EncodeToString(weak)+`"}]}`), 0o600)
	der, err := x509.MarshalPKIXPublicKey(weak)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := filepath.Join(dir, "weak.pem")
	os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)

	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"EdDSA","typ":"JWT"}`))
	body := base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"idp","sub":"mallory","scope":"platform","exp":` + strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + `}`))
	sig := make([]byte, ed25519.SignatureSize)
	sig[0] = 1 // R = the identity, S = 0
	forged := head + "." + body + "." + base64.RawURLEncoding.EncodeToString(sig)

	for name, is := range map[string]Issuer{
		"jwks":         {Name: "idp", KeysFile: jwksFile},
		"pem":          {Name: "idp", KeysFile: pemFile},
		"options keys": {Name: "idp", Keys: []ed25519.PublicKey{weak}},
	} {
		v, err := New(Options{Issuers: []Issuer{is}, Now: func() time.Time { return now }})
		if err == nil {
			_, verr := v.VerifyPlatform(forged)
			t.Errorf("%s: weak key accepted; a platform token nobody signed: err %v", name, verr)
			continue
		}
		if !strings.Contains(err.Error(), "small order") {
			t.Errorf("%s: error %q does not say why", name, err)
		}
	}
}
