package dns

import (
	"net"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// BenchmarkScreenThenUnpack is what a well-formed UDP query costs before
// the handler sees it: screen's look at it ([Server.reject]), then
// miekg/dns's unpack, which every query the handler answers goes
// through. From a rate limited source ("limited"), and from one that may
// recurse and is not limited ("exempt"); a query without EDNS, with an
// OPT alone, and with the OPT and a DNS COOKIE, as BIND and Unbound send.
func BenchmarkScreenThenUnpack(b *testing.B) {
	fwd, err := NewForwarder(ForwarderOptions{Upstreams: []string{"192.0.2.53:53"}}) // never asked
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }, RateLimit: maxRateLimit,
		Forwarder: fwd, RecursionAllow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		b.Fatal(err)
	}
	queries := []struct {
		name string
		edit func(*mdns.Msg)
	}{
		{"plain", func(*mdns.Msg) {}},
		{"edns", func(q *mdns.Msg) { q.SetEdns0(1232, false) }},
		{"cookie", func(q *mdns.Msg) {
			q.SetEdns0(1232, true)
			o := q.IsEdns0()
			o.Option = append(o.Option, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		}},
	}
	for _, src := range []struct {
		name string
		from *net.UDPAddr
	}{{"limited", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5353}}, {"exempt", &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5353}}} {
		for _, qq := range queries {
			b.Run(src.name+"/"+qq.name, func(b *testing.B) {
				q := new(mdns.Msg)
				q.SetQuestion("www.apps.example.com.", mdns.TypeA)
				qq.edit(q)
				m, err := q.Pack()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if s.reject(m, src.from) != nil {
						b.Fatal("screen answered a well-formed query")
					}
					if err := new(mdns.Msg).Unpack(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
