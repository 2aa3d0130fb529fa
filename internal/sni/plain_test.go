package sni

import (
	"errors"
	"strings"
	"testing"
)

// TestPlainHTTP: a stream that begins as an HTTP/1 request is told apart
// from other input that is no ClientHello, so the listener can answer it
// in HTTP; nothing that could begin a TLS record is.
func TestPlainHTTP(t *testing.T) {
	for _, c := range []struct {
		in    string
		plain bool
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true},
		{"POST /x HTTP/1.1\r\n\r\n", true},
		{"OPTIONS * HTTP/1.1\r\n\r\n", true},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", true},
		// The absolute form (RFC 9112 §3.2.2), which a client configured
		// with the gateway as its proxy sends, and the authority form.
		{"GET http://a/ HTTP/1.1\r\n\r\n", true},
		{"PUT https://a/x HTTP/1.1\r\n\r\n", true},
		{"CONNECT a:443 HTTP/1.1\r\n\r\n", true},
		{"GET \x00 HTTP/1.1\r\n\r\n", false},
		{"get / HTTP/1.1\r\n\r\n", false},
		{"G\x00\x00\x00\x00", false},
		{"\x16\x03\x01\x00\x04\x02\x00\x00\x00", false},
		{"\x17\x03\x03\x00\x01\x00", false},
	} {
		_, _, err := Parse(strings.NewReader(c.in))
		if err == nil {
			t.Fatalf("%q parsed", c.in)
		}
		if got := errors.Is(err, ErrPlainHTTP); got != c.plain || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v; plain HTTP %v, want %v", c.in, err, got, c.plain)
		}
	}
}
