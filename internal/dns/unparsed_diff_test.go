package dns

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// miekgReply is what miekg/dns v1.1.73's serveDNS (server.go) writes
// itself for m, nil when it ignores m or hands it to the handler: a copy
// of its logic, to check the screen's against.
func miekgReply(m []byte) []byte {
	if len(m) < headerLen {
		return nil
	}
	dh := mdns.Header{Id: binary.BigEndian.Uint16(m), Bits: binary.BigEndian.Uint16(m[2:]),
		Qdcount: binary.BigEndian.Uint16(m[4:]), Ancount: binary.BigEndian.Uint16(m[6:]),
		Nscount: binary.BigEndian.Uint16(m[8:]), Arcount: binary.BigEndian.Uint16(m[10:])}
	req := new(mdns.Msg)
	action := mdns.DefaultMsgAcceptFunc(dh)
	switch action {
	case mdns.MsgIgnore:
		return nil
	case mdns.MsgAccept:
		if req.Unpack(m) == nil {
			return nil
		}
	default:
		var hm mdns.Msg
		_ = hm.Unpack(m[:headerLen]) // the header alone
		req = &hm
	}
	opcode := req.Opcode
	req.SetRcodeFormatError(req)
	req.Zero = false
	if action == mdns.MsgRejectNotImplemented {
		req.Opcode, req.Rcode = opcode, mdns.RcodeNotImplemented
	}
	req.Ns, req.Answer, req.Extra = nil, nil, nil
	b, _ := req.Pack()
	return b
}

// FuzzUnparsedAsMiekg: for a UDP query from a rate limited source, the
// screen leaves to miekg/dns only what miekg/dns ignores or hands to the
// handler (whose answers are limited): never one miekg/dns would answer
// itself, past the limiter. And where walk cannot step over a query's
// records, the reply screen sends is the one miekg/dns would, byte for
// byte, as TCP still gets from miekg/dns, but for the opcode: the
// request's, where miekg/dns's FORMERR says QUERY.
func FuzzUnparsedAsMiekg(f *testing.F) {
	q := new(mdns.Msg)
	q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
	q.SetEdns0(1232, false)
	b, _ := q.Pack()
	f.Add(b)
	f.Add(b[:len(b)-2])
	f.Add(b[:len(b)-3])
	q.Opcode = mdns.OpcodeUpdate
	b, _ = q.Pack()
	f.Add(b[:len(b)-3])
	f.Add([]byte("000000000000"))                                                             // a header alone, refused
	f.Add([]byte("\x30\x30\x30\x30\x00\x01\x00\x00\x00\x00\x00\x00\xd2\x30\x30\x30\x30\x30")) // a pointer past the end
	// At the edges of what unpacks vouches for without unpacking: a name
	// of 255 bytes with the root (miekg/dns reads it) and of 256 (it
	// does not: its budget is spent), an OPT whose options it reads from
	// any bytes, of any length, and ones it does not take so, each
	// alone and cut short.
	long := func(n int) string { // a name of n bytes, the root's included
		var name string
		for r := n - 1; r > 0; { // each label costs its length and one
			l := min(63, r-1)
			name += strings.Repeat("a", l) + "."
			r -= l + 1
		}
		return name
	}
	for _, n := range []int{254, 255, 256} {
		q := new(mdns.Msg)
		q.SetQuestion(long(n), mdns.TypeA)
		b, _ := q.Pack()
		f.Add(b)
	}
	for _, opt := range [][]byte{
		{0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 10, 0, 1, 1}, {0, 10, 0, 0}, {0, 12, 0, 3, 0, 0, 0}, {0, 3, 0, 0},
		{0xFE, 0x47, 0, 0}, {0, 10, 0, 9, 1}, {0, 10, 0}, {0, 8, 0, 4, 0, 3, 24, 0}, {0, 8, 0, 7, 0, 1, 24, 0, 192, 0, 2},
		{0, 11, 0, 1, 0}, {0, 9, 0, 2, 0, 0}, {0, 15, 0, 1, 0}, {0, 10, 0, 0, 0, 12, 0, 1, 0, 8, 0, 4, 0, 3, 24, 0},
	} {
		q := new(mdns.Msg)
		q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
		q.SetEdns0(1232, false)
		b, _ := q.Pack()
		b = b[:len(b)-2] // the OPT's RDLENGTH, 0: these options instead
		f.Add(append(binary.BigEndian.AppendUint16(b, uint16(len(opt))), opt...))
	}
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return nil }, RateLimit: 1000, RateLimitSlip: 2})
	if err != nil {
		f.Fatal(err)
	}
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5353}
	f.Fuzz(func(t *testing.T, m []byte) {
		want := miekgReply(m)
		if len(m) < headerLen {
			return
		}
		if want != nil {
			want[2] = want[2]&^0x78 | m[2]&0x78 // the request's opcode
		}
		dh := mdns.Header{Qdcount: binary.BigEndian.Uint16(m[4:]), Ancount: binary.BigEndian.Uint16(m[6:]),
			Nscount: binary.BigEndian.Uint16(m[8:]), Arcount: binary.BigEndian.Uint16(m[10:]), Bits: binary.BigEndian.Uint16(m[2:])}
		_, walked := walk(m, dh)
		got := s.reject(m, from)
		if got == nil && want != nil {
			t.Fatalf("screen leaves %x to miekg/dns, which answers %x unlimited", m, want)
		}
		if !walked && got != nil && !bytes.Equal(got, want) {
			var g, w mdns.Msg
			_ = g.Unpack(got)
			_ = w.Unpack(want)
			t.Fatalf("for %x\nscreen: %v\nmiekg: %v", m, &g, &w)
		}
	})
}
