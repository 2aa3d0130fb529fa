package sni

import (
	"bytes"
	"crypto/tls"
	"testing"
)

// withRecordVersion returns raw with every record's version set to v.
func withRecordVersion(raw []byte, v uint16) []byte {
	out := bytes.Clone(raw)
	for r := out; len(r) > 0; {
		n := int(r[3])<<8 | int(r[4])
		r[1], r[2] = byte(v>>8), byte(v)
		r = r[5+n:]
	}
	return out
}

// TestParseRecordVersionIsCryptoTLS: crypto/tls's server takes a
// hello's records whatever their version below 0x1000 (it picks the
// version from the hello, and reads the records before it has one), so
// Parse does too: a hello the gateway terminates is not refused for a
// record version its own handshake reads.
func TestParseRecordVersionIsCryptoTLS(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "a.example"})
	for _, v := range []uint16{0x0000, 0x0200, 0x0301, 0x0303, 0x03ff, 0x0f00, 0x0fff, 0x1000, 0xff03} {
		raw := withRecordVersion(hello, v)
		want := acceptsHello(t, raw)
		h, got, err := Parse(bytes.NewReader(raw))
		if (err == nil) != want {
			t.Errorf("record version %#04x: Parse err = %v; crypto/tls reads it: %v", v, err, want)
			continue
		}
		if err == nil && (h.ServerName != "a.example" || !bytes.Equal(got, raw)) {
			t.Errorf("record version %#04x: name %q, %d bytes back of %d", v, h.ServerName, len(got), len(raw))
		}
	}
}
