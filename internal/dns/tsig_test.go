package dns

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// rawTCP sends b framed over TCP to addr and returns the reply's bytes.
func rawTCP(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)); err != nil {
		t.Fatal(err)
	}
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

// TestTSIGSignedQueryGetsBADKEY: this server knows no TSIG key, so a
// signed query, in a zone or out of every one, over UDP and TCP, gets
// NOTAUTH with an unsigned TSIG saying BADKEY (RFC 8945 §5.2.2), its key
// and algorithm the query's, last after the OPT; and a TSIG that is not
// the additional section's last record gets FORMERR (§5.2).
func TestTSIGSignedQueryGetsBADKEY(t *testing.T) {
	addr := startServer(t)
	const key = "platform-key."
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"fixed.apps.example.com.", "example.org."} {
			q := new(mdns.Msg)
			q.SetQuestion(name, mdns.TypeA)
			q.SetEdns0(1232, false)
			q.SetTsig(key, mdns.HmacSHA256, 300, time.Now().Unix())
			b, _, err := mdns.TsigGenerate(q, "c2VjcmV0LXNlY3JldC1zZWNyZXQ=", "", false)
			if err != nil {
				t.Fatal(err)
			}
			var raw []byte
			if network == "udp" {
				c, err := net.Dial("udp", addr)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(3 * time.Second))
				if _, err := c.Write(b); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 65535)
				n, err := c.Read(buf)
				c.Close()
				if err != nil {
					t.Fatal(err)
				}
				raw = buf[:n]
			} else {
				raw = rawTCP(t, addr, b)
			}
			m := new(mdns.Msg)
			if err := m.Unpack(raw); err != nil {
				t.Fatalf("%s %s: %v", network, name, err)
			}
			if m.Rcode != mdns.RcodeNotAuth || len(m.Answer) != 0 || len(m.Question) != 1 || m.Question[0].Name != name {
				t.Errorf("%s %s: %s with %d answers, want NOTAUTH and the question:\n%v", network, name, mdns.RcodeToString[m.Rcode], len(m.Answer), m)
			}
			ts := m.IsTsig()
			if ts == nil || m.IsEdns0() == nil {
				t.Fatalf("%s %s: want OPT, then TSIG last:\n%v", network, name, m)
			}
			if ts.Hdr.Name != key || ts.Algorithm != mdns.HmacSHA256 || ts.Error != mdns.RcodeBadKey || ts.MACSize != 0 || ts.MAC != "" || ts.OrigId != q.Id || ts.Hdr.Class != mdns.ClassANY {
				t.Errorf("%s %s: TSIG %v, want BADKEY, unsigned, for %s %s, original id %d", network, name, ts, key, mdns.HmacSHA256, q.Id)
			}
		}
	}

	// A TSIG before the OPT is not last: FORMERR.
	q := new(mdns.Msg)
	q.SetQuestion("fixed.apps.example.com.", mdns.TypeA)
	q.Extra = append(q.Extra, &mdns.TSIG{Hdr: mdns.RR_Header{Name: key, Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
		Algorithm: mdns.HmacSHA256, TimeSigned: uint64(time.Now().Unix()), Fudge: 300, OrigId: q.Id})
	q.SetEdns0(1232, false)
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m := new(mdns.Msg)
	if err := m.Unpack(rawTCP(t, addr, b)); err != nil {
		t.Fatal(err)
	}
	if m.Rcode != mdns.RcodeFormatError || m.IsTsig() != nil {
		t.Errorf("TSIG before OPT: %s, want FORMERR without a TSIG:\n%v", mdns.RcodeToString[m.Rcode], m)
	}
}

// TestTSIGBadKeyRateLimited: over UDP, NOTAUTH/BADKEY is an error like
// any other for the rate limit; its slipped reply has TC set, no answer,
// and still ends with the unsigned BADKEY TSIG.
func TestTSIGBadKeyRateLimited(t *testing.T) {
	addr, _, limited := rrlServer(t, Options{RateLimit: 1, RateLimitSlip: 1})
	a := newUDPAsker(t, addr, "", limited)
	for i, want := range []string{"NOTAUTH", "tc", "tc"} {
		q := rrlQuery("fixed.apps.example.com.", mdns.TypeA, true)
		q.SetTsig("platform-key.", mdns.HmacSHA256, 300, time.Now().Unix())
		b, _, err := mdns.TsigGenerate(q, "c2VjcmV0LXNlY3JldC1zZWNyZXQ=", "", false)
		if err != nil {
			t.Fatal(err)
		}
		m := a.askBytes(b, q.Id)
		if m == nil {
			t.Fatalf("query %d: dropped, want %s", i+1, want)
		}
		got := mdns.RcodeToString[m.Rcode]
		if m.Truncated {
			got = "tc"
		}
		if got != want {
			t.Errorf("query %d: %s, want %s", i+1, got, want)
		}
		if ts := m.IsTsig(); m.Rcode != mdns.RcodeNotAuth || ts == nil || ts.Error != mdns.RcodeBadKey || ts.MAC != "" || len(m.Answer) != 0 || m.IsEdns0() == nil {
			t.Errorf("query %d: %v, want NOTAUTH ending with an unsigned BADKEY TSIG", i+1, m)
		}
	}
}

// longestName is a name of 255 bytes on the wire, the most a name holds,
// its labels made of c.
func longestName(c string) string {
	l63 := strings.Repeat(c, 63) + "."
	return l63 + l63 + l63 + strings.Repeat(c, 61) + "."
}

// TestTSIGBadKeyFitsUDP: the NOTAUTH reply to a signed query carries the
// query's key and algorithm names back in its BADKEY TSIG, each up to 255
// bytes, and with the longest question too, about 800 bytes. Over UDP
// it must still fit what the query offers (512 without EDNS), as every
// UDP reply here does: what does not fit is the TSIG, cut with TC set
// (RFC 1035 §4.1.1), and the client asks again over TCP, where the whole
// BADKEY reply goes out. With room offered, the TSIG is there.
func TestTSIGBadKeyFitsUDP(t *testing.T) {
	addr := startServer(t)
	key, alg := longestName("k"), longestName("h")
	query := func(edns uint16) (*mdns.Msg, []byte) {
		q := new(mdns.Msg)
		q.SetQuestion(longestName("q"), mdns.TypeA)
		if edns != 0 {
			q.SetEdns0(edns, false)
		}
		q.Extra = append(q.Extra, &mdns.TSIG{Hdr: mdns.RR_Header{Name: key, Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
			Algorithm: alg, TimeSigned: uint64(time.Now().Unix()), Fudge: 300, MACSize: 32,
			MAC: strings.Repeat("ab", 32), OrigId: q.Id})
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return q, b
	}
	for _, tt := range []struct {
		edns     uint16 // 0: no OPT
		size     int    // the most the UDP reply may hold
		withTSIG bool   // over UDP
	}{
		{0, 512, false},
		{512, 512, false},
		{1232, 1232, true},
	} {
		t.Run(fmt.Sprintf("edns=%d", tt.edns), func(t *testing.T) {
			q, b := query(tt.edns)
			c, err := net.Dial("udp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 65535)
			n, err := c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			m := new(mdns.Msg)
			if err := m.Unpack(buf[:n]); err != nil {
				t.Fatal(err)
			}
			if n > tt.size {
				t.Errorf("UDP reply of %d bytes, past the %d the query offers", n, tt.size)
			}
			if m.Rcode != mdns.RcodeNotAuth || m.Id != q.Id || len(m.Question) != 1 || m.Question[0].Name != q.Question[0].Name || (m.IsEdns0() != nil) != (tt.edns != 0) {
				t.Errorf("UDP reply %v: want NOTAUTH to the query, its question, OPT as asked", m)
			}
			if has := m.IsTsig() != nil; has != tt.withTSIG || m.Truncated == tt.withTSIG {
				t.Errorf("UDP reply of %d bytes, TC=%v, with TSIG %v: want TSIG %v, TC the opposite", n, m.Truncated, has, tt.withTSIG)
			}
			// Over TCP, the whole reply.
			if err := m.Unpack(rawTCP(t, addr, b)); err != nil {
				t.Fatal(err)
			}
			if ts := m.IsTsig(); m.Rcode != mdns.RcodeNotAuth || m.Truncated || ts == nil || ts.Hdr.Name != key || ts.Algorithm != alg || ts.Error != mdns.RcodeBadKey {
				t.Errorf("TCP reply %v: want NOTAUTH with the BADKEY TSIG for the query's key", m)
			}
		})
	}
}

// TestTSIGBadKeyUDPKeepsTSIG: a client signing with a key the server does
// not know, asking miekg/dns's way over UDP, learns so from the reply it
// can read: NOTAUTH with the unsigned BADKEY TSIG (RFC 8945 §5.3.2),
// within the size it offers (512 without EDNS). The reply holds none of
// the name's records, however many there are, so nothing is cut from a
// reply with a key name of usual length. When the question and the TSIG
// together pass the size, the TSIG stays and the question goes, TC set
// (RFC 8945 §5.3: the reply is altered so that a TSIG can be included);
// only a TSIG past the size on its own is cut, TC set, for the client to
// ask again over TCP.
func TestTSIGBadKeyUDPKeepsTSIG(t *testing.T) {
	addrs := make([]string, 120)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.%d.%d", i/250, i%250+1)
	}
	addr := startServerFor(t, []Zone{{Name: "z.test", Gateways: testZones[0].Gateways,
		Records: []Record{{Name: "big.z.test", Type: "A", Values: addrs}}}})
	const secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQ="
	for _, tt := range []struct {
		name, key, qname string
		edns             uint16 // 0: no OPT
		tc, question     bool   // want TC set, the question kept
	}{
		{"big answer", "platform-key.", "big.z.test.", 0, false, true},
		{"big answer edns=1232", "platform-key.", "big.z.test.", 1232, false, true},
		{"long names", longestName("k"), longestName("q"), 0, true, false},
		{"long names edns=512", longestName("k"), longestName("q"), 512, true, false},
		// An OPT offering less than 512 offers 512 (RFC 6891 §6.2.5):
		// the TSIG still fits once the question goes.
		{"long names edns=100", longestName("k"), longestName("q"), 100, true, false},
		{"long names edns=1232", longestName("k"), longestName("q"), 1232, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			limit := max(int(tt.edns), mdns.MinMsgSize)
			q := new(mdns.Msg)
			q.SetQuestion(tt.qname, mdns.TypeA)
			if tt.edns != 0 {
				q.SetEdns0(tt.edns, false)
			}
			q.SetTsig(tt.key, mdns.HmacSHA256, 300, time.Now().Unix())
			// A receive buffer past any reply, so that len(raw) is what
			// the server sent, not what a 512-byte buffer kept of it.
			co, err := (&mdns.Client{Net: "udp", UDPSize: 65535}).Dial(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer co.Close()
			co.TsigSecret = map[string]string{tt.key: secret}
			co.SetDeadline(time.Now().Add(3 * time.Second))
			if err := co.WriteMsg(q); err != nil {
				t.Fatal(err)
			}
			raw, err := co.ReadMsgHeader(nil)
			if err != nil {
				t.Fatal(err)
			}
			m := new(mdns.Msg)
			if err := m.Unpack(raw); err != nil {
				t.Fatal(err)
			}
			if len(raw) > limit {
				t.Errorf("UDP reply of %d bytes, past the %d the query offers", len(raw), limit)
			}
			ts := m.IsTsig()
			if m.Id != q.Id || m.Rcode != mdns.RcodeNotAuth || len(m.Answer) != 0 || len(m.Ns) != 0 || ts == nil || ts.Error != mdns.RcodeBadKey || ts.MAC != "" || ts.Hdr.Name != tt.key || ts.OrigId != q.Id {
				t.Fatalf("UDP reply of %d bytes:\n%v\nwant NOTAUTH to the query, no records, ending with an unsigned BADKEY TSIG for %s", len(raw), m, tt.key)
			}
			if (m.IsEdns0() != nil) != (tt.edns != 0) {
				t.Errorf("OPT %v, want one iff the query had one", m.IsEdns0())
			}
			if m.Truncated != tt.tc || (len(m.Question) == 1) != tt.question {
				t.Errorf("TC=%v with question %v, want TC=%v and the question kept %v", m.Truncated, m.Question, tt.tc, tt.question)
			}
			if tt.question && m.Question[0].Name != tt.qname {
				t.Errorf("question %v, want %s", m.Question[0], tt.qname)
			}
		})
	}
}

// TestTSIGEarlyErrorsCarryBADKEY: a signed request refused before its
// TSIG is looked at, BADVERS for an EDNS version other than 0 or FORMERR
// for OPT records that break RFC 6891 §6.1.1, still gets a TSIG back: RFC
// 8945 §5.2 REQUIRES one in the response to a request whose TSIG is in
// place and can be read, and §5.3 forbids signing it with a key the
// server does not know, so it is the unsigned one saying BADKEY (§5.3.2),
// as the NOTAUTH reply's is. Without it the signing client reads the
// reply as a forgery. Whoever answers, serve (QUERY) or screen (UPDATE),
// over UDP and TCP. A TSIG out of place is FORMERR without one.
func TestTSIGEarlyErrorsCarryBADKEY(t *testing.T) {
	addr := startServer(t)
	const key = "platform-key."
	opt := func(v uint8) mdns.RR {
		o := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		o.SetUDPSize(1232)
		o.SetVersion(v)
		return o
	}
	tsig := func(q *mdns.Msg) mdns.RR {
		return &mdns.TSIG{Hdr: mdns.RR_Header{Name: key, Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
			Algorithm: mdns.HmacSHA256, TimeSigned: uint64(time.Now().Unix()), Fudge: 300, MACSize: 32,
			MAC: strings.Repeat("ab", 32), OrigId: q.Id}
	}
	for _, tt := range []struct {
		name  string
		extra func(q *mdns.Msg) []mdns.RR
		rcode int
		tsig  bool // the reply carries the BADKEY TSIG
		opt   bool // and an OPT
	}{
		{"EDNS version 1", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(1), tsig(q)} }, mdns.RcodeBadVers, true, true},
		{"two OPTs", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{opt(0), opt(0), tsig(q)} }, mdns.RcodeFormatError, true, false},
		{"OPT in the answer", func(q *mdns.Msg) []mdns.RR { q.Answer = []mdns.RR{opt(0)}; return []mdns.RR{tsig(q)} }, mdns.RcodeFormatError, true, false},
		{"two OPTs, the TSIG before them", func(q *mdns.Msg) []mdns.RR { return []mdns.RR{tsig(q), opt(0), opt(0)} }, mdns.RcodeFormatError, false, false},
	} {
		for _, network := range []string{"udp", "tcp"} {
			for _, op := range []int{mdns.OpcodeQuery, mdns.OpcodeUpdate} {
				q := new(mdns.Msg)
				q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
				q.Opcode = op
				q.Extra = tt.extra(q)
				b, err := q.Pack()
				if err != nil {
					t.Fatal(err)
				}
				r := rawExchange(t, network, addr, b)
				name := fmt.Sprintf("%s %s opcode %d", tt.name, network, op)
				if r.Rcode != tt.rcode || r.Id != q.Id || r.Opcode != op || len(r.Question) != 1 || (r.IsEdns0() != nil) != tt.opt {
					t.Errorf("%s: %s (%d), OPT %v:\n%v\nwant %s, the question, OPT %v", name, mdns.RcodeToString[r.Rcode], r.Rcode, r.IsEdns0(), r, mdns.RcodeToString[tt.rcode], tt.opt)
				}
				ts := r.IsTsig()
				if !tt.tsig {
					if ts != nil {
						t.Errorf("%s: TSIG %v, want none", name, ts)
					}
					continue
				}
				if ts == nil || ts.Hdr.Name != key || ts.Algorithm != mdns.HmacSHA256 || ts.Error != mdns.RcodeBadKey || ts.MACSize != 0 || ts.MAC != "" || ts.OrigId != q.Id {
					t.Errorf("%s: TSIG %v, want the unsigned BADKEY one for %s, original id %d", name, ts, key, q.Id)
				}
			}
		}
	}
}
