package dns

import (
	"fmt"
	"net"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// rrsetSizes counts the records of each RRset (owner, type, class) in rrs.
func rrsetSizes(rrs []mdns.RR) map[string]int {
	n := map[string]int{}
	for _, rr := range rrs {
		h := rr.Header()
		if h.Rrtype == mdns.TypeOPT {
			continue
		}
		n[fmt.Sprintf("%s %s %s", strings.ToLower(h.Name), mdns.ClassToString[h.Class], mdns.TypeToString[h.Rrtype])]++
	}
	return n
}

// TestTruncatedReplyHoldsWholeRRsets: a UDP reply too large for what the
// query offers (512 without EDNS, else its size up to 1232) has TC set and
// holds no part of an RRset. RFC 2181 §9 allows a partial one there (the
// client should ignore a reply with TC), but one that uses what came (a
// stub, a resolver whose TCP is blocked) would take part of a set for all
// of it and cache it so. The RRsets that fit whole stay: a CNAME before a
// set too large for the size, here. Over TCP the whole of every set comes.
func TestTruncatedReplyHoldsWholeRRsets(t *testing.T) {
	addrs := make([]string, 120)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	txts := make([]string, 20)
	for i := range txts {
		txts[i] = strings.Repeat(string(rune('a'+i)), 100)
	}
	addr := startServerFor(t, []Zone{{Name: "z.test", Gateways: testZones[0].Gateways, Records: []Record{
		{Name: "big.z.test", Type: "A", Values: addrs},
		{Name: "txt.z.test", Type: "TXT", Values: txts},
		{Name: "alias.z.test", Type: "CNAME", Values: []string{"big.z.test"}},
	}}})
	for _, tt := range []struct {
		name  string
		qtype uint16
		all   int // the records of the whole answer
	}{
		{"big.z.test.", mdns.TypeA, 120},
		{"txt.z.test.", mdns.TypeTXT, 20},
		{"alias.z.test.", mdns.TypeA, 121},
	} {
		full := ask(t, "tcp", addr, tt.name, tt.qtype, 0)
		want := rrsetSizes(full.Answer)
		if full.Truncated || len(full.Answer) != tt.all {
			t.Fatalf("TCP %s: TC=%v with %d answers, want all %d", tt.name, full.Truncated, len(full.Answer), tt.all)
		}
		for _, edns := range []uint16{0, 512, 1232} {
			t.Run(fmt.Sprintf("%s/edns=%d", tt.name, edns), func(t *testing.T) {
				q := new(mdns.Msg)
				q.SetQuestion(tt.name, tt.qtype)
				if edns != 0 {
					q.SetEdns0(edns, false)
				}
				wire := rawUDP(t, addr, q)
				r := new(mdns.Msg)
				if err := r.Unpack(wire); err != nil {
					t.Fatal(err)
				}
				if limit := max(int(edns), mdns.MinMsgSize); !r.Truncated || len(wire) > limit {
					t.Errorf("%d bytes, TC=%v; want TC, at most %d bytes", len(wire), r.Truncated, limit)
				}
				for set, n := range rrsetSizes(append(append(r.Answer, r.Ns...), r.Extra...)) {
					if n != want[set] {
						t.Errorf("%s: %d of its %d records; a truncated reply holds an RRset whole or not at all", set, n, want[set])
					}
				}
				if tt.name == "alias.z.test." && (len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != mdns.TypeCNAME) {
					t.Errorf("answer %v: want the CNAME, which fits whole", r.Answer)
				}
			})
		}
	}
}

// TestTruncateRRsetsKeepsOPTWhenAdditionalCut: a forwarded reply whose
// additional section (the upstream's records, then our OPT) is cut keeps
// its OPT (RFC 6891 §7) and no part of an RRset there. Truncate puts the
// OPT back in place after the records it keeps, over one it cut: read
// from that slice, the set counts would take the OPT for cut and drop it.
func TestTruncateRRsetsKeepsOPTWhenAdditionalCut(t *testing.T) {
	q := new(mdns.Msg)
	q.SetQuestion("www.example.org.", mdns.TypeNS)
	resp := new(mdns.Msg).SetReply(q)
	for i := range 6 {
		ns := fmt.Sprintf("ns%d.%s.example.org.", i, strings.Repeat("n", 60))
		rr, _ := mdns.NewRR("www.example.org. 60 IN NS " + ns)
		resp.Answer = append(resp.Answer, rr)
		for j := range 6 {
			rr, _ := mdns.NewRR(fmt.Sprintf("%s 60 IN A 192.0.2.%d", ns, 10*i+j))
			resp.Extra = append(resp.Extra, rr)
		}
	}
	resp.SetEdns0(ednsSize, false)
	all := rrsetSizes(resp.Extra)
	truncateRRsets(resp, mdns.MinMsgSize)
	b, err := resp.Pack()
	if err != nil {
		t.Fatal(err)
	}
	r := new(mdns.Msg)
	if err := r.Unpack(b); err != nil {
		t.Fatal(err)
	}
	// TC clear: the answer is whole (TestTruncatedAdditionalIsNotTC).
	if len(b) > mdns.MinMsgSize || r.Truncated || r.IsEdns0() == nil || len(r.Answer) != 6 {
		t.Errorf("%d bytes, TC=%v, OPT %v, %d answers; want at most 512, no TC, the OPT, all 6 NS", len(b), r.Truncated, r.IsEdns0(), len(r.Answer))
	}
	for set, n := range rrsetSizes(r.Extra) {
		if n != all[set] {
			t.Errorf("%s: %d of its %d records", set, n, all[set])
		}
	}
}

// delegation is owner's four NS records, to the servers named by target
// (a format of their number), and ten addresses of each: together past
// 512 bytes, the NS records alone far under.
func delegation(owner, target string) (ns, addrs []mdns.RR) {
	for i := range 4 {
		server := fmt.Sprintf(target, i)
		ns = append(ns, &mdns.NS{Hdr: mdns.RR_Header{Name: owner, Rrtype: mdns.TypeNS, Class: mdns.ClassINET, Ttl: 300}, Ns: server})
		for j := range 10 {
			addrs = append(addrs, &mdns.A{Hdr: mdns.RR_Header{Name: server, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 300},
				A: net.IPv4(192, 0, 2, byte(10*i+j))})
		}
	}
	return ns, addrs
}

// TestTruncatedAdditionalIsNotTC: a forwarded reply too large for UDP
// only by its additional records (the NS servers' addresses) loses
// whole RRsets of them but is not marked TC: RFC 2181 §9 sets TC only
// when an RRset the reply needs does not fit, never "merely because some
// extra information could have been included", additional section
// processing included. A client that gets TC asks again over TCP for
// nothing, and miekg/dns's Truncate sets it for any record cut. A
// referral is the exception (RFC 9471 §3.1): the addresses of name
// servers inside the delegated zone (in-domain glue) are needed, and
// when they do not all fit TC is set; those of servers elsewhere are not.
// A CNAME whose target is in a delegated zone ends in the same referral,
// for the target (RFC 1034 §4.3.2 step 3b), and needs that glue as much;
// once the target is answered, or is outside the zone of the NS beside
// the CNAME, those NS and addresses are only additional information, and
// a CNAME (or DNAME) asked for, or ANY, answers the question; a DNAME
// asked for below another DNAME does not, that one's CNAME leading on
// into the zone. NS beside NODATA's SOA are no referral either.
func TestTruncatedAdditionalIsNotTC(t *testing.T) {
	up := startUpstream(t, 0)
	gw := startGateway(t, forwarder(t, up.addr), "127.0.0.1/32")
	for _, tt := range []struct {
		name  string
		qtype uint16
		tc    bool
	}{
		{"ns.example.org.", mdns.TypeNS, false},
		{"www.out.example.org.", mdns.TypeA, false},
		{"www.sub.example.org.", mdns.TypeA, true},
		{"alias.example.org.", mdns.TypeA, true},
		{"signed.example.org.", mdns.TypeA, true},
		{"alias.example.org.", mdns.TypeCNAME, false},
		{"alias.example.org.", mdns.TypeANY, false},
		{"answered.example.org.", mdns.TypeA, false},
		{"cname.sub.example.org.", mdns.TypeA, false},
		{"dname.sub.example.org.", mdns.TypeDNAME, false},
		{"www.dname.example.org.", mdns.TypeDNAME, true},
		{"nodata.sub.example.org.", mdns.TypeA, false},
	} {
		full := query(t, "tcp", gw, tt.name, tt.qtype, true)
		if full.Truncated || countNS(full.Answer)+countNS(full.Ns) != 4 || len(full.Extra) != 40 {
			t.Fatalf("%s over TCP: TC=%v, want 4 NS and their 40 addresses:\n%v", tt.name, full.Truncated, full)
		}
		q := new(mdns.Msg)
		q.SetQuestion(tt.name, tt.qtype)
		q.RecursionDesired = true
		wire := rawUDP(t, gw, q)
		r := new(mdns.Msg)
		if err := r.Unpack(wire); err != nil {
			t.Fatal(err)
		}
		if len(wire) > mdns.MinMsgSize || r.Rcode != mdns.RcodeSuccess || countNS(r.Answer)+countNS(r.Ns) != 4 ||
			len(r.Answer) != len(full.Answer) || len(r.Extra) >= 40 {
			t.Errorf("%s %s over UDP: %d bytes, %s, %d NS, %d answers, %d addresses; want at most 512, NOERROR, all 4 NS, all %d answers, fewer than 40",
				tt.name, mdns.TypeToString[tt.qtype], len(wire), mdns.RcodeToString[r.Rcode], countNS(r.Answer)+countNS(r.Ns), len(r.Answer), len(r.Extra), len(full.Answer))
		}
		if r.Truncated != tt.tc {
			t.Errorf("%s %s over UDP: TC=%v, want %v:\n%v", tt.name, mdns.TypeToString[tt.qtype], r.Truncated, tt.tc, r)
		}
		want := rrsetSizes(full.Extra)
		for set, n := range rrsetSizes(r.Extra) {
			if n != want[set] {
				t.Errorf("%s: %s: %d of its %d records", tt.name, set, n, want[set])
			}
		}
	}
}

// TestTruncatedGlueOfNoReferral: TC is set for cut glue only in a
// referral (RFC 9471 §3.1), which is NOERROR: an NXDOMAIN whose
// authority section holds NS records and the additional section their
// addresses, in place of the SOA, is whole without them (RFC 2181 §9),
// and one cut of some of them is sent without TC, not sent to TCP for
// nothing. An upward referral, to the root's servers, is a referral (RFC
// 9499) whose servers are in the root's domain, as every name is: its
// glue cut, it has TC set, as any referral's.
func TestTruncatedGlueOfNoReferral(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, 0)
	gw := startGateway(t, forwarder(t, up.addr), "127.0.0.1/32")
	for _, tt := range []struct {
		name  string
		rcode int
		tc    bool
	}{
		{"nxns.example.org.", mdns.RcodeNameError, false},
		{"up.example.org.", mdns.RcodeSuccess, true},
	} {
		full := query(t, "tcp", gw, tt.name, mdns.TypeA, true)
		if full.Rcode != tt.rcode || full.Truncated || countNS(full.Ns) != 4 || len(full.Extra) != 40 {
			t.Fatalf("%s over TCP: %s TC=%v, want %s, 4 NS and their 40 addresses:\n%v", tt.name,
				mdns.RcodeToString[full.Rcode], full.Truncated, mdns.RcodeToString[tt.rcode], full)
		}
		q := new(mdns.Msg)
		q.SetQuestion(tt.name, mdns.TypeA)
		q.RecursionDesired = true
		wire := rawUDP(t, gw, q)
		r := new(mdns.Msg)
		if err := r.Unpack(wire); err != nil {
			t.Fatal(err)
		}
		if len(wire) > mdns.MinMsgSize || r.Rcode != tt.rcode || countNS(r.Ns) != 4 || len(r.Extra) >= 40 || r.Truncated != tt.tc {
			t.Errorf("%s over UDP: %d bytes, %s, %d NS, %d addresses, TC=%v; want at most 512, %s, all 4 NS, fewer than 40, TC=%v",
				tt.name, len(wire), mdns.RcodeToString[r.Rcode], countNS(r.Ns), len(r.Extra), r.Truncated, mdns.RcodeToString[tt.rcode], tt.tc)
		}
	}
}

// countNS counts the NS records in rrs.
func countNS(rrs []mdns.RR) int {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype == mdns.TypeNS {
			n++
		}
	}
	return n
}
