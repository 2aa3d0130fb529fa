package edge

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/problem"
)

// TestHTTPListenerAnswers: what the http listener answers itself is a
// problem (DESIGN §2: "Errors the gateway answers itself are RFC 9457
// application/problem+json bodies"): an ACME token it does not hold, the
// fixed 404 of acme-only, a Host redirect cannot use. And redirect sends
// a client that named the gateway by an IPv6 literal to https at that
// literal, as it does for an IPv4 one, but not one whose port is no port.
func TestHTTPListenerAnswers(t *testing.T) {
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		mode, host, path string
		status           int
		location         string // for 308; "" means a problem body
	}{
		{ModeRedirect, "web." + zone, acmePrefix + "unknown", 404, ""},
		{ModeACMEOnly, "web." + zone, acmePrefix + "unknown", 404, ""},
		{ModeServe, "web." + zone, acmePrefix + "unknown", 404, ""},
		{ModeACMEOnly, "web." + zone, "/a", 404, ""},
		{ModeRedirect, "bad_host." + zone, "/a", 400, ""},
		{ModeRedirect, "192.0.2.1", "/a?b", 308, "https://192.0.2.1:{port}/a?b"},
		{ModeRedirect, "[2001:db8::1]:80", "/a?b", 308, "https://[2001:db8::1]:{port}/a?b"},
		// A port that is not digits makes a malformed Host (RFC 9110
		// §7.2), for a name as for an address: nothing to redirect to.
		{ModeRedirect, "web." + zone + ":abc", "/a", 400, ""},
		{ModeRedirect, "192.0.2.1:abc", "/a", 400, ""},
		{ModeRedirect, "192.0.2.1:-1", "/a", 400, ""},
		{ModeRedirect, "[2001:db8::1]:abc", "/a", 400, ""},
		{ModeRedirect, "192.0.2.1:", "/a?b", 308, "https://192.0.2.1:{port}/a?b"},
	}
	for _, mode := range []string{ModeRedirect, ModeACMEOnly, ModeServe} {
		for _, withACME := range []bool{false, true} {
			opts := Options{HTTPMode: mode}
			if withACME {
				// What tlsmgr's HTTPHandler does with a token it does not hold.
				opts.ACME = func(next http.Handler) http.Handler { return next }
			}
			e := start(t, opts)
			_, port, _ := net.SplitHostPort(e.https)
			for _, tc := range cases {
				if tc.mode != mode {
					continue
				}
				req, _ := http.NewRequest("GET", "http://"+e.http+tc.path, nil)
				req.Host = tc.host
				resp, err := noRedirect.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Errorf("%s %s%s: %d %q, want %d", mode, tc.host, tc.path, resp.StatusCode, body, tc.status)
					continue
				}
				if tc.location != "" {
					want := strings.Replace(tc.location, "{port}", port, 1)
					if got := resp.Header.Get("Location"); got != want {
						t.Errorf("%s %s%s: Location %q, want %q", mode, tc.host, tc.path, got, want)
					}
					continue
				}
				if ct := resp.Header.Get("Content-Type"); ct != problem.ContentType {
					t.Errorf("%s %s%s: %d with %q %q, want a problem", mode, tc.host, tc.path, resp.StatusCode, ct, body)
				}
			}
		}
	}
}

// TestRedirectRefusesAsteriskForm: a request whose target is "*" (the
// asterisk form, for OPTIONS alone) has no path to redirect to; redirect
// answered it 308 to "https://{host}*".
func TestRedirectRefusesAsteriskForm(t *testing.T) {
	e := start(t, Options{HTTPMode: ModeRedirect})
	resp, _ := rawResponse(t, e.http, "GET * HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != problem.ContentType || resp.Header.Get("Location") != "" {
		t.Fatalf("GET *: %d, Location %q, Content-Type %q; want a 400 problem", resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Content-Type"))
	}
}

// TestAsteriskOnListenersWithoutChain: "OPTIONS *" on the http listener
// in redirect and acme-only modes and on the management listener is
// answered 200 with Allow and no body, naming the cluster as every answer
// does (DESIGN §5.2); net/http answered it itself, with no
// X-Gatehouse-Cluster. Other methods in asterisk form get a 400 problem,
// and a redirect names the cluster too.
func TestAsteriskOnListenersWithoutChain(t *testing.T) {
	exchange := func(t *testing.T, addr, req string) *http.Response {
		t.Helper()
		resp, body := rawResponse(t, addr, req)
		if resp.StatusCode == http.StatusOK && len(body) != 0 {
			t.Errorf("%q: body %q, want none", req, body)
		}
		return resp
	}
	for _, mode := range []string{ModeRedirect, ModeACMEOnly} {
		t.Run(mode, func(t *testing.T) {
			e := start(t, Options{HTTPMode: mode, Cluster: "eu-1"})
			for _, l := range []struct{ name, addr, allow string }{
				{"http", e.http, map[string]string{ModeRedirect: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", ModeACMEOnly: "GET, HEAD, OPTIONS"}[mode]},
				{"management", e.mgmt, "GET, HEAD, POST, PUT, DELETE, OPTIONS"},
			} {
				resp := exchange(t, l.addr, "OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n")
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Allow") != l.allow || resp.Header.Get("X-Gatehouse-Cluster") != "eu-1" {
					t.Errorf("%s OPTIONS *: %d, Allow %q, cluster %q; want 200, %q, eu-1", l.name, resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("X-Gatehouse-Cluster"), l.allow)
				}
				resp = exchange(t, l.addr, "GET * HTTP/1.1\r\nHost: localhost\r\n\r\n")
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != problem.ContentType || resp.Header.Get("X-Gatehouse-Cluster") != "eu-1" {
					t.Errorf("%s GET *: %d %q, cluster %q; want a 400 problem naming eu-1", l.name, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Gatehouse-Cluster"))
				}
			}
			resp := exchange(t, e.http, "GET /a HTTP/1.1\r\nHost: web."+zone+"\r\n\r\n")
			if want := map[string]int{ModeRedirect: 308, ModeACMEOnly: 404}[mode]; resp.StatusCode != want || resp.Header.Get("X-Gatehouse-Cluster") != "eu-1" {
				t.Errorf("GET /a: %d, cluster %q; want %d naming eu-1", resp.StatusCode, resp.Header.Get("X-Gatehouse-Cluster"), want)
			}
		})
	}
}
