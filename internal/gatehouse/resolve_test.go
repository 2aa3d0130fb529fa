package gatehouse

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/config"
)

// issuerKey writes a fresh Ed25519 issuer's public key as a PEM file and
// returns the private key and the file.
func issuerKey(t *testing.T) (ed25519.PrivateKey, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv, file
}

// TestResolveAPI is DESIGN §8's HTTP resolve API on api.{zone}, end to end:
// a signed-in session (any valid token, here one for another app) gets
// DoH JSON answers from the gateway's zones, Status 5 off-zone, at most 10
// queries a batch, and every query charged to its session.
func TestResolveAPI(t *testing.T) {
	priv, keys := issuerKey(t)
	cfg := testConfig(t)
	cfg.Auth.Issuers = []config.Issuer{{Issuer: "idp", KeysFile: keys}}
	r := start(t, cfg)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": "idp", "sub": "alice", "aud": []string{"shop"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, path, tok, body string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+r.g.Addrs().HTTP+path, strings.NewReader(body))
		req.Host = "api.test.local"
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	type doh struct {
		Status             int
		TC, RD, RA, AD, CD bool
		Question           []struct {
			Name string `json:"name"`
			Type int    `json:"type"`
		}
		Answer []struct {
			Name string `json:"name"`
			Type int    `json:"type"`
			TTL  int
			Data string `json:"data"`
		}
	}

	if res, b := send("GET", "/api/v3/dns/resolve?name=hello.test.local&type=A", "", ""); res.StatusCode != 401 {
		t.Errorf("no session: %d %s, want 401", res.StatusCode, b)
	}
	res, b := send("GET", "/api/v3/dns/resolve?name=hello.test.local&type=A", tok, "")
	if res.StatusCode != 200 {
		t.Fatalf("resolve: %d %s, want 200", res.StatusCode, b)
	}
	var d doh
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("resolve body %s: %v", b, err)
	}
	if d.Status != 0 || d.RA || len(d.Question) != 1 || d.Question[0].Type != 1 || len(d.Answer) != 1 ||
		d.Answer[0].Data != "127.0.0.1" || d.Answer[0].Type != 1 || d.Answer[0].Name != "hello.test.local." || d.Answer[0].TTL != 60 {
		t.Errorf("resolve body %s", b)
	}
	first, err := strconv.Atoi(res.Header.Get("X-RateLimit-Identity-Remaining"))
	if err != nil || res.Header.Get("X-RateLimit-Identity-Limit") == "" || res.Header.Get("X-RateLimit-Identity-Reset") == "" {
		t.Errorf("identity headers %v", res.Header)
	}

	res, b = send("GET", "/api/v3/dns/resolve?name=wikipedia.org&type=A", tok, "")
	d = doh{}
	if err := json.Unmarshal(b, &d); res.StatusCode != 200 || err != nil || d.Status != 5 || len(d.Answer) != 0 {
		t.Errorf("off-zone: %d %s, want 200 with Status 5", res.StatusCode, b)
	}

	eleven := "[" + strings.TrimSuffix(strings.Repeat(`{"name":"a.test.local","type":"A"},`, 11), ",") + "]"
	if res, b := send("POST", "/api/v3/dns/resolve/batch", tok, eleven); res.StatusCode != 400 {
		t.Errorf("11 queries: %d %s, want 400", res.StatusCode, b)
	}
	res, b = send("POST", "/api/v3/dns/resolve/batch", tok, `[{"name":"a.test.local","type":"A"},{"name":"test.local","type":"SOA"},{"name":"example.org"}]`)
	var ds []doh
	if err := json.Unmarshal(b, &ds); res.StatusCode != 200 || err != nil || len(ds) != 3 || ds[0].Status != 0 || ds[1].Answer[0].Type != 6 || ds[2].Status != 5 {
		t.Fatalf("batch: %d %s", res.StatusCode, b)
	}
	// one unit per query: the first GET, the off-zone GET, then 3
	if got, _ := strconv.Atoi(res.Header.Get("X-RateLimit-Identity-Remaining")); got != first-4 {
		t.Errorf("after a batch of 3: identity remaining %d, want %d", got, first-4)
	}
}
