package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	mdns "github.com/miekg/dns"
)

// replyCounter is a ResponseWriter for a UDP source that counts the
// replies written and packs none: the reply path without the write.
type replyCounter struct {
	remote  *net.UDPAddr
	written int
}

func (w *replyCounter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w *replyCounter) RemoteAddr() net.Addr        { return w.remote }
func (w *replyCounter) WriteMsg(*mdns.Msg) error    { w.written++; return nil }
func (w *replyCounter) Write(b []byte) (int, error) { w.written++; return len(b), nil }
func (w *replyCounter) Close() error                { return nil }
func (w *replyCounter) TsigStatus() error           { return nil }
func (w *replyCounter) TsigTimersOnly(bool)         {}
func (w *replyCounter) Hijack()                     {}

// BenchmarkServeLimitedUDP answers a UDP question from a rate limited
// source (recursion on, for other networks), under the limit: the
// handler's whole path, the zone lookup and the limiter's count
// included, but for packing the reply. One zone, and 1,000 (the
// question's the last): the zone lookup reads them all.
func BenchmarkServeLimitedUDP(b *testing.B) {
	fwd, err := NewForwarder(ForwarderOptions{Upstreams: []string{"192.0.2.53:53"}}) // never asked
	if err != nil {
		b.Fatal(err)
	}
	for _, nz := range []int{1, 1000} {
		var zones []Zone
		for i := range nz {
			zones = append(zones, Zone{Name: fmt.Sprintf("z%d.example.com", i), Gateways: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
				Records: []Record{{Name: fmt.Sprintf("www.z%d.example.com", i), Type: "A", Values: []string{"192.0.2.1"}}}})
		}
		zones = indexed(zones)
		last := fmt.Sprintf("z%d.example.com.", nz-1)
		for _, name := range []string{"www." + last, "app." + last} {
			b.Run(fmt.Sprintf("zones=%d/%s", nz, name[:3]), func(b *testing.B) {
				s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return zones }, RateLimit: maxRateLimit,
					Forwarder: fwd, RecursionAllow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}})
				if err != nil {
					b.Fatal(err)
				}
				var clock atomic.Int64
				s.rrl.now = clock.Load
				w := &replyCounter{remote: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5353}}
				req := new(mdns.Msg)
				req.SetQuestion(name, mdns.TypeA)
				req.SetEdns0(1232, false)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					clock.Add(s.rrl.interval) // one response's worth a response: never over
					s.serve(ctx, w, req)
				}
				if w.written != b.N {
					b.Fatalf("%d replies to %d queries", w.written, b.N)
				}
			})
		}
	}
}
