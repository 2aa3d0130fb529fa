package gatehouse

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// Through the whole assembly: a passthrough app's TLS reaches its host
// untouched (the client sees the host's own certificate), while an http
// app on the same listener is terminated by the gateway; a passthrough
// pipe left silent is closed after tls.passthrough_idle_timeout.
func TestHTTPSPassthroughAndTerminate(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	cfg := testConfig(t)
	cfg.TLS.PassthroughIdleTimeout = time.Second
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/vault", `{"mode":"passthrough"}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	if code, body := r.control(t, "PUT", "/api/v3/apps/web", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	cert, pool := testutil.SelfSigned(t, "vault.test.local")
	// The tls host answers the gateway's challenge over TLS with the same
	// certificate, and serves the app's own HTTPS.
	var vaultHits atomic.Int32
	startTLSHost(t, r, "vault-1", "vault", cert, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		vaultHits.Add(1)
		io.WriteString(w, "plaintext only the host saw")
	}))
	startHost(t, r, "web-1", "web", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "terminated") }))
	testutil.WaitFor(t, 5*time.Second, func() bool {
		tbl := r.g.Live().Load()
		return len(tbl.Pool("vault")) == 1 && len(tbl.Pool("web")) == 1
	}, "hosts not routable")

	httpsAddr := r.g.Addrs().HTTPS
	get := func(name string, cfg *tls.Config) (*http.Response, string) {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: cfg, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, httpsAddr)
		}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + name + "/")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	resp, body := get("vault.test.local", &tls.Config{RootCAs: pool})
	if body != "plaintext only the host saw" {
		t.Fatalf("passthrough body %q", body)
	}
	if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != "vault.test.local" {
		t.Fatalf("client saw certificate %q, not the host's", got)
	}

	resp, body = get("web.test.local", &tls.Config{InsecureSkipVerify: true}) // the bootstrap certificate is self-issued
	if body != "terminated" || resp.Header.Get("X-Gatehouse-Cluster") != "one" {
		t.Fatalf("terminated: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp.TLS.PeerCertificates[0].Equal(cert.Leaf) || resp.TLS.PeerCertificates[0].Subject.CommonName == "vault.test.local" {
		t.Fatal("the gateway served the passthrough host's certificate")
	}

	// The passthrough app's name on a connection the gateway terminated for
	// web (a client reusing a connection, HTTP/1.1 or HTTP/2): 421, and
	// neither its host nor any other saw the request or its cookie.
	hits := vaultHits.Load()
	for _, proto := range []string{"http/1.1", "h2"} {
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{ServerName: "web.test.local", InsecureSkipVerify: true, NextProtos: []string{proto}},
			ForceAttemptHTTP2: proto == "h2",
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, httpsAddr)
			},
		}
		req, _ := http.NewRequest(http.MethodGet, "https://web.test.local/", nil)
		req.Host = "vault.test.local"
		req.Header.Set("Cookie", "session=vault-secret")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s: vault's Host on web's connection = %d %q, want 421 problem+json", proto, resp.StatusCode, b)
		}
		if got := resp.Proto; (proto == "h2") != (got == "HTTP/2.0") {
			t.Fatalf("%s: answered over %s", proto, got)
		}
	}
	if vaultHits.Load() != hits {
		t.Fatal("the passthrough host saw a request the gateway terminated")
	}
	// Its own connection still reaches the host.
	if _, body := get("vault.test.local", &tls.Config{RootCAs: pool}); body != "plaintext only the host saw" {
		t.Fatalf("passthrough after the 421s: %q", body)
	}

	// A pipe that carries nothing is closed once the idle timeout passes.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", httpsAddr, &tls.Config{ServerName: "vault.test.local", RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silent passthrough pipe: read = %v after %v, want it closed", err, time.Since(start))
	}
}

// startTLSHost runs a host with scheme tls: it terminates TLS itself, for
// the gateway's challenge and for its app's clients alike.
func startTLSHost(t *testing.T, r *running, id, app string, cert tls.Certificate, h http.Handler) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	runHost(t, r, "one", id, app, "tls", ln, h)
}

// Desync framings are refused on the https listener too, with a 400
// problem and a closed connection, whether the lane reads the connection
// first or net/http alone does (DESIGN §2 step 4), as is a head net/http
// refuses itself; an honest chunked request still
// reaches the host, which sees it came over TLS.
func TestFramingRefusedOnHTTPSListener(t *testing.T) {
	for _, fastPath := range []bool{true, false} {
		t.Run(map[bool]string{true: "lane", false: "net/http"}[fastPath], func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Listeners.FastPath = fastPath
			r := start(t, cfg)
			if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
				t.Fatalf("put: %d %s", code, body)
			}
			seen := make(chan string, 8)
			startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				b, _ := io.ReadAll(req.Body)
				seen <- req.Method + " " + req.URL.Path + " " + string(b) + " " + req.Header.Get("X-Forwarded-Proto")
			}))
			testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")
			exchange := func(raw string) string {
				t.Helper()
				c, err := tls.Dial("tcp", r.g.Addrs().HTTPS, &tls.Config{
					ServerName: "hello.test.local", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, raw)
				b, _ := io.ReadAll(c) // the gateway closes the connection
				return string(b)
			}
			for _, raw := range []string{
				"POST /smuggle HTTP/1.1\r\nHost: hello.test.local\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
				"POST /smuggle HTTP/1.1\r\nHost: hello.test.local\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
				"POST /smuggle HTTP/1.1\r\nHost: hello.test.local\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
				"GET /smuggle HTTP/1.1\r\nHost: hello.test.local bad\r\n\r\n", // net/http refuses it itself
			} {
				if out := exchange(raw); !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "Content-Type: application/problem+json") {
					t.Errorf("%q: got %q, want a 400 problem", raw, out)
				}
			}
			select {
			case s := <-seen:
				t.Fatalf("the host saw %s", s)
			default:
			}
			out := exchange("POST /honest HTTP/1.1\r\nHost: hello.test.local\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nbody\r\n0\r\n\r\n")
			if !strings.HasPrefix(out, "HTTP/1.1 200") {
				t.Fatalf("honest chunked request: %q", out)
			}
			if s := <-seen; s != "POST /honest body https" {
				t.Fatalf("the host saw %q", s)
			}
		})
	}
}
