package auth

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestDescribe: each way a token fails has its own RFC 6750 code and
// description, and the description holds only what error_description
// may (RFC 6750 §3: %x20-21 / %x23-5B / %x5D-7E), even where it repeats
// the token's own words (a typ with a quote and a backslash in it).
func TestDescribe(t *testing.T) {
	pub, priv := key(t)
	_, other := key(t)
	v, err := New(Options{Issuers: []Issuer{{Name: "idp", Keys: []ed25519.PublicKey{pub}}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	verr := func(tok string) error {
		_, err := v.Verify(tok, "shop")
		if err == nil {
			t.Fatalf("token verified: %s", tok)
		}
		return err
	}
	for _, c := range []struct {
		name, code, says string
		err              error
	}{
		{"no token", "", "", ErrNoToken},
		{"query token", CodeInvalidRequest, "query string", ErrQueryToken},
		{"two headers", CodeInvalidRequest, "one Authorization header", ErrTwoHeaders},
		{"expired", CodeInvalidToken, "expired", verr(sign(t, priv, "", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })))},
		{"nbf", CodeInvalidToken, "nbf", verr(sign(t, priv, "", claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })))},
		{"forged", CodeInvalidToken, "signature does not verify", verr(sign(t, other, "", claims(nil)))},
		{"unknown iss", CodeInvalidToken, "signature does not verify", verr(sign(t, priv, "", claims(func(c jwt.MapClaims) { c["iss"] = "x" })))},
		{"garbage", CodeInvalidToken, "not a well-formed JWT", verr("a.b.c")},
		{"audience", CodeInsufficientScope, "aud", verr(sign(t, priv, "", claims(func(c jwt.MapClaims) { c["aud"] = "blog" })))},
		{"typ", CodeInvalidToken, "typ", verr(signHeader(t, priv, map[string]any{"typ": `lo"g\out+jwt`}, claims(nil)))},
	} {
		code, desc := Describe(c.err)
		if code != c.code || !strings.Contains(desc, c.says) {
			t.Errorf("%s: %q %q, want %q and a description saying %q", c.name, code, desc, c.code, c.says)
		}
		for i := 0; i < len(desc); i++ {
			if b := desc[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
				t.Errorf("%s: description %q holds %#02x", c.name, desc, b)
			}
		}
		ch := Challenge("gatehouse", c.err, PlatformScope)
		if c.code == "" && ch != `Bearer realm="gatehouse"` || c.code != "" && !strings.Contains(ch, `error="`+c.code+`"`) {
			t.Errorf("%s: challenge %q", c.name, ch)
		}
	}
	if !errors.Is(verr(sign(t, priv, "", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }))), ErrInvalid) {
		t.Error("an expired token's error is not ErrInvalid")
	}
}

// TestDescribeOneAnswerForUntrusted: a token that no trusted key verifies
// gets one challenge, byte for byte, however it fails: signed by another
// key, naming an issuer not configured, a kid of no key (in a JWKS whose
// keys all have kids), another algorithm, expired besides. A word more
// for any of them (even without naming the issuer or kid) would tell a
// caller which issuers and kids exist.
func TestDescribeOneAnswerForUntrusted(t *testing.T) {
	pub, priv := key(t)
	_, other := key(t)
	jwks := filepath.Join(t.TempDir(), "keys.json")
	x := base64.RawURLEncoding.EncodeToString(pub)
	if err := os.WriteFile(jwks, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+x+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := New(Options{Issuers: []Issuer{{Name: "idp", KeysFile: jwks}}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	expired := func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
	hs.Header["kid"] = "k1"
	hsTok, err := hs.SignedString([]byte("k1"))
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, c := range []struct{ name, tok string }{
		{"another key", sign(t, other, "k1", claims(nil))},
		{"another key, expired", sign(t, other, "k1", claims(expired))},
		{"unknown issuer", sign(t, priv, "k1", claims(func(c jwt.MapClaims) { c["iss"] = "evil-idp" }))},
		{"unknown issuer, expired", sign(t, priv, "k1", claims(func(c jwt.MapClaims) { c["iss"] = "evil-idp"; expired(c) }))},
		{"kid of no key", sign(t, priv, "k9", claims(nil))},
		{"no kid, another key", sign(t, other, "", claims(nil))},
		{"kid not a string", signHeader(t, priv, map[string]any{"kid": 1}, claims(nil))},
		{"HS256", hsTok},
	} {
		_, err := v.Verify(c.tok, "shop")
		if err == nil {
			t.Fatalf("%s: verified", c.name)
		}
		ch := Challenge("gatehouse", err, "")
		if want == "" {
			want = ch
		} else if ch != want {
			t.Errorf("%s: challenge %q, want the same as every untrusted token's, %q", c.name, ch, want)
		}
	}
	if !strings.Contains(want, "signature does not verify") {
		t.Errorf("untrusted tokens' challenge %q does not say the signature does not verify", want)
	}
}
