package dns

import (
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// BenchmarkLimiterCheck counts one UDP response, for a name in the
// question's case, against a table of 10,000 buckets: the cost every UDP
// reply adds, under the limit (sent) and over it (limited). It must not
// allocate.
func BenchmarkLimiterCheck(b *testing.B) {
	for _, over := range []bool{false, true} {
		name := "sent"
		if over {
			name = "limited"
		}
		b.Run(name, func(b *testing.B) {
			l, clock := testLimiter(maxRateLimit, 2)
			for i := range 10000 {
				l.check(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), kindAnswer, mdns.TypeA, "www.apps.example.com")
			}
			src := netip.MustParseAddr("192.0.2.1")
			for range maxRateLimit {
				l.check(src, kindAnswer, mdns.TypeA, "www.apps.example.com")
			}
			b.ReportAllocs()
			for b.Loop() {
				if !over {
					clock.Add(l.interval) // one response's worth a response
				}
				if v := l.check(src, kindAnswer, mdns.TypeA, "wWw.Apps.Example.com"); (v == send) == over {
					b.Fatalf("verdict %v", v)
				}
			}
		})
	}
}
