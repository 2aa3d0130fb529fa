package edkey

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"testing"
)

// TestSmallOrder: every listed point, with either sign bit, is refused,
// and the premise holds: each takes a signature nobody made. A real key
// is not refused.
func TestSmallOrder(t *testing.T) {
	forged := make([]byte, ed25519.SignatureSize)
	forged[0] = 1 // R = the identity, S = 0
	for _, y := range smallOrderY {
		for _, sign := range []byte{0, 0x80} {
			key, err := hex.DecodeString(y)
			if err != nil {
				t.Fatal(err)
			}
			key[31] |= sign
			if sign == 0 {
				n := 0
				for i := range 200 {
					if ed25519.Verify(key, fmt.Appendf(nil, "message %d", i), forged) {
						n++
					}
				}
				if n == 0 {
					t.Fatalf("key %x: no forged signature verifies; not a weak key", key)
				}
			}
			if !SmallOrder(key) {
				t.Errorf("SmallOrder(%x) = false", key)
			}
		}
	}
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if SmallOrder(pub) {
		t.Errorf("SmallOrder(a generated key) = true")
	}
	if SmallOrder(make([]byte, 31)) {
		t.Errorf("SmallOrder(31 bytes) = true")
	}
}
