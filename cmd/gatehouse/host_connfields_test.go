package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// rawAppTLS is rawApp over TLS with cert, for an https:// upstream.
func rawAppTLS(t *testing.T, raw string, cert tls.Certificate) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.ServeConns(t, tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}), func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.WriteString(c, raw)
			c.(*tls.Conn).CloseWrite()
			io.Copy(io.Discard, c)
		}
	})
	return &url.URL{Scheme: "https", Host: ln.Addr().String()}
}

// The fields the app's Connection names are its connection's (RFC 9110
// §7.6.1) and never reach the gateway, also when the Connection says
// close: net/http's client drops such a Connection whole as it reads the
// head, so ReverseProxy never saw the names, and X-Foo: secret went on
// to the gateway. An interim (1xx) answer's, an obs-folded list's and an
// https app's alike.
func TestSidecarDropsWhatAClosingConnectionNames(t *testing.T) {
	const final = "HTTP/1.1 200 OK\r\nConnection: close, X-Foo\r\nX-Foo: secret\r\nX-App: kept\r\nContent-Length: 2\r\n\r\nok"
	cert, roots := testutil.SelfSigned(t, "127.0.0.1")
	for _, tc := range []struct {
		name    string
		raw     string
		tls     bool
		interim int // 1xx answers the client gets, each with Link alone
	}{
		{"final answer", final, false, 0},
		{"folded list", "HTTP/1.1 200 OK\r\nConnection: close,\r\n X-Foo\r\nX-Foo: secret\r\nX-App: kept\r\nContent-Length: 2\r\n\r\nok", false, 0},
		{"after a 103", "HTTP/1.1 103 Early Hints\r\nConnection: close, X-Hint\r\nX-Hint: secret\r\nLink: </a.css>; rel=preload\r\n\r\n" + final, false, 1},
		{"https app", "HTTP/1.1 103 Early Hints\r\nConnection: close, X-Hint\r\nX-Hint: secret\r\nLink: </a.css>; rel=preload\r\n\r\n" + final, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var up *url.URL
			var pool *x509.CertPool
			if tc.tls {
				up, pool = rawAppTLS(t, tc.raw, cert), roots
			} else {
				up = rawApp(t, tc.raw)
			}
			side := httptest.NewServer(sidecarProxyTrusting(up, "", pool, slog.New(slog.DiscardHandler)))
			defer side.Close()
			var interim []textproto.MIMEHeader
			ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					interim = append(interim, h)
					return nil
				},
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", side.URL+"/", nil)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("%d %q, want the app's 200 ok", res.StatusCode, b)
			}
			if v, ok := res.Header["X-Foo"]; ok || res.Header.Get("X-App") != "kept" {
				t.Errorf("the client got X-Foo %q, X-App %q: want X-Foo, which the app's Connection named, gone and X-App kept", v, res.Header.Get("X-App"))
			}
			if len(interim) != tc.interim {
				t.Fatalf("%d interim answers, want %d", len(interim), tc.interim)
			}
			for _, h := range interim {
				if v, ok := h["X-Hint"]; ok || h.Get("Link") == "" {
					t.Errorf("the 103 reached the client with X-Hint %q, Link %q: want X-Hint, which its Connection named, gone", v, h.Get("Link"))
				}
			}
		})
	}
}

// The names one answer's Connection lists are that answer's alone: on a
// connection the sidecar keeps, the next answer's field of that name
// reaches the gateway, and an app that speaks HTTP/2 over TLS is still
// spoken to so.
func TestSidecarConnectionNamesPerAnswer(t *testing.T) {
	t.Run("kept connection", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		testutil.ServeConns(t, ln, func(c net.Conn) {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			for i := 0; i < 2; i++ {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				if i == 0 {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: X-Foo\r\nX-Foo: one\r\nContent-Length: 1\r\n\r\n1")
				} else {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Foo: two\r\nContent-Length: 1\r\n\r\n2")
				}
			}
		})
		side := httptest.NewServer(sidecarProxy(&url.URL{Scheme: "http", Host: ln.Addr().String()}, "", slog.New(slog.DiscardHandler)))
		defer side.Close()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		for i, want := range []string{"", "two"} {
			res, err := cl.Get(side.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if got := res.Header.Get("X-Foo"); res.StatusCode != 200 || got != want || string(b) != []string{"1", "2"}[i] {
				t.Errorf("answer %d: %d %q, X-Foo %q, want X-Foo %q", i+1, res.StatusCode, b, got, want)
			}
		}
	})
	t.Run("https app speaking HTTP/2", func(t *testing.T) {
		app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.Proto)
		}))
		app.EnableHTTP2 = true
		app.StartTLS()
		defer app.Close()
		up, _ := url.Parse(app.URL)
		side := httptest.NewServer(sidecarProxyTrusting(up, "", app.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, slog.New(slog.DiscardHandler)))
		defer side.Close()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(side.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(string(b), "HTTP/2") {
			t.Errorf("the app was spoken to as %d %q, want HTTP/2.0", res.StatusCode, b)
		}
	})
}

// TestNamesConnNotesConnectionNames: the names each response head's
// Connection lists are noted however the reads split the bytes, the 1xx
// heads' apart from the final one's, an obs-fold included, a body never
// scanned (a line in it that looks like a field), and nothing from bytes
// that are no head as net/http's client reads one.
func TestNamesConnNotesConnectionNames(t *testing.T) {
	tests := []struct {
		name, in string
		status   int
		final    []string
		interim  [][]string
	}{
		{"close and a name", "HTTP/1.1 200 OK\r\nConnection: close, x-foo\r\nContent-Length: 20\r\n\r\nConnection: x-body\r\n",
			200, []string{"Close", "X-Foo"}, nil},
		{"two fields and a fold", "HTTP/1.1 404 No\r\nConnection: close\r\nX-A: 1\r\nconnection: X-B,\r\n X-C\r\n\r\n",
			404, []string{"Close", "X-B", "X-C"}, nil},
		{"1xx first", "HTTP/1.1 103 Hints\r\nConnection: close, X-Hint\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No\nConnection: close, X-Foo\n\n",
			204, []string{"Close", "X-Foo"}, [][]string{{"Close", "X-Hint"}, nil}},
		{"no connection", "HTTP/1.1 200 OK\r\nX-Foo: 1\r\n\r\n", 200, nil, nil},
		{"a space before the colon", "HTTP/1.1 200 OK\r\nConnection : X-Foo\r\n\r\n", 200, nil, nil},
		{"no head", "HTTP/2 200\r\nConnection: close, X-Foo\r\n\r\n", 200, nil, nil},
		{"no version", "HTTP/x.1 200\r\nConnection: close, X-Foo\r\n\r\n", 200, nil, nil},
		{"spaces before the code", "HTTP/1.1   200\r\nConnection: close, X-Foo\r\n\r\n", 200, []string{"Close", "X-Foo"}, nil},
		{"no code", "HTTP/1.1 20 OK\r\nConnection: close, X-Foo\r\n\r\n", 20, nil, nil},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 2, 7, len(tt.in)} {
			c := new(namesConn)
			f := c.begin()
			for b := []byte(tt.in); len(b) > 0; {
				n := min(size, len(b))
				c.scan(b[:n])
				b = b[n:]
			}
			for i, want := range tt.interim {
				if got := f.take1xx(); !slices.Equal(got, want) {
					t.Errorf("%s, reads of %d: 1xx %d names %q, want %q", tt.name, size, i, got, want)
				}
			}
			if got := f.take1xx(); got != nil {
				t.Errorf("%s, reads of %d: a 1xx too many, %q", tt.name, size, got)
			}
			if got := f.final(tt.status); !slices.Equal(got, tt.final) {
				t.Errorf("%s, reads of %d: final names %q, want %q", tt.name, size, got, tt.final)
			}
			if got := f.final(tt.status + 1); got != nil {
				t.Errorf("%s, reads of %d: names %q for another status", tt.name, size, got)
			}
		}
	}
}

// An https app whose certificate a CA the sidecar does not trust signed
// is logged with the way out (the sidecar's own TLS dial keeps the
// handshake's error as it is): a 502 problem to the gateway.
func TestSidecarUpstreamUntrustedCASaysHowToTrustIt(t *testing.T) {
	cert, _ := testutil.PrivateCA(t, "127.0.0.1")
	up := rawAppTLS(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", cert)
	var log testutil.SyncBuffer
	side := httptest.NewServer(sidecarProxy(up, "", slog.New(slog.NewJSONHandler(&log, nil))))
	defer side.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(side.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("%d, want 502", res.StatusCode)
	}
	for _, want := range []string{`"msg":"host: upstream failed"`, "certificate signed by unknown authority", "the upstream's certificate is not signed by a CA this process trusts", "SSL_CERT_FILE"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
}

// A tunnel (a 101) through the sidecar half-closes as the gateway's end
// does: once the client has sent all it will, the app sees its end of
// input and may still answer. The sidecar's connections to the app are
// wrapped (namesConn), and ReverseProxy half-closes the app's side
// through that wrapper's CloseWrite; without one it took the half-close
// for a failure and tore the tunnel down, and the app's answer was lost.
func TestSidecarTunnelHalfCloses(t *testing.T) {
	cert, roots := testutil.SelfSigned(t, "127.0.0.1")
	// The app: after the 101, everything until the sidecar's half-close,
	// then its answer to it.
	app := func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		got, err := io.ReadAll(br)
		if err != nil {
			return
		}
		io.WriteString(c, "after your end: "+string(got))
	}
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"http app", false}, {"https app", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			up := &url.URL{Scheme: "http", Host: ln.Addr().String()}
			var pool *x509.CertPool
			if tc.tls {
				ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
				up.Scheme, pool = "https", roots
			}
			testutil.ServeConns(t, ln, app)
			side := httptest.NewServer(sidecarProxyTrusting(up, "", pool, slog.New(slog.DiscardHandler)))
			defer side.Close()
			c, err := net.Dial("tcp", side.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("%d, want the app's 101", res.StatusCode)
			}
			io.WriteString(c, "ping")
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(br); string(b) != "after your end: ping" {
				t.Errorf("after the client's half-close the tunnel gave %q, want the app's %q", b, "after your end: ping")
			}
		})
	}
}

// The sidecar's TLS dial to an https app says what timed out, as
// net/http's own handshake did ("TLS handshake timeout"): an app that
// accepts and never answers the ClientHello was logged as a bare
// "context deadline exceeded", naming neither TLS nor the app. It is a
// timeout still (a net.Error). A zero bound is none, as the transport's
// TLSHandshakeTimeout documents, not a handshake failed at once.
func TestNamesDialTLSHandshakeBound(t *testing.T) {
	cert, roots := testutil.SelfSigned(t, "127.0.0.1")
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.ServeConns(t, silent, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c) // takes the ClientHello, answers nothing
	})
	app := httptest.NewUnstartedServer(http.NotFoundHandler())
	app.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	app.StartTLS()
	defer app.Close()
	d := &net.Dialer{Timeout: 5 * time.Second}
	conf := &tls.Config{RootCAs: roots}

	t.Run("silent app", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		c, err := namesDialTLS(d.DialContext, conf, 100*time.Millisecond)(ctx, "tcp", silent.Addr().String())
		if err == nil {
			c.Close()
			t.Fatal("a handshake nobody answered succeeded")
		}
		var ne net.Error
		if !strings.Contains(err.Error(), "TLS handshake timeout") || !strings.Contains(err.Error(), silent.Addr().String()) ||
			!errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("err %q, want a timeout naming the TLS handshake and the app's address", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the handshake gave up after %s, want about its 100ms bound", d)
		}
	})
	t.Run("no bound", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		c, err := namesDialTLS(d.DialContext, conf, 0)(ctx, "tcp", app.Listener.Addr().String())
		if err != nil {
			t.Fatalf("with no bound: %v, want the handshake made", err)
		}
		c.Close()
	})
}
