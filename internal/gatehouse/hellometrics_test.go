package gatehouse

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestHelloOutcomesOnMetrics: the https listener's hellos are counted on
// the gateway's /metrics by outcome, and every outcome is there from the
// start, at 0, for an alert written before the first one.
func TestHelloOutcomesOnMetrics(t *testing.T) {
	r := start(t, testConfig(t))
	addrs := r.g.Addrs()
	if _, m := mgmtGet(t, addrs.Management, "/metrics"); !strings.Contains(m, `gatehouse_tls_hellos_total{outcome="timeout"} 0`+"\n") {
		t.Fatalf("/metrics lacks the timeout outcome at 0")
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addrs.HTTPS, &tls.Config{ServerName: "web.test.local", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	raw, err := net.DialTimeout("tcp", addrs.HTTPS, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(raw, "GET / HTTP/1.1\r\nHost: web.test.local\r\n\r\n")
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.Copy(io.Discard, raw)
	raw.Close()
	testutil.WaitFor(t, 5*time.Second, func() bool {
		_, m := mgmtGet(t, addrs.Management, "/metrics")
		return strings.Contains(m, `gatehouse_tls_hellos_total{outcome="ok"} 1`+"\n") &&
			strings.Contains(m, `gatehouse_tls_hellos_total{outcome="plain_http"} 1`+"\n")
	}, "/metrics lacks the ok and plain_http hellos")
}
