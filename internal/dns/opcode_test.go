package dns

import (
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
