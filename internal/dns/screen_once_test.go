package dns

import (
	"math"
	"net"
	"testing"

	mdns "github.com/miekg/dns"
)

// TestScreenLeavesWellFormedQueriesUnparsed: a well-formed query from a
// rate limited UDP source (the default) is unpacked once, by miekg/dns
// for the handler, not also by screen: as miekg/dns's client sends it
// (no EDNS, an OPT alone, an OPT with a DNS COOKIE, with padding, with an
// NSID request), screen reads it without allocating. What screen leaves
// to miekg/dns unread is checked against miekg/dns's own unpack
// (FuzzUnparsedAsMiekg).
//
// The query is the bytes miekg/dns's client writes to a UDP socket
// (Conn.WriteMsg: Msg.Pack), handed to screen directly: read off a
// loopback socket, it could be another process's datagram to a port
// freed a moment before, and a read deadline could pass on a loaded
// machine, failing the test for nothing.
//
// Not parallel: testing.AllocsPerRun refuses to run beside other tests.
func TestScreenLeavesWellFormedQueriesUnparsed(t *testing.T) {
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }, RateLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40053}
	if !s.limits(from) {
		t.Fatalf("%v is not rate limited", from)
	}
	withOpt := func(opts ...mdns.EDNS0) func(*mdns.Msg) {
		return func(q *mdns.Msg) {
			q.SetEdns0(1232, true)
			o := q.IsEdns0()
			o.Option = append(o.Option, opts...)
		}
	}
	for _, tt := range []struct {
		name string
		edit func(*mdns.Msg)
	}{
		{"no EDNS", func(*mdns.Msg) {}},
		{"OPT", withOpt()},
		{"OPT with COOKIE", withOpt(&mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0123456789abcdef"})},
		{"OPT with COOKIE, PADDING, NSID", withOpt(&mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0123456789abcdef0123456789abcdef"},
			&mdns.EDNS0_PADDING{Padding: make([]byte, 40)}, &mdns.EDNS0_NSID{Code: mdns.EDNS0NSID})},
	} {
		q := new(mdns.Msg)
		q.SetQuestion("www.apps.example.com.", mdns.TypeA)
		tt.edit(q)
		m, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if reply := s.reject(m, from); reply != nil {
			t.Errorf("%s: screen answers %x; want it left to the handler", tt.name, reply)
		}
		if allocs := leastAllocs(func() { s.reject(m, from) }); allocs != 0 {
			t.Errorf("%s: screen: %v allocations a query; want none: the query unpacked twice", tt.name, allocs)
		}
	}
}

// leastAllocs is f's allocations a call, as [testing.AllocsPerRun]
// counts them, the least of a few measurements. AllocsPerRun counts
// every goroutine's allocations: one of an earlier test still winding
// down, given the processor for a time slice in the middle of a
// measurement, adds its own (with -race about one measurement in a
// hundred of a thousand calls). Another goroutine never takes any away,
// so the least measurement is f's, and a function that allocates on
// every call reads so in each.
func leastAllocs(f func()) float64 {
	least := math.Inf(1)
	for range 5 {
		if least = min(least, testing.AllocsPerRun(100, f)); least == 0 {
			break
		}
	}
	return least
}
