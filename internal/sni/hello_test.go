package sni

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"testing"
)

// clientHello returns the raw records of the ClientHello a real tls.Client
// with cfg sends, captured over a net.Pipe.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	cc, sc := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(cc, cfg).Handshake() // fails once sc closes
		cc.Close()
	}()
	_, raw, err := Parse(sc)
	sc.Close()
	<-done
	if err != nil {
		t.Fatalf("parse real hello: %v", err)
	}
	return raw
}

// stdHello parses raw with crypto/tls, for cross-checking.
func stdHello(t testing.TB, raw []byte) *tls.ClientHelloInfo {
	t.Helper()
	cc, sc := net.Pipe()
	got := make(chan *tls.ClientHelloInfo, 1)
	go func() {
		cfg := &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			got <- chi
			return nil, net.ErrClosed
		}}
		_ = tls.Server(sc, cfg).Handshake()
		sc.Close()
	}()
	_, _ = cc.Write(raw)
	cc.Close()
	return <-got
}

// refragment re-splits the handshake payload of raw into records of at
// most size bytes each.
func refragment(t testing.TB, raw []byte, size int) []byte {
	t.Helper()
	var payload []byte
	for r := raw; len(r) > 0; {
		n := int(r[3])<<8 | int(r[4])
		payload = append(payload, r[5:5+n]...)
		r = r[5+n:]
	}
	var out []byte
	for len(payload) > 0 {
		n := min(size, len(payload))
		out = append(out, 22, 3, 1, byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
	}
	return out
}

var helloConfigs = []struct {
	name string
	cfg  *tls.Config
}{
	{"sni+alpn", &tls.Config{ServerName: "app.example.com", NextProtos: []string{"h2", "http/1.1"}}},
	{"no-sni", &tls.Config{InsecureSkipVerify: true}},
	{"ip-no-sni", &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}},
	{"tls12-only", &tls.Config{ServerName: "a.b", MaxVersion: tls.VersionTLS12}},
	{"x25519-only", &tls.Config{ServerName: "x.example", CurvePreferences: []tls.CurveID{tls.X25519}}},
	{"pq-only", &tls.Config{ServerName: "pq.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}}},
	{"acme-alpn", &tls.Config{ServerName: "long-label-0123456789.apps.example.com", NextProtos: []string{"acme-tls/1"}}},
}

func TestParseMatchesCryptoTLS(t *testing.T) {
	for _, tc := range helloConfigs {
		t.Run(tc.name, func(t *testing.T) {
			raw := clientHello(t, tc.cfg)
			want := stdHello(t, raw)
			for _, size := range []int{1 << 14, 1, 7, 100} {
				in := raw
				if size != 1<<14 {
					in = refragment(t, raw, size)
				}
				sent := append(in[:len(in):len(in)], "trailing"...)
				h, got, err := Parse(bytes.NewReader(sent))
				if err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				// Every byte read comes back (the hello, and what a read
				// took past it), so a replay loses nothing.
				if len(got) < len(in) || !bytes.Equal(got, sent[:len(got)]) {
					t.Fatalf("size %d: raw bytes are not what was sent (%d bytes, hello %d)", size, len(got), len(in))
				}
				if h.ServerName != want.ServerName {
					t.Errorf("ServerName %q, crypto/tls %q", h.ServerName, want.ServerName)
				}
				if !equal(h.ALPN, want.SupportedProtos) {
					t.Errorf("ALPN %q, crypto/tls %q", h.ALPN, want.SupportedProtos)
				}
				if len(h.SupportedGroups) != len(want.SupportedCurves) {
					t.Errorf("groups %v, crypto/tls %v", h.SupportedGroups, want.SupportedCurves)
				}
				for i := range want.SupportedCurves {
					if i < len(h.SupportedGroups) && tls.CurveID(h.SupportedGroups[i]) != want.SupportedCurves[i] {
						t.Errorf("group %d: %v, crypto/tls %v", i, h.SupportedGroups[i], want.SupportedCurves[i])
					}
				}
				if !equal(h.SupportedVersions, want.SupportedVersions) {
					t.Errorf("versions %v, crypto/tls %v", h.SupportedVersions, want.SupportedVersions)
				}
			}
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseRejects(t *testing.T) {
	good := clientHello(t, helloConfigs[0].cfg)
	big := []byte{22, 3, 1, 0x40, 0, 1, 0x01, 0, 0} // hello claims 64 KiB
	cases := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"alert record", []byte{21, 3, 1, 0, 2, 2, 40}},
		{"sslv2", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}},
		{"zero length record", []byte{22, 3, 1, 0, 0}},
		{"record too long", []byte{22, 3, 1, 0x40, 0x01}},
		{"server hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}},
		{"oversized hello", big},
		{"truncated header", good[:3]},
		{"truncated body", good[:len(good)-1]},
		{"bad session id", mutate(good, 5+4+2+32, 0xff)},
		{"garbage body", append([]byte{22, 3, 1, 0, 8, 1, 0, 0, 4}, 0xde, 0xad, 0xbe, 0xef)},
		{"record then garbage", append(refragment(t, good, 10)[:15], 23, 3, 3, 0, 1, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, raw, err := Parse(bytes.NewReader(tc.in))
			if err == nil {
				t.Fatalf("accepted: %+v (%d bytes)", h, len(raw))
			}
		})
	}
	// Every truncation of a real hello is refused, none panics.
	for i := range good {
		if _, _, err := Parse(bytes.NewReader(good[:i])); err == nil {
			t.Fatalf("truncated at %d accepted", i)
		}
	}
}

func TestParseTooLarge(t *testing.T) {
	// A hello over the cap split across many small records stops at it.
	n := MaxHelloBytes + 100
	body := append([]byte{1, byte(n >> 16), byte(n >> 8), byte(n)}, make([]byte, n)...)
	var in []byte
	for len(body) > 0 {
		k := min(100, len(body))
		in = append(in, 22, 3, 1, 0, byte(k))
		in = append(in, body[:k]...)
		body = body[k:]
	}
	if _, _, err := Parse(bytes.NewReader(in)); err != ErrTooLarge {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	// A legal size announced, but spread over one-byte records (six
	// bytes read for each), hits the raw cap too.
	m := maxRawBytes / 5
	body = append([]byte{1, 0, byte(m >> 8), byte(m)}, make([]byte, m)...)
	in = nil
	for _, b := range body {
		in = append(in, 22, 3, 1, 0, 1, b)
	}
	if _, _, err := Parse(bytes.NewReader(in)); err != ErrTooLarge {
		t.Fatalf("one-byte records: err = %v, want ErrTooLarge", err)
	}
}

func mutate(b []byte, i int, v byte) []byte {
	out := bytes.Clone(b)
	out[i] = v
	return out
}

// TestParseRefusalKinds: each refusal RFC 8446 names an alert for comes
// as its own error, which the https listener answers with that alert; a
// plain malformed hello is ErrInvalid alone (decode_error).
func TestParseRefusalKinds(t *testing.T) {
	kinds := []error{ErrUnexpected, ErrRecordOverflow, ErrSSLv2, ErrAlert, ErrPlainHTTP, ErrTruncated, ErrTooLarge}
	cases := []struct {
		name string
		in   []byte
		want error // nil: none of kinds
	}{
		{"server hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, ErrUnexpected},
		{"application data", []byte{23, 3, 3, 0, 1, 0}, ErrUnexpected},
		{"change cipher spec", []byte{20, 3, 3, 0, 1, 1}, ErrUnexpected},
		{"empty handshake record", []byte{22, 3, 1, 0, 0}, ErrUnexpected},
		{"record over 16 KiB", append([]byte{22, 3, 1, 0x40, 0x01}, make([]byte, 1<<14+1)...), ErrRecordOverflow},
		{"sslv2 hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0, 0x15}, ErrSSLv2},
		{"alert", []byte{21, 3, 1, 0, 2, 2, 40}, ErrAlert},
		{"alert after a first fragment", []byte{22, 3, 1, 0, 1, 1, 21, 3, 3, 0, 2, 2, 90}, ErrAlert},
		// §5.1: every record past 2^14 bytes, an alert's too, is
		// record_overflow; an alert record holds one alert, 2 bytes
		// (crypto/tls answers other lengths unexpected_message).
		{"alert record over 16 KiB", append([]byte{21, 3, 1, 0x40, 0x01}, make([]byte, 1<<14+1)...), ErrRecordOverflow},
		{"alert record of 3 bytes", []byte{21, 3, 1, 0, 3, 2, 40, 0}, ErrUnexpected},
		{"empty alert record", []byte{21, 3, 1, 0, 0}, ErrUnexpected},
		{"garbage hello", append([]byte{22, 3, 1, 0, 8, 1, 0, 0, 4}, 0xde, 0xad, 0xbe, 0xef), nil},
		{"record version 0x1000", []byte{22, 0x10, 0, 0, 1, 1}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse(bytes.NewReader(tc.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want an ErrInvalid", err)
			}
			for _, k := range kinds {
				if errors.Is(err, k) != (k == tc.want) {
					t.Errorf("err = %v: errors.Is %v is %v", err, k, !(k == tc.want))
				}
			}
		})
	}
}

// TestParseRecordLimit: a hello's records are plaintext, so 2^14 bytes
// is the most one holds (RFC 8446 §5.1); the 2^14+256 a TLSCiphertext may
// take is no plaintext record's. A record of exactly 2^14 carrying the
// hello (the rest of it more handshake bytes) is read; one byte more, or
// the ciphertext's 256 more, is record_overflow.
func TestParseRecordLimit(t *testing.T) {
	raw := clientHello(t, helloConfigs[0].cfg)
	payload := raw[5:] // the hello's one record, as crypto/tls sent it
	for _, tt := range []struct {
		size int
		want error
	}{
		{1 << 14, nil},
		{1<<14 + 1, ErrRecordOverflow},
		{1<<14 + 256, ErrRecordOverflow},
	} {
		in := append([]byte{22, 3, 1, byte(tt.size >> 8), byte(tt.size)}, payload...)
		in = append(in, make([]byte, tt.size-len(payload))...)
		h, _, err := Parse(bytes.NewReader(in))
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("record of %d bytes: err = %v, want %v", tt.size, err, tt.want)
		}
		if tt.want == nil && (h == nil || h.ServerName != "app.example.com") {
			t.Errorf("record of %d bytes: hello %+v, want the one sent", tt.size, h)
		}
	}
}
