package dns

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// captured is a ResponseWriter for a UDP source that keeps the first
// reply, as a client would read it off the wire.
type captured struct {
	replyCounter
	reply *mdns.Msg
	err   error // the first reply did not pack, or does not parse
}

func (w *captured) WriteMsg(m *mdns.Msg) error {
	if w.reply != nil || w.err != nil {
		return nil
	}
	b, err := m.Pack()
	if err != nil {
		w.err = err
		return err
	}
	w.reply = new(mdns.Msg)
	if w.err = w.reply.Unpack(b); w.err != nil {
		w.reply = nil
	}
	return nil
}

// FuzzScreenAgreesWithServe: a message serve answers with an error read
// before the opcode (two OPTs or a misplaced OPT or TSIG: FORMERR; EDNS
// version other than 0: BADVERS; a TSIG: NOTAUTH with BADKEY, and the
// BADKEY TSIG with the first two when the TSIG is in place) gets the
// same reply from screen when its opcode is one screen refuses (UPDATE):
// the same rcode, TC, question, OPT and TSIG. Any other message serve
// reads gets NOTIMP from screen as an UPDATE.
func FuzzScreenAgreesWithServe(f *testing.F) {
	opt := func(v uint8, name string) *mdns.OPT {
		o := &mdns.OPT{Hdr: mdns.RR_Header{Name: name, Rrtype: mdns.TypeOPT}}
		o.SetUDPSize(512)
		o.SetDo()
		o.SetVersion(v)
		return o
	}
	tsig := &mdns.TSIG{Hdr: mdns.RR_Header{Name: "platform-key.", Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
		Algorithm: mdns.HmacSHA256, TimeSigned: 1, Fudge: 300, OrigId: 7}
	// Each flaw serve reads before the opcode, and none.
	for _, sections := range [][3][]mdns.RR{
		{}, {nil, nil, {opt(0, ".")}}, {nil, nil, {opt(1, ".")}}, {nil, nil, {opt(0, "x.")}},
		{nil, nil, {opt(0, "."), opt(0, ".")}}, {{opt(0, ".")}, nil, nil}, {nil, {opt(0, ".")}, {opt(0, ".")}},
		{nil, nil, {opt(0, "."), tsig}}, {nil, nil, {tsig, opt(0, ".")}}, {nil, nil, {opt(1, "."), tsig}},
		{{tsig}, nil, nil}, {nil, {tsig}, {opt(0, ".")}}, {nil, nil, {tsig, tsig}},
		{{opt(0, ".")}, nil, {tsig}}, {nil, nil, {opt(0, "x."), tsig}},
	} {
		q := new(mdns.Msg)
		q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
		q.Answer, q.Ns, q.Extra = sections[0], sections[1], sections[2]
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A TSIG without RDATA, which miekg/dns reads as one of empty fields.
	q := new(mdns.Msg)
	q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
	b, _ := q.Pack()
	b[11] = 1
	b = append(b, 0, 0, byte(mdns.TypeTSIG), 0, byte(mdns.ClassANY), 0, 0, 0, 0, 0, 0)
	f.Add(b)
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }})
	if err != nil {
		f.Fatal(err)
	}
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5353}
	f.Fuzz(func(t *testing.T, m []byte) {
		if len(m) < headerLen {
			return
		}
		h := mdns.Header{Bits: binary.BigEndian.Uint16(m[2:]), Qdcount: binary.BigEndian.Uint16(m[4:]),
			Ancount: binary.BigEndian.Uint16(m[6:]), Nscount: binary.BigEndian.Uint16(m[8:]), Arcount: binary.BigEndian.Uint16(m[10:])}
		if mdns.DefaultMsgAcceptFunc(h) != mdns.MsgAccept || int(h.Bits>>11)&0xF != mdns.OpcodeQuery {
			return
		}
		if w, ok := walk(m, h); !ok || w.end != len(m) {
			return // screen's own: trailing bytes, or left to miekg/dns
		}
		req := new(mdns.Msg)
		if req.Unpack(m) != nil {
			return
		}
		w := &captured{replyCounter: replyCounter{remote: from}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.serve(ctx, w, req)
		if w.reply == nil {
			t.Fatalf("serve's reply to %x: none, or it does not parse: %v", m, w.err)
		}
		u := append([]byte(nil), m...)
		u[2] = u[2]&^0x78 | mdns.OpcodeUpdate<<3
		rb := s.reject(u, from)
		if rb == nil {
			t.Fatalf("screen left the UPDATE %x to miekg/dns", u)
		}
		r := new(mdns.Msg)
		if err := r.Unpack(rb); err != nil {
			t.Fatalf("screen's reply does not parse: %v", err)
		}
		want := w.reply
		flaw := badOPT(req) || badTSIG(req) || want.Rcode == mdns.RcodeBadVers || want.Rcode == mdns.RcodeNotAuth
		if !flaw {
			if r.Rcode != mdns.RcodeNotImplemented {
				t.Fatalf("serve: %s; screen, as UPDATE: %s, want NOTIMP", mdns.RcodeToString[want.Rcode], r)
			}
			return
		}
		same := r.Rcode == want.Rcode && r.Truncated == want.Truncated && r.RecursionAvailable == want.RecursionAvailable &&
			len(r.Question) == len(want.Question) && (r.IsEdns0() == nil) == (want.IsEdns0() == nil) &&
			len(r.Answer)+len(r.Ns) == 0 && len(want.Answer)+len(want.Ns) == 0 && len(r.Extra) == len(want.Extra) &&
			(r.IsTsig() == nil) == (want.IsTsig() == nil)
		if same && r.IsTsig() != nil {
			a, b := r.IsTsig(), want.IsTsig()
			same = a.Hdr.Name == b.Hdr.Name && a.Algorithm == b.Algorithm && a.Error == b.Error && a.OrigId == b.OrigId && a.MAC == b.MAC
		}
		if same && r.IsEdns0() != nil {
			same = r.IsEdns0().Do() == want.IsEdns0().Do() && r.IsEdns0().UDPSize() == want.IsEdns0().UDPSize()
		}
		if !same {
			t.Fatalf("serve's reply:\n%v\nscreen's to the same as UPDATE:\n%v\nto %x", want, r, m)
		}
	})
}
