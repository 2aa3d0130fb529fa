package gatehouse

import (
	"net"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// TestDNSRateLimit: dns.rate_limit and dns.rate_limit_slip reach the DNS
// server. Over UDP the same answer to one source is sent rate_limit
// times (1), then truncated, then dropped (slip 2), each counted in
// gatehouse_dns_rate_limited_total; over TCP it is always answered.
func TestDNSRateLimit(t *testing.T) {
	cfg := testConfig(t)
	// One a second: the three queries below, over the limit from the
	// second on, have a whole second to be answered in.
	cfg.DNS.RateLimit, cfg.DNS.RateLimitSlip = 1, 2
	r := start(t, cfg)
	dnsAddr := r.g.Addrs().DNS

	c, err := net.Dial("udp", dnsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(mdns.Msg)
	q.SetQuestion("hello.test.local.", mdns.TypeA)
	send := func() {
		t.Helper()
		q.Id = mdns.Id()
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	read := func() *mdns.Msg {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		m := new(mdns.Msg)
		if err := m.Unpack(buf[:n]); err != nil || m.Id != q.Id {
			t.Fatalf("reply %v (id %d, want %d): %v", m, m.Id, q.Id, err)
		}
		return m
	}
	send()
	if m := read(); m.Truncated || len(m.Answer) != 1 {
		t.Fatalf("query 1, within the limit: %v", m)
	}
	send()
	if m := read(); !m.Truncated || len(m.Answer) != 0 || len(m.Question) != 1 {
		t.Fatalf("query 2, the first over the limit: %v, want TC and the question alone", m)
	}
	send() // dropped: nothing to read, but the counter says so
	want := []string{`gatehouse_dns_rate_limited_total{action="dropped"} 1`, `gatehouse_dns_rate_limited_total{action="truncated"} 1`}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, body := mgmtGet(t, r.g.Addrs().Management, "/metrics")
		got = got[:0]
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "gatehouse_dns_rate_limited_total{") {
				got = append(got, l)
			}
		}
		if strings.Join(got, "\n") == strings.Join(want, "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series %q, want %q", got, want)
		}
		time.Sleep(20 * time.Millisecond) // polling /metrics: no event to wait on
	}

	for i := range 4 {
		m, _, err := (&mdns.Client{Net: "tcp", Timeout: 10 * time.Second}).Exchange(q, dnsAddr)
		if err != nil || m.Truncated || len(m.Answer) != 1 {
			t.Fatalf("TCP query %d: %v %v", i+1, m, err)
		}
	}
}
