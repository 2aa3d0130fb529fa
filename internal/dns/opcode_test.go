package dns

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// exchangeSigned sends q with miekg/dns's client over network, signed
// with key when key is not "", and returns the reply unverified: the
// client would refuse the unsigned TSIG of a BADKEY reply as a forgery,
// which is what the test must see.
func exchangeSigned(t *testing.T, network, addr string, q *mdns.Msg, key string) *mdns.Msg {
	t.Helper()
	co, err := (&mdns.Client{Net: network, UDPSize: 65535}).Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if key != "" {
		co.TsigSecret = map[string]string{key: "c2VjcmV0LXNlY3JldC1zZWNyZXQ="}
		q.SetTsig(key, mdns.HmacSHA256, 300, time.Now().Unix())
	}
	co.SetDeadline(time.Now().Add(3 * time.Second))
	if err := co.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	raw, err := co.ReadMsgHeader(nil)
	if err != nil {
		t.Fatalf("%s: no reply: %v", network, err)
	}
	m := new(mdns.Msg)
	if err := m.Unpack(raw); err != nil {
		t.Fatal(err)
	}
	return m
}

// opcodeMessages are a message of each opcode a client may send: the
// ones the server serves (QUERY; NOTIFY, which miekg/dns reads) and the
// ones it does not (UPDATE with records in its sections, STATUS, the
// retired IQUERY, DSO and an unassigned one).
func opcodeMessages() map[string]func() *mdns.Msg {
	rr := func(s string) mdns.RR { r, _ := mdns.NewRR(s); return r }
	withOpcode := func(op int) func() *mdns.Msg {
		return func() *mdns.Msg {
			m := new(mdns.Msg)
			m.SetQuestion("hello.apps.example.com.", mdns.TypeA)
			m.Opcode = op
			return m
		}
	}
	return map[string]func() *mdns.Msg{
		"QUERY": withOpcode(mdns.OpcodeQuery),
		"NOTIFY": func() *mdns.Msg {
			m := new(mdns.Msg)
			m.SetNotify("apps.example.com.")
			m.Answer = []mdns.RR{rr("apps.example.com. 60 IN SOA ns.apps.example.com. hostmaster.apps.example.com. 7 3600 600 86400 60")}
			return m
		},
		"UPDATE": func() *mdns.Msg {
			m := new(mdns.Msg)
			m.SetUpdate("apps.example.com.")
			m.Insert([]mdns.RR{rr("evil.apps.example.com. 60 IN A 192.0.2.66"), rr("evil.apps.example.com. 60 IN A 192.0.2.67")})
			m.Id = mdns.Id()
			return m
		},
		"STATUS":     withOpcode(mdns.OpcodeStatus),
		"IQUERY":     withOpcode(mdns.OpcodeIQuery),
		"DSO":        withOpcode(6),
		"unassigned": withOpcode(15),
	}
}

// TestSignedMessageGetsBADKEYWhateverItsOpcode: the server knows no TSIG
// key, so a signed message of any opcode gets NOTAUTH with an unsigned
// TSIG saying BADKEY (RFC 8945 §5.2.2), over UDP and TCP. The key is
// checked before the opcode is: RFC 8945 §5.2 makes the TSIG the first
// thing a server reads of a message (it is removed before anything else
// is processed) and a TSIG REQUIRED in every response to a signed
// request, which a NOTIMP from a server unable to sign cannot be. An
// UPDATE was answered NOTIMP, a NOTIFY BADKEY. Unsigned, every opcode
// but QUERY gets NOTIMP.
func TestSignedMessageGetsBADKEYWhateverItsOpcode(t *testing.T) {
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for name, build := range opcodeMessages() {
			for _, signed := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/signed=%v", network, name, signed), func(t *testing.T) {
					q := build()
					key := ""
					if signed {
						key = "platform-key."
					}
					m := exchangeSigned(t, network, addr, q, key)
					if m.Id != q.Id || !m.Response || m.Opcode != q.Opcode {
						t.Fatalf("reply %v: want a response to %d, opcode %d", m, q.Id, q.Opcode)
					}
					ts := m.IsTsig()
					switch {
					case signed:
						if m.Rcode != mdns.RcodeNotAuth || ts == nil || ts.Error != mdns.RcodeBadKey || ts.MAC != "" || ts.Hdr.Name != key || ts.OrigId != q.Id {
							t.Errorf("%s, TSIG %v; want NOTAUTH with an unsigned BADKEY TSIG for %s", mdns.RcodeToString[m.Rcode], ts, key)
						}
						if len(m.Answer)+len(m.Ns) != 0 {
							t.Errorf("records in a NOTAUTH reply: %v", m)
						}
					case name == "QUERY":
						if m.Rcode != mdns.RcodeSuccess || len(m.Answer) != 1 || ts != nil {
							t.Errorf("%s with %d answers, TSIG %v: want the answer", mdns.RcodeToString[m.Rcode], len(m.Answer), ts)
						}
					default:
						if m.Rcode != mdns.RcodeNotImplemented || ts != nil || len(m.Answer)+len(m.Ns) != 0 {
							t.Errorf("%s, TSIG %v: want NOTIMP, nothing else", mdns.RcodeToString[m.Rcode], ts)
						}
					}
				})
			}
		}
	}
}

// TestRefusedOpcodeCheckedInServesOrder: a message of an opcode the
// server does not serve is answered as a QUERY with the same flaw is, in
// the same order: two OPT records FORMERR (RFC 6891 §6.1.1), then an
// EDNS version other than 0 BADVERS, then a TSIG that is not last
// FORMERR (RFC 8945 §5.2), then a TSIG with a key unknown here BADKEY,
// and only then NOTIMP. Bytes after the last record are read before all
// of them, FORMERR (screen): a message that is not what its header says
// is not read further, whatever its opcode. A signed UPDATE with them
// got an unsigned NOTIMP, which its client takes for a forgery.
func TestRefusedOpcodeCheckedInServesOrder(t *testing.T) {
	addr := startServer(t)
	tsig := func(q *mdns.Msg) mdns.RR {
		return &mdns.TSIG{Hdr: mdns.RR_Header{Name: "platform-key.", Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
			Algorithm: mdns.HmacSHA256, TimeSigned: uint64(time.Now().Unix()), Fudge: 300, OrigId: q.Id}
	}
	opt := func(v uint8) mdns.RR {
		o := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		o.SetUDPSize(1232)
		o.SetVersion(v)
		return o
	}
	for _, tt := range []struct {
		name     string
		extra    func(q *mdns.Msg) []mdns.RR
		rcode    int
		trailing bool // bytes after the last record
	}{
		{"two OPTs, signed", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(0), opt(0), tsig(q)} }, mdns.RcodeFormatError, false},
		{"EDNS version 1, signed", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(1), tsig(q)} }, mdns.RcodeBadVers, false},
		{"TSIG before the OPT", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{tsig(q), opt(0)} }, mdns.RcodeFormatError, false},
		{"signed", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(0), tsig(q)} }, mdns.RcodeNotAuth, false},
		{"EDNS version 0", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(0)} }, -1, false},
		{"trailing bytes", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(0)} }, mdns.RcodeFormatError, true},
		{"trailing bytes, signed", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(0), tsig(q)} }, mdns.RcodeFormatError, true},
		{"trailing bytes, EDNS version 1", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(1)} }, mdns.RcodeFormatError, true},
	} {
		for _, network := range []string{"udp", "tcp"} {
			for _, op := range []int{mdns.OpcodeQuery, mdns.OpcodeNotify, mdns.OpcodeUpdate, mdns.OpcodeStatus} {
				q := new(mdns.Msg)
				q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
				q.Opcode = op
				q.Extra = tt.extra(q)
				b, err := q.Pack()
				if err != nil {
					t.Fatal(err)
				}
				if tt.trailing {
					b = append(b, 0, 0, 0)
				}
				want := tt.rcode
				if want == -1 { // no flaw: answered, or NOTIMP
					want = mdns.RcodeNotImplemented
					if op == mdns.OpcodeQuery {
						want = mdns.RcodeSuccess
					}
				}
				if r := rawExchange(t, network, addr, b); r.Rcode != want || r.Opcode != op {
					t.Errorf("%s %s, opcode %d: %s (%d) with opcode %d, want %s (%d) with the request's", network, tt.name, op,
						mdns.RcodeToString[r.Rcode], r.Rcode, r.Opcode, mdns.RcodeToString[want], want)
				}
			}
		}
	}
}

// TestTSIGWithoutRDATAGetsFORMERR: a TSIG whose RDATA is empty (RDLENGTH
// 0) cannot be understood, which RFC 8945 §5.2 answers FORMERR, without
// a TSIG, over UDP and TCP, whatever the opcode (QUERY reaches the
// handler; UPDATE is screen's). miekg/dns reads it as a TSIG of empty
// fields, and its BADKEY reply went out with an algorithm name of no
// bytes at all: a reply no client can parse.
func TestTSIGWithoutRDATAGetsFORMERR(t *testing.T) {
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, op := range []int{mdns.OpcodeQuery, mdns.OpcodeNotify, mdns.OpcodeUpdate} {
			q := new(mdns.Msg)
			q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
			q.Opcode = op
			q.SetEdns0(1232, false)
			b, err := q.Pack()
			if err != nil {
				t.Fatal(err)
			}
			b[11]++ // ARCOUNT: the TSIG below
			b = append(b, 12)
			b = append(b, "platform"...)
			b = append(b, 3, 'k', 'e', 'y', 0)
			b = binary.BigEndian.AppendUint16(b, mdns.TypeTSIG)
			b = binary.BigEndian.AppendUint16(b, mdns.ClassANY)
			b = append(b, 0, 0, 0, 0, 0, 0) // TTL, RDLENGTH 0
			r := rawExchange(t, network, addr, b)
			if r.Rcode != mdns.RcodeFormatError || r.Opcode != op || r.IsTsig() != nil {
				t.Errorf("%s opcode %d: %s (%d), opcode %d, TSIG %v; want FORMERR, the request's opcode, no TSIG",
					network, op, mdns.RcodeToString[r.Rcode], r.Rcode, r.Opcode, r.IsTsig())
			}
		}
	}
}
