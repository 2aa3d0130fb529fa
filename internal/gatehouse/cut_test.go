package gatehouse

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// upgradeEcho is a host that answers an upgrade with 101 and then echoes
// each line, prefixed, on the upgraded connection.
var upgradeEcho = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", "test")
	w.WriteHeader(http.StatusSwitchingProtocols)
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString("echo:" + line)
		brw.Flush()
	}
})

// longConn is a client's long-lived connection through the gateway: an
// upgraded one, or a passthrough pipe carrying HTTP/1.1 to its host.
type longConn struct {
	c        net.Conn
	br       *bufio.Reader
	exchange func(lc *longConn) (string, error) // one round trip
}

func (lc *longConn) works(t *testing.T, what string) {
	t.Helper()
	lc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := lc.exchange(lc); err != nil {
		t.Fatalf("%s: %v (%q)", what, err, got)
	}
}

// closed waits, bounded, for the gateway to close lc.
func (lc *longConn) closed(t *testing.T, what string) {
	t.Helper()
	lc.c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, lc.br)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: still open 5s after it was taken out of service", what)
	}
}

func openUpgrade(t *testing.T, r *running, app string) *longConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.g.Addrs().HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: "+app+".test.local\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade %s: %v %v", app, resp, err)
	}
	lc := &longConn{c: c, br: br, exchange: func(lc *longConn) (string, error) {
		io.WriteString(lc.c, "ping\n")
		line, err := lc.br.ReadString('\n')
		if err == nil && line != "echo:ping\n" {
			err = io.ErrUnexpectedEOF
		}
		return line, err
	}}
	lc.works(t, "new upgraded connection to "+app)
	return lc
}

func openPipe(t *testing.T, r *running, app string, cfg *tls.Config) *longConn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.g.Addrs().HTTPS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lc := &longConn{c: c, br: bufio.NewReader(c), exchange: func(lc *longConn) (string, error) {
		io.WriteString(lc.c, "GET / HTTP/1.1\r\nHost: "+app+".test.local\r\n\r\n")
		resp, err := http.ReadResponse(lc.br, nil)
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && string(b) != "host of "+app {
			err = io.ErrUnexpectedEOF
		}
		return string(b), err
	}}
	lc.works(t, "new pipe to "+app)
	return lc
}

// Through the whole assembly: suspending an app through the control API
// closes its upgraded connections, and revoking a host's enrolment
// closes the passthrough pipes open to it, each within seconds; the
// connections of other apps and hosts, and of an app whose rate limit
// changed meanwhile, carry on. Each event is logged once with its count.
func TestOutOfServiceClosesLongConnections(t *testing.T) {
	r, logs := startLogging(t, testConfig(t))
	for app, body := range map[string]string{"keep": `{}`, "gone": `{}`, "vault": `{"mode":"passthrough"}`, "safe": `{"mode":"passthrough"}`} {
		if code, b := r.control(t, "PUT", "/api/v3/apps/"+app, body); code != 200 {
			t.Fatalf("put %s: %d %s", app, code, b)
		}
	}
	startHost(t, r, "keep-1", "keep", upgradeEcho)
	startHost(t, r, "gone-1", "gone", upgradeEcho)
	pipeCfg := map[string]*tls.Config{}
	for _, app := range []string{"vault", "safe"} {
		cert, pool := testutil.SelfSigned(t, app+".test.local")
		pipeCfg[app] = &tls.Config{ServerName: app + ".test.local", RootCAs: pool}
		body := "host of " + app
		startTLSHost(t, r, app+"-1", app, cert, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		tbl := r.g.Live().Load()
		return len(tbl.Pool("keep")) == 1 && len(tbl.Pool("gone")) == 1 && len(tbl.Pool("vault")) == 1 && len(tbl.Pool("safe")) == 1
	}, "hosts not routable")

	keep := openUpgrade(t, r, "keep")
	gone := openUpgrade(t, r, "gone")
	vault := openPipe(t, r, "vault", pipeCfg["vault"])
	safe := openPipe(t, r, "safe", pipeCfg["safe"])

	// An edit that keeps the app serving keeps its connections.
	if code, b := r.control(t, "PUT", "/api/v3/apps/keep", `{"rate_limit":{"requests":1000,"window":"60s"}}`); code != 200 {
		t.Fatalf("edit keep: %d %s", code, b)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return r.g.Live().Load().App("keep").RateLimit.Requests == 1000 }, "edit not in the table")

	if code, b := r.control(t, "PUT", "/api/v3/apps/gone", `{"status":"suspended"}`); code != 200 {
		t.Fatalf("suspend: %d %s", code, b)
	}
	gone.closed(t, "an upgraded connection of a suspended app")
	keep.works(t, "an upgraded connection of another app")
	vault.works(t, "a pipe of another app")

	if code, b := r.control(t, "DELETE", "/api/v3/hosts/keys/vault-1", ""); code != 200 && code != 204 {
		t.Fatalf("revoke: %d %s", code, b)
	}
	vault.closed(t, "a pipe to a revoked host")
	safe.works(t, "a pipe to another host")
	keep.works(t, "an upgraded connection of an app whose rate limit changed, after three sweeps")

	testutil.WaitFor(t, 5*time.Second, func() bool {
		l := logs.String()
		return strings.Contains(l, `"msg":"connections closed: app out of service","app":"gone","reason":"suspended","connections":1`) &&
			strings.Contains(l, `"msg":"connections closed: host out of service","host_id":"vault-1","reason":"revoked","connections":1`)
	}, "cuts not logged")
}
