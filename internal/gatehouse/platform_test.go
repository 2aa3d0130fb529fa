package gatehouse

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/config"
)

// TestPlatformJWT: the control API takes, besides control.token, a bearer
// token with scope platform from a configured issuer (DESIGN §7) - whatever
// its aud, which names apps, not the control API - and nothing less.
func TestPlatformJWT(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(keys, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Auth.Issuers = []config.Issuer{{Issuer: "idp", KeysFile: keys}}
	r := start(t, cfg)
	sign := func(key ed25519.PrivateKey, mod func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": "idp", "sub": "ops", "scope": "platform", "exp": time.Now().Add(time.Hour).Unix()}
		mod(c)
		s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name   string
		tok    string
		status int
	}{
		{"aud star", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*" }), 200},
		{"aud naming the platform", sign(priv, func(c jwt.MapClaims) { c["aud"] = "gatehouse" }), 200},
		{"no aud", sign(priv, func(jwt.MapClaims) {}), 200},
		{"scope list", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["scope"] = []string{"read", "platform"} }), 200},
		{"no platform scope", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["scope"] = "read write" }), 401},
		{"expired", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["exp"] = time.Now().Add(-2 * time.Minute).Unix() }), 401},
		// auth.leeway (1m by default): an issuer's clock a little off
		// from the gateway's does not refuse a fresh token.
		{"expired within the leeway", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["exp"] = time.Now().Add(-20 * time.Second).Unix() }), 200},
		{"valid soon, within the leeway", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["nbf"] = time.Now().Add(20 * time.Second).Unix() }), 200},
		{"valid later than the leeway", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["nbf"] = time.Now().Add(2 * time.Minute).Unix() }), 401},
		{"unknown issuer", sign(priv, func(c jwt.MapClaims) { c["aud"] = "*"; c["iss"] = "other" }), 401},
		{"wrong key", sign(other, func(c jwt.MapClaims) { c["aud"] = "*" }), 401},
	}
	for _, c := range cases {
		req, _ := http.NewRequest("GET", "http://"+r.g.Addrs().Management+"/api/v3/apps", nil)
		req.Header.Set("Authorization", "Bearer "+c.tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, res.StatusCode, c.status)
		}
	}
}

// TestControlTokenGuessingLimited: wrong bearer tokens sent to the
// control API at api.{zone} on a public listener are charged to the
// client address, 100 per 60 s; then that address gets 429 with
// Retry-After, on the management listener too (one API, one window),
// and for the right token as well while the window is spent.
func TestControlTokenGuessingLimited(t *testing.T) {
	r := start(t, testConfig(t))
	for i := range 100 {
		if resp, body := r.get(t, "api.test.local", "/api/v3/apps", map[string]string{"Authorization": fmt.Sprintf("Bearer guess-%d", i)}); resp.StatusCode != 401 {
			t.Fatalf("wrong token %d: %d %s, want 401", i, resp.StatusCode, body)
		}
	}
	resp, body := r.get(t, "api.test.local", "/api/v3/apps", map[string]string{"Authorization": "Bearer guess-100"})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("wrong token 101: %d %v %s, want 429 problem with Retry-After", resp.StatusCode, resp.Header, body)
	}
	if code, body := r.control(t, "GET", "/api/v3/apps", ""); code != 429 {
		t.Errorf("the right token on the management listener from the same address: %d %s, want 429", code, body)
	}
}
