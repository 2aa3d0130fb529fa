package dns

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// rawExchange sends each of msgs to addr over network (UDP: one socket;
// TCP: one connection, the messages framed back to back) and returns the
// first reply, as it came off the wire.
func rawExchange(t *testing.T, network, addr string, msgs ...[]byte) *mdns.Msg {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	for _, m := range msgs {
		if network == "tcp" {
			m = append(binary.BigEndian.AppendUint16(nil, uint16(len(m))), m...)
		}
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 65535)
	var n int
	if network == "tcp" {
		if _, err = io.ReadFull(c, buf[:2]); err == nil {
			n = int(binary.BigEndian.Uint16(buf))
			_, err = io.ReadFull(c, buf[:n])
		}
	} else {
		n, err = c.Read(buf)
	}
	if err != nil {
		t.Fatalf("%s: no reply: %v", network, err)
	}
	r := new(mdns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatalf("%s: reply does not parse: %v", network, err)
	}
	return r
}

// packed returns the query for hello.apps.example.com A, with an OPT when
// edns, after edit, as bytes.
func packed(t *testing.T, edns bool, edit func(q *mdns.Msg)) []byte {
	t.Helper()
	q := new(mdns.Msg)
	q.SetQuestion("Hello.Apps.example.com.", mdns.TypeA)
	if edns {
		q.SetEdns0(1232, true)
	}
	if edit != nil {
		edit(q)
	}
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRejectedQueriesKeepOPT: a query that is not what its header says
// (bytes after its last record) gets FORMERR, as BIND and Knot answer it,
// not an answer to the part that parsed; and every query refused before
// it is answered (no or two questions, more records than a query holds,
// an opcode other than QUERY) gets its rcode with the question and, when
// it had one, an OPT (RFC 6891 §7), over UDP and TCP alike. A resolver
// that gets a reply without OPT to a query with one takes the server for
// one without EDNS.
func TestRejectedQueriesKeepOPT(t *testing.T) {
	a := func() mdns.RR { rr, _ := mdns.NewRR("x.example. 60 IN A 192.0.2.1"); return rr }
	tests := []struct {
		name     string
		edns     bool
		edit     func(q *mdns.Msg)
		trailing bool
		rcode    int
		question bool // the reply echoes the question
	}{
		{name: "trailing bytes", edns: true, trailing: true, rcode: mdns.RcodeFormatError, question: true},
		{name: "trailing bytes without OPT", trailing: true, rcode: mdns.RcodeFormatError, question: true},
		{name: "no question", edns: true, edit: func(q *mdns.Msg) { q.Question = nil }, rcode: mdns.RcodeFormatError},
		{name: "two questions", edns: true, edit: func(q *mdns.Msg) { q.Question = append(q.Question, q.Question[0]) }, rcode: mdns.RcodeFormatError},
		{name: "two authority records", edns: true, edit: func(q *mdns.Msg) { q.Ns = []mdns.RR{a(), a()} }, rcode: mdns.RcodeFormatError, question: true},
		{name: "STATUS opcode", edns: true, edit: func(q *mdns.Msg) { q.Opcode = mdns.OpcodeStatus }, rcode: mdns.RcodeNotImplemented, question: true},
		{name: "UPDATE opcode", edns: true, edit: func(q *mdns.Msg) { q.Opcode = mdns.OpcodeUpdate; q.Ns = []mdns.RR{a(), a(), a()} }, rcode: mdns.RcodeNotImplemented, question: true},
		{name: "UPDATE opcode without OPT", edit: func(q *mdns.Msg) { q.Opcode = mdns.OpcodeUpdate }, rcode: mdns.RcodeNotImplemented, question: true},
	}
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			q := packed(t, tt.edns, tt.edit)
			if tt.trailing {
				q = append(q, 0, 0, 0)
			}
			r := rawExchange(t, network, addr, q)
			wantOp := int(q[2]>>3) & 0xF
			if r.Rcode != tt.rcode || r.Opcode != wantOp || len(r.Answer) != 0 || r.Authoritative {
				t.Errorf("%s %s: %s opcode %d, %d answers, aa=%v; want %s opcode %d, none, aa unset", network, tt.name,
					mdns.RcodeToString[r.Rcode], r.Opcode, len(r.Answer), r.Authoritative, mdns.RcodeToString[tt.rcode], wantOp)
			}
			if o := r.IsEdns0(); (o != nil) != tt.edns || (o != nil && (o.UDPSize() != ednsSize || !o.Do())) {
				t.Errorf("%s %s: OPT %v, want one stating %d with DO: %v", network, tt.name, o, ednsSize, tt.edns)
			}
			if got := len(r.Question) == 1 && r.Question[0].Name == "Hello.Apps.example.com."; got != tt.question {
				t.Errorf("%s %s: question %v, want it echoed: %v", network, tt.name, r.Question, tt.question)
			}
		}
		// the same query without the trailing bytes is answered
		if r := rawExchange(t, network, addr, packed(t, true, nil)); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("%s: well-formed query: %s %v", network, mdns.RcodeToString[r.Rcode], r.Answer)
		}
	}
}

// TestRejectedQueryBadOPT: a query refused before it is answered whose
// OPT records break RFC 6891 §6.1.1 gets no OPT back, as a well-formed
// one with them does not (TestBadOPTRecords): which of them is the
// requester's is unknown.
func TestRejectedQueryBadOPT(t *testing.T) {
	addr := startServer(t)
	two := packed(t, true, func(q *mdns.Msg) { q.Extra = append(q.Extra, q.Extra[0]) })
	for _, network := range []string{"udp", "tcp"} {
		r := rawExchange(t, network, addr, append(two, 0))
		if r.Rcode != mdns.RcodeFormatError || r.IsEdns0() != nil {
			t.Errorf("%s: %s with OPT %v, want FORMERR without", network, mdns.RcodeToString[r.Rcode], r.IsEdns0())
		}
	}
}

// TestResponseNeverAnswered: a message with QR set is a response, and
// gets none, whatever else is wrong with it: answering would reflect a
// spoofed "response" at its victim, or start a loop between two servers.
// The query sent after it on the same socket or connection gets the
// first reply.
func TestResponseNeverAnswered(t *testing.T) {
	addr := startServer(t)
	responses := map[string][]byte{
		"response":                 packed(t, true, func(q *mdns.Msg) { q.Response = true }),
		"response, trailing bytes": append(packed(t, true, func(q *mdns.Msg) { q.Response = true }), 0, 0),
		"UPDATE response":          packed(t, true, func(q *mdns.Msg) { q.Response = true; q.Opcode = mdns.OpcodeUpdate }),
		"response, no question":    packed(t, true, func(q *mdns.Msg) { q.Response = true; q.Question = nil }),
	}
	// A NOTIFY that does not parse is answered by screen itself, over
	// TCP too (unparsed); a NOTIFY response that does not parse is not.
	notify := packed(t, true, func(q *mdns.Msg) { q.Response = true; q.Opcode = mdns.OpcodeNotify })
	responses["NOTIFY response, cut short"] = notify[:len(notify)-3]
	responses["NOTIFY response, the header alone"] = notify[:headerLen]
	for _, network := range []string{"udp", "tcp"} {
		for name, resp := range responses {
			q := packed(t, false, func(q *mdns.Msg) { q.Id = 4321 })
			if r := rawExchange(t, network, addr, resp, q); r.Id != 4321 || r.Rcode != mdns.RcodeSuccess {
				t.Errorf("%s %s: first reply id %d %s, want the query's (4321) NOERROR", network, name, r.Id, mdns.RcodeToString[r.Rcode])
			}
		}
	}
}

// TestRejectOverPacketConn: Serve takes any net.PacketConn, and one that
// is not a *net.UDPConn (read through ReadPacketConn) is screened alike.
func TestRejectOverPacketConn(t *testing.T) {
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "serve", func(ctx context.Context) error { return s.Serve(ctx, struct{ net.PacketConn }{pc}, ln) })
	addr := pc.LocalAddr().String()
	if r := rawExchange(t, "udp", addr, append(packed(t, true, nil), 0)); r.Rcode != mdns.RcodeFormatError || r.IsEdns0() == nil {
		t.Errorf("trailing bytes: %s with OPT %v, want FORMERR with one", mdns.RcodeToString[r.Rcode], r.IsEdns0())
	}
	if r := rawExchange(t, "udp", addr, packed(t, true, nil)); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("well-formed query: %s %v", mdns.RcodeToString[r.Rcode], r.Answer)
	}
}

// FuzzReject: whatever bytes arrive, the screen does not panic, and what
// it answers over UDP is a reply to them: their id, QR set, NOTIMP,
// FORMERR, BADVERS with an OPT, or NOTAUTH with an unsigned BADKEY TSIG
// (TC set, when the TSIG alone passes the size), the TSIG of the FORMERR
// for a bad OPT and of BADVERS that one too, and no larger than the
// query offers.
func FuzzReject(f *testing.F) {
	q := new(mdns.Msg)
	q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
	q.SetEdns0(1232, false)
	b, _ := q.Pack()
	f.Add(b)
	f.Add(append(b, 0))
	f.Add(b[:len(b)-2])
	q.Opcode = mdns.OpcodeUpdate
	b, _ = q.Pack()
	f.Add(b)
	// Refused from the header, so screen answers them: BADVERS, and
	// NOTAUTH with a BADKEY TSIG, which fits what the query offers over
	// UDP (1232, 512 or, without OPT, 512), the question cut (long
	// names) or the TSIG too (longer ones).
	q.IsEdns0().SetVersion(1)
	b, _ = q.Pack()
	f.Add(b)
	label := strings.Repeat("k", 62) + "."
	for _, tt := range []struct {
		keyLabels int
		longAlg   bool
	}{{1, false}, {4, false}, {4, true}} {
		for _, size := range []uint16{0, 512, 1232} {
			q := new(mdns.Msg)
			q.SetQuestion(strings.Repeat(label, 3)+"apps.example.com.", mdns.TypeA)
			q.Opcode = mdns.OpcodeUpdate
			if size != 0 {
				q.SetEdns0(size, false)
			}
			key := strings.Repeat(label, tt.keyLabels)
			q.SetTsig(key, mdns.HmacSHA256, 300, 1)
			if tt.longAlg {
				q.IsTsig().Algorithm = key
			}
			b, err := q.Pack()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return nil }})
	if err != nil {
		f.Fatal(err)
	}
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
	f.Fuzz(func(t *testing.T, m []byte) {
		reply := s.reject(m, from)
		if reply == nil {
			return
		}
		r := new(mdns.Msg)
		if err := r.Unpack(reply); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if r.Id != binary.BigEndian.Uint16(m) || !r.Response {
			t.Fatalf("reply %v to %x", r, m)
		}
		ts := r.IsTsig()
		if ts != nil && (ts.Error != mdns.RcodeBadKey || ts.MAC != "") {
			t.Fatalf("a TSIG other than the unsigned BADKEY one: %v to %x", r, m)
		}
		switch r.Rcode {
		case mdns.RcodeNotImplemented:
			if ts != nil {
				t.Fatalf("NOTIMP with a TSIG: %v to %x", r, m)
			}
		case mdns.RcodeFormatError:
			// A TSIG only for a bad OPT, which then is not in the reply:
			// never for trailing bytes, a misplaced or unreadable TSIG, or
			// what the header refuses (a signed one of those is NOTAUTH).
			if ts != nil && r.IsEdns0() != nil {
				t.Fatalf("FORMERR with a TSIG and an OPT: %v to %x", r, m)
			}
			if q := new(mdns.Msg); ts != nil && q.Unpack(m) == nil && (!badOPT(q) || badTSIG(q)) {
				t.Fatalf("FORMERR with a TSIG to a query whose OPT records are fine or whose TSIG is not: %v to %x", r, m)
			}
		case mdns.RcodeBadVers:
			if r.IsEdns0() == nil {
				t.Fatalf("BADVERS without its OPT: %v to %x", r, m)
			}
		case mdns.RcodeNotAuth:
			// The TSIG is cut only when it alone passes the size.
			if ts == nil && !r.Truncated {
				t.Fatalf("NOTAUTH without an unsigned BADKEY TSIG: %v to %x", r, m)
			}
		default:
			t.Fatalf("rcode %s: %v to %x", mdns.RcodeToString[r.Rcode], r, m)
		}
		// No reply passes what the query offers: its OPT's size (our
		// cap, 1232, at most), 512 without one.
		limit := mdns.MinMsgSize
		if r.IsEdns0() != nil {
			q := new(mdns.Msg)
			if q.Unpack(m) == nil && q.IsEdns0() != nil {
				limit = replySize(q.IsEdns0())
			} else {
				limit = ednsSize
			}
		}
		if len(reply) > limit {
			t.Fatalf("%d bytes, past %d: %v to %x", len(reply), limit, r, m)
		}
	})
}

// TestUnparsedNOTIFYKeepsOpcode: a NOTIFY that does not parse (a record
// of the wrong length, its last record cut short, a name pointing past
// the message, no question and nothing after the header) gets FORMERR
// with its own opcode and id, as RFC 1035 §4.1.1 has a reply copy them,
// over UDP and TCP, from a rate limited server or not. miekg/dns's
// SetRcodeFormatError says QUERY whatever the request was, and a client
// matching the reply to its NOTIFY by opcode drops it.
func TestUnparsedNOTIFYKeepsOpcode(t *testing.T) {
	notify := func(edit func(b []byte) []byte) []byte {
		m := new(mdns.Msg)
		m.SetNotify("apps.example.com.")
		m.SetEdns0(1232, false)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return edit(b)
	}
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"A record of three bytes", notify(func(b []byte) []byte {
			b[7] = 1 // ANCOUNT, before the OPT: an A of the root with three bytes of address
			i := len(b) - 11
			return append(b[:i:i], append([]byte{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 3, 192, 0, 2}, b[i:]...)...)
		})},
		{"last record cut short", notify(func(b []byte) []byte { return b[:len(b)-3] })},
		{"question name pointing past the message", notify(func(b []byte) []byte {
			b[10], b[11] = 0, 0 // ARCOUNT: the OPT goes
			return append(b[:12:12], 0xC0, 0xFF, 0, 6, 0, 1)
		})},
		{"no question, the header alone", notify(func(b []byte) []byte { b[5] = 0; return b[:12] })},
	} {
		limitedAddr, _, _ := rrlServer(t, Options{RateLimit: 100})
		for server, addr := range map[string]string{"plain": startServer(t), "rate limited": limitedAddr} {
			for _, network := range []string{"udp", "tcp"} {
				id := mdns.Id()
				binary.BigEndian.PutUint16(tt.b, id)
				r := rawExchange(t, network, addr, tt.b)
				if r.Rcode != mdns.RcodeFormatError || r.Opcode != mdns.OpcodeNotify || r.Id != id || !r.Response {
					t.Errorf("%s, %s server, %s: %s (%d) opcode %d id %d; want FORMERR, opcode NOTIFY (%d), id %d",
						tt.name, server, network, mdns.RcodeToString[r.Rcode], r.Rcode, r.Opcode, r.Id, mdns.OpcodeNotify, id)
				}
			}
		}
	}
}

// capturedFrom is [captured] for a source of any transport.
type capturedFrom struct {
	captured
	from net.Addr
}

func (w *capturedFrom) RemoteAddr() net.Addr { return w.from }

// TestParsedNOTIFYAnsweredAsTheHandlerWould: a NOTIFY that parses is
// answered by screen, which has unpacked it whole to know that it
// parses, with the reply serve gives it (NOTIMP, or FORMERR, BADVERS or
// NOTAUTH with its BADKEY TSIG first, the question and OPT kept, RA to a
// source that may recurse, the limiter's drop and slip): handed on, it
// was unpacked a second time, by miekg/dns, to be answered the same.
func TestParsedNOTIFYAnsweredAsTheHandlerWould(t *testing.T) {
	t.Parallel()
	soa, _ := mdns.NewRR("apps.example.com. 60 IN SOA ns.apps.example.com. hostmaster.apps.example.com. 7 3600 600 86400 60")
	opt := func(v uint8, do bool) *mdns.OPT {
		o := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		o.SetUDPSize(4096)
		o.SetVersion(v)
		if do {
			o.SetDo()
		}
		return o
	}
	tsig := &mdns.TSIG{Hdr: mdns.RR_Header{Name: "platform-key.", Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
		Algorithm: mdns.HmacSHA256, Fudge: 300, OrigId: 7}
	cases := map[string]func(m *mdns.Msg){
		"plain": func(m *mdns.Msg) {},
		"with its SOA, RD and CD": func(m *mdns.Msg) {
			m.Answer, m.RecursionDesired, m.CheckingDisabled = []mdns.RR{soa}, true, true
		},
		"EDNS, DO":          func(m *mdns.Msg) { m.Extra = []mdns.RR{opt(0, true)} },
		"EDNS version 1":    func(m *mdns.Msg) { m.Extra = []mdns.RR{opt(1, false)} },
		"two OPTs":          func(m *mdns.Msg) { m.Extra = []mdns.RR{opt(0, false), opt(0, false)} },
		"OPT in the answer": func(m *mdns.Msg) { m.Answer = []mdns.RR{opt(0, false)} },
		"signed":            func(m *mdns.Msg) { m.Extra = []mdns.RR{opt(0, false), tsig} },
		"signed, version 1": func(m *mdns.Msg) { m.Extra = []mdns.RR{opt(1, false), tsig} },
		"TSIG first":        func(m *mdns.Msg) { m.Extra = []mdns.RR{tsig, opt(0, false)} },
	}
	recursing := netip.MustParsePrefix("10.0.0.0/8")
	fwd, err := NewForwarder(ForwarderOptions{Upstreams: []string{"192.0.2.53:53"}}) // never asked
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]net.Addr{
		"udp":              &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5353},
		"udp, may recurse": &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5353},
		"tcp":              &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5353},
	}
	// Each server's own limiter, stopped: 1 a second, one in two past it
	// slipped, so that the second of each is the slip and the third
	// dropped.
	server := func() *Server {
		s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }, RateLimit: 1, RateLimitSlip: 2,
			Forwarder: fwd, RecursionAllow: []netip.Prefix{recursing}})
		if err != nil {
			t.Fatal(err)
		}
		s.rrl.now = func() int64 { return int64(time.Hour) }
		return s
	}
	for name, edit := range cases {
		for source, from := range sources {
			screen, handler := server(), server()
			for i := range 3 {
				q := new(mdns.Msg)
				q.SetNotify("Apps.Example.com.")
				q.Id = 7
				edit(q)
				m, err := q.Pack()
				if err != nil {
					t.Fatal(err)
				}
				want := new(mdns.Msg)
				if err := want.Unpack(m); err != nil {
					t.Fatal(err)
				}
				w := &capturedFrom{from: from}
				handler.serve(context.Background(), w, want)
				got := screen.reject(m, from)
				if got == nil {
					t.Errorf("%s, %s, #%d: screen leaves it to miekg/dns, which unpacks it again; the handler's reply:\n%v", name, source, i, w.reply)
					continue
				}
				if _, udp := from.(*net.UDPAddr); udp {
					got = screen.limitReject(got, from) // as ReadUDP does
				}
				if got == nil || w.reply == nil {
					if got != nil || w.reply != nil {
						t.Errorf("%s, %s, #%d: screen's reply dropped: %v; the handler's: %v", name, source, i, got == nil, w.reply == nil)
					}
					continue
				}
				g := new(mdns.Msg)
				if err := g.Unpack(got); err != nil {
					t.Fatal(err)
				}
				for _, r := range []*mdns.Msg{g, w.reply} {
					if ts := r.IsTsig(); ts != nil {
						ts.TimeSigned = 0 // the server's clock
					}
				}
				if g.String() != w.reply.String() {
					t.Errorf("%s, %s, #%d: screen replies\n%v\nthe handler\n%v", name, source, i, g, w.reply)
				}
			}
		}
	}
}
