package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// An operator whose NATS, or whose app behind a sidecar, presents a
// certificate from a private CA trusts that CA with SSL_CERT_FILE or
// SSL_CERT_DIR, which Go reads for the system roots on Linux
// (docs/config.md, bus.url): gatehouse has no flag of its own for it.
// Without them, `serve` and `host` say that the bus's (or the app's)
// certificate is not trusted, and how to trust it.
func TestPrivateCA(t *testing.T) {
	cert, caPEM := testutil.PrivateCA(t, "127.0.0.1")
	ns := testutil.StartBusTLS(t, cert)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "private app")
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	up.StartTLS()
	t.Cleanup(up.Close)
	busURL := fmt.Sprintf("tls://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	caDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{caFile, filepath.Join(caDir, "ca.pem")} {
		if err := os.WriteFile(f, caPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(dir, "host.pem")
	gatehouse(t, "keygen", "-out", keyFile)

	for _, tc := range []struct {
		name    string
		env     []string // on top of ours, without SSL_CERT_*
		trusted bool
	}{
		{"SSL_CERT_FILE", []string{"SSL_CERT_FILE=" + caFile}, true},
		{"SSL_CERT_DIR", []string{"SSL_CERT_DIR=" + filepath.Join(dir, "none") + ":" + caDir}, true},
		{"system roots", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := append(withoutCertVars(childEnv()), tc.env...)
			hostID := "ca-" + strings.ToLower(strings.NewReplacer("_", "-", " ", "-").Replace(tc.name))
			a := freeAddrs(t, 3)
			gw := startEnv(t, "gatehouse serve", env,
				"serve", "-data", t.TempDir(), "-zone", zone, "-cluster", cluster, "-control-token", token,
				"-http", a[0], "-https", "", "-dns", "", "-management", a[1], "-bus", busURL)
			sc := startEnv(t, "gatehouse host", env,
				"host", "-bus", busURL, "-cluster", cluster, "-id", hostID, "-key", keyFile,
				"-app", app, "-addr", a[2], "-upstream", up.URL)
			began := time.Now()
			if tc.trusted {
				testutil.WaitFor(t, 20*time.Second, func() bool {
					return gw.exited() || get(t, "http://"+a[1]+"/readyz") == http.StatusOK
				}, "gateway /readyz not 200")
				if v := busConnected(t, a[1]); v != "1" {
					t.Errorf("gatehouse_bus_connected %q, want 1", v)
				}
				testutil.WaitFor(t, 10*time.Second, func() bool {
					return sc.exited() || hasClient(t, ns, "gatehouse host "+hostID)
				}, "the sidecar is not connected to the bus")
				if gw.exited() || sc.exited() {
					t.Fatal("a process exited")
				}
				t.Logf("gateway ready and sidecar connected in %s", time.Since(began).Round(time.Millisecond))
				if code, body := getBody(t, "http://"+a[2]+"/"); code != http.StatusOK || body != "private app" {
					t.Errorf("through the sidecar: %d %q, want 200 from the app", code, body)
				}
				return
			}
			// Each says so at its first attempt, not after its 10 s
			// "waiting for the bus".
			for _, p := range []*proc{gw, sc} {
				testutil.WaitFor(t, 5*time.Second, func() bool {
					out := p.out.String()
					return strings.Contains(out, "certificate signed by unknown authority") && strings.Contains(out, "SSL_CERT_FILE")
				}, p.name+" does not say the bus's certificate is not trusted, naming SSL_CERT_FILE")
			}
			t.Logf("after %s:\n%s\n%s", time.Since(began).Round(time.Millisecond), gw.out.lastLines(1), sc.out.lastLines(1))
			if v := busConnected(t, a[1]); v != "0" {
				t.Errorf("gatehouse_bus_connected %q, want 0", v)
			}
			if hasClient(t, ns, "gatehouse host "+hostID) {
				t.Error("the sidecar is connected to a bus it cannot trust")
			}
			if code, _ := getBody(t, "http://"+a[2]+"/"); code != http.StatusBadGateway {
				t.Errorf("through the sidecar: %d, want 502", code)
			}
			// The line comes through a pipe, after the answer may have.
			testutil.WaitFor(t, 5*time.Second, func() bool {
				return slices.ContainsFunc(strings.Split(sc.out.String(), "\n"), func(l string) bool {
					return strings.Contains(l, "host: upstream failed") && strings.Contains(l, "certificate signed by unknown authority") &&
						strings.Contains(l, "the upstream's certificate is not signed by a CA") && strings.Contains(l, "SSL_CERT_FILE")
				})
			}, "the sidecar does not say the app's certificate is not trusted, naming SSL_CERT_FILE")
		})
	}
}

// withoutCertVars is env without SSL_CERT_FILE and SSL_CERT_DIR, which
// the machine running the tests may set.
func withoutCertVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SSL_CERT_FILE=") && !strings.HasPrefix(kv, "SSL_CERT_DIR=") {
			out = append(out, kv)
		}
	}
	return out
}

// busConnected is the gatehouse_bus_connected sample of the gateway whose
// management listener is mgmt, or "" if it could not be read.
func busConnected(t *testing.T, mgmt string) string {
	resp, err := http.Get("http://" + mgmt + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "gatehouse_bus_connected "); ok {
			return v
		}
	}
	return ""
}

// getBody returns the status and body of a GET to url, 0 if it could not
// be sent.
func getBody(t *testing.T, url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		t.Logf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// hasClient reports whether ns has a client connection named name.
func hasClient(t *testing.T, ns *server.Server, name string) bool {
	cz, err := ns.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			return true
		}
	}
	return false
}
