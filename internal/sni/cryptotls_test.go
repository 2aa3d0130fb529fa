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

// TestParseWarningAlertIsCryptoTLS: crypto/tls's server drops a warning
// alert other than close_notify before the hello or between its records
// (it has no version yet, so none is TLS 1.3's), up to 16 in a row, and
// reads the hello; Parse does the same and hands every byte back, the
// alerts included, for the handshake or the host to read. A fatal alert
// or close_notify ends both.
func TestParseWarningAlertIsCryptoTLS(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "a.example"})
	halves := refragment(t, hello, (len(hello)-5)/2)
	k := int(halves[3])<<8 | int(halves[4])
	rec1, rest := halves[:5+k], halves[5+k:]
	warn := []byte{21, 3, 1, 0, 2, 1, 112}
	warns := func(n int) []byte { return bytes.Repeat(warn, n) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"a warning first", cat(warn, hello)},
		{"16 warnings first", cat(warns(16), hello)},
		{"17 warnings first", cat(warns(17), hello)},
		{"a warning between records", cat(rec1, warn, rest)},
		{"16 warnings first and 16 between", cat(warns(16), rec1, warns(16), rest)},
		{"a warning in 2-byte records", cat(warn, refragment(t, hello, 2))},
		{"a fatal alert first", cat([]byte{21, 3, 1, 0, 2, 2, 40}, hello)},
		{"close_notify first", cat([]byte{21, 3, 1, 0, 2, 1, 0}, hello)},
	} {
		want := acceptsHello(t, tc.raw)
		h, got, err := Parse(bytes.NewReader(tc.raw))
		if (err == nil) != want {
			t.Errorf("%s: Parse err = %v; crypto/tls reads it: %v", tc.name, err, want)
			continue
		}
		if err == nil && (h.ServerName != "a.example" || !bytes.Equal(got, tc.raw)) {
			t.Errorf("%s: name %q, %d bytes back of %d", tc.name, h.ServerName, len(got), len(tc.raw))
		}
	}
}
