package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/gatehouse-dev/gatehouse/internal/edkey"
)

// Key is one issuer public key; ID is the JWKS kid, if any.
type Key struct {
	ID  string
	Pub ed25519.PublicKey
}

// LoadKeys reads Ed25519 public keys from a PEM or a JWKS file.
func LoadKeys(file string) ([]Key, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth: keys: %w", err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, file)
	}
	return keys, nil
}

// ParseKeys reads Ed25519 public keys from PEM or JWKS bytes. It fails when
// no Ed25519 key is found or a key is not a valid one.
func ParseKeys(b []byte) ([]Key, error) {
	var keys []Key
	var err error
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		keys, err = parseJWKS(t)
	} else {
		keys, err = parsePEM(b)
	}
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("auth: keys: no Ed25519 public key found")
	}
	return keys, nil
}

func parsePEM(b []byte) ([]Key, error) {
	var keys []Key
	for n := 1; ; n++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("auth: keys: PEM block %d is %q, want \"PUBLIC KEY\"", n, blk.Type)
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("auth: keys: PEM block %d: %v", n, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("auth: keys: PEM block %d is a %T, want an Ed25519 key", n, k)
		}
		if edkey.SmallOrder(pub) {
			return nil, fmt.Errorf("auth: keys: PEM block %d: %s", n, errWeakKey)
		}
		keys = append(keys, Key{Pub: pub})
	}
	if len(bytes.TrimSpace(b)) > 0 && len(keys) == 0 {
		return nil, errors.New("auth: keys: neither PEM nor JWKS")
	}
	// pem.Decode stops, with no error, at a block it cannot read (no END
	// line, or a body that is not base64): a key appended for a rotation
	// and cut short in the copy was dropped without a word, and every
	// token it signed refused. Text around whole blocks is allowed.
	if bytes.Contains(b, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("auth: keys: PEM block %d is not a whole PEM block (no END line, or a body that is not base64)", len(keys)+1)
	}
	return keys, nil
}

// errWeakKey explains a refused key of small order: crypto/ed25519
// verifies under it signatures that need no private key (R the identity,
// S zero), so with it anyone could mint tokens, platform ones included.
const errWeakKey = "a point of small order, not a key: anyone can sign for it"

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Use string `json:"use"`
}

// parseJWKS keeps the OKP/Ed25519 signing keys of a set and skips keys of
// other types, which a shared JWKS may legitimately hold.
func parseJWKS(b []byte) ([]Key, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("auth: keys: JWKS: %v", err)
	}
	var keys []Key
	for i, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("auth: keys: JWKS key %d (kid %q): x must be a base64url 32-byte key", i, k.Kid)
		}
		if edkey.SmallOrder(x) {
			return nil, fmt.Errorf("auth: keys: JWKS key %d (kid %q): %s", i, k.Kid, errWeakKey)
		}
		keys = append(keys, Key{ID: k.Kid, Pub: ed25519.PublicKey(x)})
	}
	return keys, nil
}
