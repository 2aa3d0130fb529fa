package gatehouse

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// An upgraded connection (a WebSocket) open when the gateway is told to
// stop keeps carrying bytes while the gateway drains (DESIGN §3: in-flight
// requests and pipes finish within drain_timeout), and Run returns once
// the client closes it, not at drain_timeout.
func TestDrainKeepsUpgradedConnection(t *testing.T) {
	cfg := testConfig(t)
	cfg.DrainTimeout = 20 * time.Second
	r := start(t, cfg)
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	startHost(t, r, "h1", "hello", upgradeEcho)
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")

	c, err := net.DialTimeout("tcp", r.g.Addrs().HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: hello.test.local\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	echo := func(s string) string {
		io.WriteString(c, s+"\n")
		line, err := br.ReadString('\n')
		if err != nil {
			return "error: " + err.Error()
		}
		return line
	}
	if got := echo("before"); got != "echo:before\n" {
		t.Fatalf("before the drain: %q", got)
	}

	r.cancel()
	mgmt := r.g.Addrs().Management
	testutil.WaitFor(t, 5*time.Second, func() bool {
		code, b := mgmtGet(t, mgmt, "/readyz")
		var v struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal([]byte(b), &v)
		return code == 503 && v.Status == "draining"
	}, "readyz not draining")
	if got := echo("during"); got != "echo:during\n" {
		t.Fatalf("during the drain: %q", got)
	}
	c.Close()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup's stop
	case <-time.After(10 * time.Second):
		t.Fatal("Run still draining 10s after the upgraded connection closed (drain_timeout 20s)")
	}
}
