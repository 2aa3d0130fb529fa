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

// BenchmarkLimiterFull counts a response for a new source against a full
// table of 10,000 buckets, none at rest: each makes room by weighing
// evictSample buckets, a cost that must not grow with the table.
func BenchmarkLimiterFull(b *testing.B) {
	l, _ := testLimiter(maxRateLimit, 2)
	l.max = 10000
	for i := range l.max {
		l.check(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), kindAnswer, mdns.TypeA, "www.apps.example.com")
	}
	l.check(netip.MustParseAddr("192.0.2.1"), kindAnswer, mdns.TypeA, "www.apps.example.com") // the sweep, once
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		if v := l.check(netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)}), kindAnswer, mdns.TypeA, "www.apps.example.com"); v != send {
			b.Fatalf("verdict %v", v)
		}
	}
	if len(l.table) > l.max {
		b.Fatalf("table holds %d, past %d", len(l.table), l.max)
	}
}
