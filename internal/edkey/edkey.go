// Package edkey checks Ed25519 public keys that gatehouse is told to
// trust (host enrolments, peer clusters) for the ones that are not keys.
package edkey

import (
	"crypto/ed25519"
	"encoding/hex"
)

// smallOrderY are the y coordinates (little endian, x's sign bit clear)
// of the Ed25519 points whose order divides 8, and p and p+1, the other
// spellings of y = 0 and y = 1 (libsodium refuses the same list).
var smallOrderY = [...]string{
	"0000000000000000000000000000000000000000000000000000000000000000", // order 4
	"0100000000000000000000000000000000000000000000000000000000000000", // the identity
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // p-1, order 2
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // p: 0
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // p+1: 1
}

// SmallOrder reports whether key, a 32-byte Ed25519 public key, encodes
// a point of small order. crypto/ed25519 verifies, under such a key,
// signatures that need no private key (R the identity and S zero hold for
// every message whose hash is a multiple of the point's order), so
// whatever trusts one trusts anybody. A key of another length is not
// small order; its length is the caller's to check.
func SmallOrder(key []byte) bool {
	if len(key) != ed25519.PublicKeySize {
		return false
	}
	y := hex.EncodeToString(key[:31]) + hex.EncodeToString([]byte{key[31] &^ 0x80})
	for _, w := range smallOrderY {
		if y == w {
			return true
		}
	}
	return false
}
