package dns

import (
	"net"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// TestScreenLeavesWellFormedQueriesUnparsed: a well-formed query from a
// rate limited UDP source (the default) is unpacked once, by miekg/dns
// for the handler, not also by screen: as miekg/dns's client sends it
// over loopback (no EDNS, an OPT alone, an OPT with a DNS COOKIE, with
// padding, with an NSID request), screen reads it without allocating.
// What screen leaves to miekg/dns unread is checked against
// miekg/dns's own unpack (FuzzUnparsedAsMiekg).
//
// Not parallel: testing.AllocsPerRun refuses to run beside other tests.
func TestScreenLeavesWellFormedQueriesUnparsed(t *testing.T) {
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }, RateLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	co, err := mdns.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
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
		if err := co.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1232)
		pc.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		m := buf[:n]
		if !s.limits(from) {
			t.Fatalf("%s: %v is not rate limited", tt.name, from)
		}
		// AllocsPerRun counts every goroutine's allocations, and a test
		// before this one may leave some winding down: over 1000 runs a
		// few of theirs round away, while one unpack a query is 1000.
		var reply []byte
		if allocs := testing.AllocsPerRun(1000, func() { reply = s.reject(m, from) }); allocs != 0 || reply != nil {
			t.Errorf("%s: screen: %v allocations a query, reply %x; want none and none: the query unpacked twice", tt.name, allocs, reply)
		}
	}
}
