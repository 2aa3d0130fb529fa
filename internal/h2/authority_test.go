package h2

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// serveTLS is serve behind a real TLS handshake (ALPN h2), as the edge
// gives the server its connections; dial opens a raw client over TLS.
func serveTLS(t *testing.T, o Options) (s *Server, dial func() *rawClient) {
	t.Helper()
	cert, pool := testutil.SelfSigned(t, "a.example")
	s, addr := serveWrapped(t, o, func(c net.Conn) net.Conn {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		_ = tc.Handshake()
		return tc
	})
	return s, func() *rawClient {
		t.Helper()
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		return rawOver(t, c)
	}
}

// answer reads until stream id is answered and returns how: its status
// and X-U, or "RST_STREAM " and the code, or the connection's end.
func (rc *rawClient) answer(id uint32) string {
	rc.t.Helper()
	for {
		f, err := rc.next()
		if err != nil {
			return "error " + err.Error()
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status") + " " + headerValue(f, "x-u")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// TestAuthorityAndHost: the request's Host is what the gateway routes by
// and what the host behind it is sent, so it must be one name the
// client gave, in the form an HTTP/1.1 Host may take. A Host field that
// names another authority than :authority, several Host fields, or an
// authority with bytes no Host may hold (RFC 9113 §8.3.1, RFC 9110 §7.2;
// x/net's server and the HTTP/1.1 listener refuse each) make the request
// malformed: the stream is reset before the handler runs, and the
// connection goes on. A Host the client sent is not left in r.Header,
// where the handler could read a name other than r.Host (net/http keeps
// it out of the map too).
func TestAuthorityAndHost(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("X-U", fmt.Sprintf("%s %q", r.Host, r.Header["Host"]))
	})
	_, dial := serveTLS(t, Options{Handler: h})
	base := []string{":method", "GET", ":scheme", "https", ":path", "/"}
	for _, tt := range []struct {
		name   string
		fields []string
		want   string
	}{
		{"authority", []string{":authority", "a.example"}, `200 a.example []`},
		{"authority and the same host", []string{":authority", "a.example", "host", "a.example"}, `200 a.example []`},
		{"authority and the host in another case", []string{":authority", "a.example", "host", "A.Example"}, `200 a.example []`},
		{"host alone", []string{"host", "a.example:8443"}, `200 a.example:8443 []`},
		{"authority with a port", []string{":authority", "a.example:8443"}, `200 a.example:8443 []`},
		{"authority and another host", []string{":authority", "a.example", "host", "b.example"}, "RST_STREAM PROTOCOL_ERROR"},
		{"two hosts", []string{"host", "a.example", "host", "b.example"}, "RST_STREAM PROTOCOL_ERROR"},
		{"authority with a space", []string{":authority", "a.example /admin"}, "RST_STREAM PROTOCOL_ERROR"},
		{"authority with markup in the port", []string{":authority", "a.example:1<script>"}, "RST_STREAM PROTOCOL_ERROR"},
		{"authority with a quote", []string{":authority", `a.example"x`}, "RST_STREAM PROTOCOL_ERROR"},
		{"host with a quote", []string{"host", "a.example\"x"}, "RST_STREAM PROTOCOL_ERROR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := served.Load()
			rc := dial()
			defer rc.c.Close()
			rc.headers(1, true, append(append([]string(nil), base...), tt.fields...)...)
			if got := rc.answer(1); got != tt.want {
				t.Fatalf("%s, want %s", got, tt.want)
			}
			if tt.want[0] == 'R' {
				if n := served.Load() - before; n != 0 {
					t.Fatalf("the handler ran %d times for a malformed request", n)
				}
				// A stream error: the connection still serves.
				rc.headers(3, true, append(append([]string(nil), base...), ":authority", "a.example")...)
				if got := rc.answer(3); got != `200 a.example []` {
					t.Fatalf("the next stream: %s", got)
				}
			}
		})
	}
}
