package sni

import (
	"bytes"
	"testing"
	"testing/iotest"
)

// FuzzParse feeds Parse real hellos from crypto/tls, fragmented variants
// and junk. Parse must never panic, must return only bytes it was given,
// and must give the same answer however the input is split into reads.
func FuzzParse(f *testing.F) {
	for _, tc := range helloConfigs {
		raw := clientHello(f, tc.cfg)
		f.Add(raw)
		f.Add(refragment(f, raw, 1))
		f.Add(refragment(f, raw, 64))
		f.Add(raw[:len(raw)/2])
		f.Add(append([]byte{21, 3, 1, 0, 2, 1, 112}, refragment(f, raw, 200)...)) // a warning alert Parse drops
	}
	f.Add(padded(f, "big.example", 20<<10)) // over one record, as a large hello comes
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{22, 3, 1, 0x40, 0, 1, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, raw, err := Parse(bytes.NewReader(in))
		h2, raw2, err2 := Parse(iotest.OneByteReader(bytes.NewReader(in)))
		if (err == nil) != (err2 == nil) {
			t.Fatalf("split reads changed the outcome: %v vs %v", err, err2)
		}
		if err != nil {
			if h != nil || raw != nil {
				t.Fatal("error with a result")
			}
			return
		}
		// A bigger read may take more than the hello; either way raw is
		// what was read, in order.
		if !bytes.HasPrefix(in, raw) || !bytes.HasPrefix(in, raw2) {
			t.Fatal("raw is not the consumed prefix of the input")
		}
		if h.ServerName != h2.ServerName || len(h.ALPN) != len(h2.ALPN) {
			t.Fatal("split reads changed the hello")
		}
	})
}
