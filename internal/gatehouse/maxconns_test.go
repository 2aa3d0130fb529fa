package gatehouse

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMaxConnectionsServed: with listeners.max_connections open, the next
// client connection is closed unanswered and counted on /metrics, while
// the open one and the management listener go on.
func TestMaxConnectionsServed(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listeners.MaxConnections = 1
	r := start(t, cfg)
	addr := r.g.Addrs().HTTP
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	ask := func() int {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /api/v3/discovery/clusters HTTP/1.1\r\nHost: api.test.local\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ask(); code != http.StatusOK {
		t.Fatalf("first connection: %d", code)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(over, "GET /api/v3/discovery/clusters HTTP/1.1\r\nHost: api.test.local\r\n\r\n")
	_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(over); len(b) > 0 || isTimeoutErr(err) {
		t.Fatalf("a connection over the cap: %q, %v; want closed unanswered", b, err)
	}
	over.Close()
	if code := ask(); code != http.StatusOK {
		t.Fatalf("the open connection after a refusal: %d", code)
	}
	if _, m := mgmtGet(t, r.g.Addrs().Management, "/metrics"); !strings.Contains(m, "gatehouse_connections_refused_total 1\n") {
		t.Fatalf("/metrics lacks gatehouse_connections_refused_total 1")
	}
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestMaxConnections(t *testing.T) {
	limit, known := fileLimit()
	if !known {
		t.Skip("no file descriptor limit to read here")
	}
	if got, err := maxConnections(0, "listeners.max_connections"); err != nil || got <= 0 || uint64(got) > limit/4 {
		t.Errorf("auto: %d, %v; want a positive cap up to a quarter of the limit %d", got, err, limit)
	}
	if got, err := maxConnections(10, "listeners.max_connections"); err != nil || got != 10 {
		t.Errorf("set 10: %d, %v", got, err)
	}
	if limit < 1<<40 {
		_, err := maxConnections(int(limit), "listeners.max_connections")
		if err == nil || !strings.Contains(err.Error(), "listeners.max_connections") || !strings.Contains(err.Error(), "ulimit -n") {
			t.Errorf("set at the limit %d: err %v, want a refusal naming the key and ulimit", limit, err)
		}
	}
}

// TestMaxConnectionsPerSourceServed: listeners.max_connections_per_source
// reaches the listeners: with one connection open from an address, its
// next is closed unanswered and counted on /metrics, while another
// address and a trusted proxy (whose connections carry many clients) are
// served.
func TestMaxConnectionsPerSourceServed(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listeners.MaxConnectionsPerSource = 1
	cfg.TrustedProxies = []string{"127.0.0.3/32"}
	r := start(t, cfg)
	addr := r.g.Addrs().HTTP
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// ask sends a request and returns the status, or 0 for a connection
	// closed unanswered.
	ask := func(c net.Conn) int {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /api/v3/discovery/clusters HTTP/1.1\r\nHost: api.test.local\r\n\r\n"); err != nil {
			return 0
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if isTimeoutErr(err) {
			t.Fatal(err)
		}
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		from string
		want int
	}{
		{"127.0.0.1", http.StatusOK},
		{"127.0.0.1", 0},
		{"127.0.0.2", http.StatusOK},
		{"127.0.0.3", http.StatusOK},
		{"127.0.0.3", http.StatusOK},
	} {
		if got := ask(dial(c.from)); got != c.want {
			t.Fatalf("a connection from %s: %d, want %d (0: closed unanswered)", c.from, got, c.want)
		}
	}
	if _, m := mgmtGet(t, r.g.Addrs().Management, "/metrics"); !strings.Contains(m, "gatehouse_connections_refused_total 1\n") {
		t.Fatalf("/metrics lacks gatehouse_connections_refused_total 1")
	}
}
