package dns

import (
	"encoding/binary"
	"testing"

	mdns "github.com/miekg/dns"
)

// TestOddMessages: what the server answers to a query it cannot answer
// as asked, over UDP and TCP: no or two questions FORMERR (RFC 1035
// §4.1.2 has a query hold one; BIND and Knot answer FORMERR), a class
// the server holds no data in REFUSED, as an off-zone name is (it has no
// view of that class, and AA unset says so), and an EDNS version other
// than 0 BADVERS with an OPT of version 0 (RFC 6891 §6.1.3), whatever
// else is wrong with the query: the version is read first, as the
// requester must learn the one to use before anything else it is told
// makes sense. An UPDATE or a query of no question with version 1 got
// NOTIMP and FORMERR.
func TestOddMessages(t *testing.T) {
	addr := startServer(t)
	build := func(edit func(q *mdns.Msg)) []byte {
		q := new(mdns.Msg)
		q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
		if edit != nil {
			edit(q)
		}
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	edns := func(v uint8) func(q *mdns.Msg) {
		return func(q *mdns.Msg) { q.SetEdns0(1232, false); q.IsEdns0().SetVersion(v) }
	}
	class := func(c uint16) func(q *mdns.Msg) { return func(q *mdns.Msg) { q.Question[0].Qclass = c } }
	both := func(fs ...func(q *mdns.Msg)) func(q *mdns.Msg) {
		return func(q *mdns.Msg) {
			for _, f := range fs {
				f(q)
			}
		}
	}
	noQuestion := func(q *mdns.Msg) { q.Question = nil }
	twoQuestions := func(q *mdns.Msg) { q.Question = append(q.Question, q.Question[0]) }
	update := func(q *mdns.Msg) { q.Opcode = mdns.OpcodeUpdate }
	for _, tt := range []struct {
		name    string
		edit    func(q *mdns.Msg)
		rcode   int
		answers int
		opt     bool // an OPT of version 0 in the reply
	}{
		{"QDCOUNT 0", noQuestion, mdns.RcodeFormatError, 0, false},
		{"QDCOUNT 0 with EDNS", both(noQuestion, edns(0)), mdns.RcodeFormatError, 0, true},
		{"QDCOUNT 2", twoQuestions, mdns.RcodeFormatError, 0, false},
		{"class CH", class(mdns.ClassCHAOS), mdns.RcodeRefused, 0, false},
		{"class HS", class(mdns.ClassHESIOD), mdns.RcodeRefused, 0, false},
		{"class 1234", class(1234), mdns.RcodeRefused, 0, false},
		{"class NONE", class(mdns.ClassNONE), mdns.RcodeRefused, 0, false},
		{"class ANY", class(mdns.ClassANY), mdns.RcodeSuccess, 1, false},
		{"EDNS version 1", edns(1), mdns.RcodeBadVers, 0, true},
		{"EDNS version 255", edns(255), mdns.RcodeBadVers, 0, true},
		{"EDNS version 1, class CH", both(edns(1), class(mdns.ClassCHAOS)), mdns.RcodeBadVers, 0, true},
		{"EDNS version 1, QDCOUNT 0", both(noQuestion, edns(1)), mdns.RcodeBadVers, 0, true},
		{"EDNS version 1, QDCOUNT 2", both(twoQuestions, edns(1)), mdns.RcodeBadVers, 0, true},
		{"EDNS version 1, UPDATE", both(update, edns(1)), mdns.RcodeBadVers, 0, true},
	} {
		for _, network := range []string{"udp", "tcp"} {
			q := build(tt.edit)
			r := rawExchange(t, network, addr, q)
			o := r.IsEdns0()
			t.Logf("%s %s: %s, %d answers, aa=%v, OPT %v", network, tt.name, mdns.RcodeToString[r.Rcode], len(r.Answer), r.Authoritative, o)
			if r.Id != binary.BigEndian.Uint16(q) || r.Rcode != tt.rcode || len(r.Answer) != tt.answers || (o != nil) != tt.opt || (o != nil && o.Version() != 0) {
				t.Errorf("%s %s: %s with %d answers, OPT %v; want %s with %d, an OPT of version 0: %v",
					network, tt.name, mdns.RcodeToString[r.Rcode], len(r.Answer), o, mdns.RcodeToString[tt.rcode], tt.answers, tt.opt)
			}
			if tt.rcode != mdns.RcodeSuccess && r.Authoritative {
				t.Errorf("%s %s: AA set on %s", network, tt.name, mdns.RcodeToString[r.Rcode])
			}
		}
	}
}

// TestResponseNotAnswered: a response (QR set) sent to the server gets
// nothing back, of any opcode, over UDP or TCP: a reply to a forged
// "response" would reflect it at its source, and two servers would
// answer each other for ever. The query sent after it on the same socket
// is the first thing answered.
func TestResponseNotAnswered(t *testing.T) {
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, op := range []int{mdns.OpcodeQuery, mdns.OpcodeNotify, mdns.OpcodeUpdate} {
			resp := new(mdns.Msg)
			resp.SetQuestion("hello.apps.example.com.", mdns.TypeA)
			resp.Opcode, resp.Response, resp.Id = op, true, 1
			rb, err := resp.Pack()
			if err != nil {
				t.Fatal(err)
			}
			q := new(mdns.Msg)
			q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
			q.Id = 2
			qb, err := q.Pack()
			if err != nil {
				t.Fatal(err)
			}
			if r := rawExchange(t, network, addr, rb, qb); r.Id != 2 || r.Rcode != mdns.RcodeSuccess {
				t.Errorf("%s opcode %d: first reply %v, want the answer to the query after the response", network, op, r)
			}
		}
	}
}
