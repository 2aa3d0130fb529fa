package dns

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// upstream is a real resolver on loopback, UDP and TCP on one port, that
// answers a few off-zone names and counts what it was asked.
type upstream struct {
	addr  string
	mu    sync.Mutex
	asked map[string]int // "udp example.org." → count
}

func (u *upstream) count(network, name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.asked[network+" "+name]
}

func (u *upstream) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.asked {
		n += c
	}
	return n
}

// bigTXT is an answer too large for 512 bytes, so UDP truncates it, and
// small enough for the 1232 bytes the gateway sends over UDP at most.
var bigTXT = func() []string {
	var v []string
	for range 5 {
		v = append(v, strings.Repeat("t", 200))
	}
	return v
}()

// startUpstream serves on 127.0.0.1:0 until the test ends: example.org A
// 192.0.2.80, secure.example.org and legacy.example.org A, validated
// (AD set: [TestRecursionAD]), big.example.org TXT (truncated over UDP), NXDOMAIN for
// nx.example.org (and for nxns.example.org, with NS and addresses
// where its SOA would be), an upward referral to the root at
// up.example.org, ns.example.org NS with the servers' addresses
// ([delegation]), referrals for www.sub.example.org (to servers in
// sub.example.org) and www.out.example.org (to servers elsewhere), a
// CNAME to www.sub.example.org at alias.example.org with that referral,
// the same signed (with the CNAME's RRSIG) at signed.example.org, and at
// answered.example.org with its A answered beside it, the same referral
// after dname.example.org's DNAME to a DNAME asked for at
// www.dname.example.org, one out of the zone at cname.sub.example.org and
// a DNAME at dname.sub.example.org, each with the zone's NS beside it, as
// beside NODATA's SOA at nodata.sub.example.org, and rcode fail for
// anything else when fail is set.
func startUpstream(t *testing.T, fail int) *upstream {
	t.Helper()
	u := &upstream{asked: map[string]int{}}
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, req *mdns.Msg) {
		_, udp := w.RemoteAddr().(*net.UDPAddr)
		network := "tcp"
		if udp {
			network = "udp"
		}
		q := req.Question[0]
		u.mu.Lock()
		u.asked[network+" "+q.Name]++
		u.mu.Unlock()
		resp := new(mdns.Msg)
		resp.SetReply(req)
		resp.RecursionAvailable = true
		hdr := mdns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: mdns.ClassINET, Ttl: 300}
		switch {
		case fail != 0:
			resp.Rcode = fail
		case q.Name == "example.org." && q.Qtype == mdns.TypeA:
			resp.Answer = append(resp.Answer, &mdns.A{Hdr: hdr, A: net.IPv4(192, 0, 2, 80)})
		case q.Name == "secure.example.org." || q.Name == "legacy.example.org.":
			// A name the upstream validated: secure's AD is set as RFC
			// 6840 §5.8 has a validating resolver set it, only for a query
			// with AD or DO set; legacy's always, as before RFC 6840.
			resp.Answer = append(resp.Answer, &mdns.A{Hdr: hdr, A: net.IPv4(192, 0, 2, 81)})
			o := req.IsEdns0()
			resp.AuthenticatedData = q.Name == "legacy.example.org." || req.AuthenticatedData || o != nil && o.Do()
		case q.Name == "big.example.org." && q.Qtype == mdns.TypeTXT:
			for _, v := range bigTXT {
				resp.Answer = append(resp.Answer, &mdns.TXT{Hdr: hdr, Txt: []string{v}})
			}
		case q.Name == "nx.example.org.":
			resp.Rcode = mdns.RcodeNameError
		case q.Name == "nxns.example.org.":
			// NXDOMAIN without the SOA, example.org's NS and their
			// addresses in its place: no referral.
			resp.Rcode = mdns.RcodeNameError
			resp.Ns, resp.Extra = delegation("example.org.", "ns%d.example.org.")
		case q.Name == "up.example.org.":
			// An upward referral, to the root's servers (RFC 9499:
			// what authoritative servers once answered for names they
			// were not authoritative for).
			resp.Ns, resp.Extra = delegation(".", "ns%d.root-servers.example.")
		case q.Name == "ns.example.org." && q.Qtype == mdns.TypeNS:
			resp.Answer, resp.Extra = delegation(q.Name, "ns%d.example.net.")
		case q.Name == "www.sub.example.org.":
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
		case q.Name == "www.out.example.org.":
			resp.Ns, resp.Extra = delegation("out.example.org.", "ns%d.example.net.")
		case q.Name == "alias.example.org." || q.Name == "answered.example.org.":
			// A CNAME into sub.example.org, delegated: alias's answer
			// ends there, a referral for its target (RFC 1034 §4.3.2 step
			// 3b); answered's A is answered, the NS and their addresses
			// beside it only additional information.
			target := "www.sub.example.org."
			resp.Answer = append(resp.Answer, &mdns.CNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeCNAME, Class: mdns.ClassINET, Ttl: 300}, Target: target})
			if q.Name == "answered.example.org." && q.Qtype == mdns.TypeA {
				resp.Answer = append(resp.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: target, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 99)})
			}
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
		case q.Name == "signed.example.org.":
			// alias's referral as a signed zone answers a query with
			// DO: the CNAME with its RRSIG.
			resp.Answer = append(resp.Answer,
				&mdns.CNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeCNAME, Class: mdns.ClassINET, Ttl: 300}, Target: "www.sub.example.org."},
				&mdns.RRSIG{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeRRSIG, Class: mdns.ClassINET, Ttl: 300}, TypeCovered: mdns.TypeCNAME,
					Algorithm: mdns.ECDSAP256SHA256, Labels: 3, OrigTtl: 300, Expiration: 2000000000, Inception: 1700000000, KeyTag: 7,
					SignerName: "example.org.", Signature: strings.Repeat("A", 88)})
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
		case q.Name == "www.dname.example.org." && q.Qtype == mdns.TypeDNAME:
			// A DNAME asked for below a DNAME, which is applied (RFC 6672
			// §3.2 step 3c): its CNAME leads into sub.example.org, whose
			// referral follows.
			resp.Answer = append(resp.Answer,
				&mdns.DNAME{Hdr: mdns.RR_Header{Name: "dname.example.org.", Rrtype: mdns.TypeDNAME, Class: mdns.ClassINET, Ttl: 300}, Target: "sub.example.org."},
				&mdns.CNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeCNAME, Class: mdns.ClassINET, Ttl: 300}, Target: "www.sub.example.org."})
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
		case q.Name == "dname.sub.example.org." && q.Qtype == mdns.TypeDNAME:
			// The DNAME asked for, the zone's NS beside it.
			resp.Answer = append(resp.Answer, &mdns.DNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeDNAME, Class: mdns.ClassINET, Ttl: 300}, Target: "example.net."})
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
		case q.Name == "nodata.sub.example.org.":
			// NODATA, its SOA with the zone's NS beside it: no referral.
			soa, _ := mdns.NewRR("sub.example.org. 300 IN SOA ns0.sub.example.org. hostmaster.sub.example.org. 1 3600 600 86400 300")
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
			resp.Ns = append([]mdns.RR{soa}, resp.Ns...)
		case q.Name == "cname.sub.example.org.":
			// sub.example.org's own answer, as BIND's without minimal
			// responses: a CNAME out of the zone, the zone's NS beside it.
			resp.Answer = append(resp.Answer, &mdns.CNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeCNAME, Class: mdns.ClassINET, Ttl: 300}, Target: "www.example.net."})
			resp.Ns, resp.Extra = delegation("sub.example.org.", "ns%d.sub.example.org.")
		}
		if udp {
			size := mdns.MinMsgSize
			if o := req.IsEdns0(); o != nil {
				size = min(int(o.UDPSize()), 600) // small, so that big still truncates
			}
			resp.Truncate(size)
		}
		_ = w.WriteMsg(resp)
	})
	pc, ln := listenPair(t)
	u.addr = pc.LocalAddr().String()
	for _, srv := range []*mdns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		done := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() {
			defer close(done)
			_ = srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			_ = srv.Shutdown()
			<-done
		})
	}
	return u
}

// listenPair binds UDP and TCP on one free loopback port.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatal("no free port for UDP and TCP")
	return nil, nil
}

// deadAddr is a loopback address where nothing listens, UDP or TCP.
func deadAddr(t *testing.T) string {
	t.Helper()
	return testutil.FreeUDPAddr(t)
}

// startGateway serves testZones with the given recursion settings.
func startGateway(t *testing.T, f *Forwarder, allow ...string) string {
	t.Helper()
	var prefixes []netip.Prefix
	for _, a := range allow {
		prefixes = append(prefixes, netip.MustParsePrefix(a))
	}
	return startWith(t, Options{Zones: func() []Zone { return testZones }, Forwarder: f, RecursionAllow: prefixes})
}

func forwarder(t *testing.T, upstreams ...string) *Forwarder {
	t.Helper()
	f, err := NewForwarder(ForwarderOptions{Upstreams: upstreams})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func query(t *testing.T, network, addr, name string, qtype uint16, rd bool) *mdns.Msg {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = rd
	r, _, err := (&mdns.Client{Net: network, Timeout: 10 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	return r
}

// TestRecursion is DESIGN §8 over real UDP and TCP from 127.0.0.1: off by
// default, offered only to allowed sources asking with RD, relayed with
// RA, SERVFAIL when the upstream is down, and never for a zone's names.
func TestRecursion(t *testing.T) {
	up := startUpstream(t, 0)
	tests := []struct {
		name    string
		gateway string
		qname   string
		rd      bool
		rcode   int
		ra      bool
		answer  string // first answer's data, "" none
		reaches bool   // the upstream is asked
	}{
		{"recursion off", startGateway(t, nil), "example.org.", true, mdns.RcodeRefused, false, "", false},
		{"source not allowed", startGateway(t, forwarder(t, up.addr), "10.0.0.0/8"), "example.org.", true, mdns.RcodeRefused, false, "", false},
		{"no allow-list", startGateway(t, forwarder(t, up.addr)), "example.org.", true, mdns.RcodeRefused, false, "", false},
		{"allowed", startGateway(t, forwarder(t, up.addr), "10.0.0.0/8", "127.0.0.0/8"), "example.org.", true, mdns.RcodeSuccess, true, "192.0.2.80", true},
		{"allowed, NXDOMAIN relayed", startGateway(t, forwarder(t, up.addr), "127.0.0.1/32"), "nx.example.org.", true, mdns.RcodeNameError, true, "", true},
		{"allowed, RD=0", startGateway(t, forwarder(t, up.addr), "127.0.0.1/32"), "example.org.", false, mdns.RcodeRefused, true, "", false},
		{"allowed, upstream down", startGateway(t, forwarder(t, deadAddr(t)), "127.0.0.1/32"), "example.org.", true, mdns.RcodeServerFailure, true, "", false},
		{"allowed, first upstream down", startGateway(t, forwarder(t, deadAddr(t), up.addr), "127.0.0.1/32"), "example.org.", true, mdns.RcodeSuccess, true, "192.0.2.80", true},
		{"allowed, in-zone", startGateway(t, forwarder(t, up.addr), "127.0.0.1/32"), "hello.apps.example.com.", true, mdns.RcodeSuccess, true, "127.0.0.1", false},
		{"allowed, in-zone RD=0", startGateway(t, forwarder(t, up.addr), "127.0.0.1/32"), "fixed.apps.example.com.", false, mdns.RcodeSuccess, true, "127.0.0.9", false},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			before, total := up.count(network, tt.qname), up.total()
			r := query(t, network, tt.gateway, tt.qname, mdns.TypeA, tt.rd)
			name := network + " " + tt.name
			if r.Rcode != tt.rcode || r.RecursionAvailable != tt.ra {
				t.Errorf("%s: rcode %s RA %v, want %s RA %v", name, mdns.RcodeToString[r.Rcode], r.RecursionAvailable, mdns.RcodeToString[tt.rcode], tt.ra)
			}
			got := ""
			if len(r.Answer) > 0 {
				f := strings.Fields(r.Answer[0].String())
				got = f[len(f)-1]
			}
			if got != tt.answer {
				t.Errorf("%s: answer %q, want %q", name, got, tt.answer)
			}
			if r.Authoritative != strings.HasSuffix(tt.qname, ".apps.example.com.") {
				t.Errorf("%s: AA %v", name, r.Authoritative)
			}
			if r.Question[0].Name != tt.qname {
				t.Errorf("%s: question %v", name, r.Question)
			}
			asked := up.count(network, tt.qname) - before
			if want := map[bool]int{true: 1, false: 0}[tt.reaches]; asked != want {
				t.Errorf("%s: the upstream was asked %d times over %s, want %d", name, asked, network, want)
			}
			if !tt.reaches && up.total() != total {
				t.Errorf("%s: the upstream was asked", name)
			}
		}
	}
}

// TestRecursionTruncated: a UDP answer the upstream truncates is asked
// again over TCP, as a resolver would; the client then gets it whole over
// UDP when its EDNS size allows, or truncated (TC) when not.
func TestRecursionTruncated(t *testing.T) {
	up := startUpstream(t, 0)
	gw := startGateway(t, forwarder(t, up.addr), "127.0.0.1/32")

	m := new(mdns.Msg)
	m.SetQuestion("big.example.org.", mdns.TypeTXT)
	m.SetEdns0(4096, false)
	r, _, err := (&mdns.Client{Net: "udp"}).Exchange(m, gw)
	if err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != len(bigTXT) || !r.RecursionAvailable || r.IsEdns0() == nil {
		t.Errorf("EDNS 4096 over UDP: TC %v, %d answers, RA %v, OPT %v; want the whole answer", r.Truncated, len(r.Answer), r.RecursionAvailable, r.IsEdns0())
	}
	if u, tc := up.count("udp", "big.example.org."), up.count("tcp", "big.example.org."); u != 1 || tc != 1 {
		t.Errorf("upstream asked %d over UDP and %d over TCP, want 1 and 1", u, tc)
	}

	r = query(t, "udp", gw, "big.example.org.", mdns.TypeTXT, true)
	if !r.Truncated || r.IsEdns0() != nil {
		t.Errorf("512 bytes over UDP: TC %v, OPT %v; want TC and no OPT", r.Truncated, r.IsEdns0())
	}
	r = query(t, "tcp", gw, "big.example.org.", mdns.TypeTXT, true)
	if r.Truncated || len(r.Answer) != len(bigTXT) {
		t.Errorf("over TCP: TC %v, %d answers", r.Truncated, len(r.Answer))
	}
}

// TestRecursionUpstreamRefuses: an upstream that answers SERVFAIL or
// REFUSED is skipped for the next, and when none is left the client gets
// SERVFAIL.
func TestRecursionUpstreamRefuses(t *testing.T) {
	bad, good := startUpstream(t, mdns.RcodeRefused), startUpstream(t, 0)
	r := query(t, "udp", startGateway(t, forwarder(t, bad.addr, good.addr), "127.0.0.1/32"), "example.org.", mdns.TypeA, true)
	if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 || bad.count("udp", "example.org.") != 1 {
		t.Errorf("refused then good: %s with %d answers", mdns.RcodeToString[r.Rcode], len(r.Answer))
	}
	failing := startUpstream(t, mdns.RcodeServerFailure)
	r = query(t, "tcp", startGateway(t, forwarder(t, bad.addr, failing.addr), "127.0.0.1/32"), "example.org.", mdns.TypeA, true)
	if r.Rcode != mdns.RcodeServerFailure || !r.RecursionAvailable {
		t.Errorf("every upstream failing: %s RA %v, want SERVFAIL with RA", mdns.RcodeToString[r.Rcode], r.RecursionAvailable)
	}
}

// TestForwardEndsWithContext: a forward to an upstream that never answers
// ends when its context does, not at its timeout, and answers SERVFAIL.
func TestForwardEndsWithContext(t *testing.T) {
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	f, err := NewForwarder(ForwarderOptions{Upstreams: []string{hole.LocalAddr().String()}, Timeout: time.Hour, Deadline: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// cancel once the query has reached the upstream
		buf := make([]byte, 512)
		_, _, _ = hole.ReadFrom(buf)
		cancel()
	}()
	req := new(mdns.Msg)
	req.SetQuestion("example.org.", mdns.TypeA)
	if r := f.Forward(ctx, req, "udp"); r.Rcode != mdns.RcodeServerFailure || r.Id != req.Id {
		t.Errorf("got %s id %d, want SERVFAIL id %d", mdns.RcodeToString[r.Rcode], r.Id, req.Id)
	}
}

func TestNewForwarderValidates(t *testing.T) {
	for _, o := range []ForwarderOptions{{}, {Upstreams: []string{"192.0.2.1"}}, {Upstreams: []string{"192.0.2.1:"}}} {
		if _, err := NewForwarder(o); err == nil {
			t.Errorf("NewForwarder(%+v) accepted", o)
		}
	}
	if _, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return nil }, RecursionAllow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}); err == nil {
		t.Error("New accepted an allow-list without a forwarder")
	}
}

// TestResolveRecursive is the HTTP resolve API's core: with a forwarder
// an off-zone name is the upstream's answer with RA; without, Status 5.
func TestResolveRecursive(t *testing.T) {
	up := startUpstream(t, 0)
	q, err := ParseQuestion("example.org", "A")
	if err != nil {
		t.Fatal(err)
	}
	if d := Resolve(q, testZones); d.Status != mdns.RcodeRefused || d.RA || len(d.Answer) != 0 {
		t.Errorf("without recursion: %+v", d)
	}
	d := ResolveRecursive(context.Background(), q, testZones, forwarder(t, up.addr))
	if d.Status != 0 || !d.RA || !d.RD || len(d.Answer) != 1 || d.Answer[0].Data != "192.0.2.80" || d.Answer[0].TTL != 300 {
		t.Errorf("with recursion: %+v", d)
	}
	if d := ResolveRecursive(context.Background(), q, testZones, forwarder(t, deadAddr(t))); d.Status != mdns.RcodeServerFailure || !d.RA {
		t.Errorf("upstream down: %+v", d)
	}
	before := up.total()
	in, _ := ParseQuestion("hello.apps.example.com", "A")
	if d := ResolveRecursive(context.Background(), in, testZones, forwarder(t, up.addr)); d.Status != 0 || !d.RA || len(d.Answer) != 1 || d.Answer[0].Data != "127.0.0.1" || up.total() != before {
		t.Errorf("in-zone: %+v, upstream asked %d", d, up.total()-before)
	}
}

// TestRecursionNoLoop: an upstream list that leads back to a gatehouse
// (here the gateway itself, first, then a real resolver) must not turn one
// query into a chain of forwards that feeds itself: the query it forwarded
// to itself is not forwarded again, so the real upstream is asked exactly
// once and the client gets its answer without waiting out a timeout.
func TestRecursionNoLoop(t *testing.T) {
	up := startUpstream(t, 0)
	pc, ln := listenPair(t)
	self := pc.LocalAddr().String()
	s, err := New(Options{Addr: self, Zones: func() []Zone { return testZones },
		Forwarder: forwarder(t, self, up.addr), RecursionAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	defer func() {
		cancel()
		<-done
	}()
	for _, network := range []string{"udp", "tcp"} {
		r := query(t, network, self, "example.org.", mdns.TypeA, true)
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("%s: %s with %d answers, want the upstream's answer", network, mdns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	// A loop would keep forwarding after the answer; every hop whose ask
	// to itself times out then asks the real upstream too.
	time.Sleep(time.Second)
	if n := up.count("udp", "example.org.") + up.count("tcp", "example.org."); n != 2 {
		t.Errorf("the upstream was asked %d times for 2 queries: the gateway forwards its own forwards", n)
	}
}

// TestRecursionAD: a forward carries the client's AD bit to the upstream
// and brings the upstream's back only to a client that set AD or DO. RFC
// 6840 §5.7 makes AD in a query the signal that the client wants AD in
// the answer (without DNSSEC records, which DO asks for), and §5.8 has a
// validating resolver set AD only for a query with AD or DO: a forward
// that drops the bit leaves such a client, as systemd-resolved and glibc
// with trust-ad are, without AD for a name its upstream validated. And
// an upstream that sets AD for every query (legacy: before RFC 6840)
// must not reach, through the gateway, a client that asked for neither.
func TestRecursionAD(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, 0)
	gw := startGateway(t, forwarder(t, up.addr), "127.0.0.1/32")
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range []struct {
			name   string
			ad, do bool
			want   bool
		}{
			{"secure.example.org.", true, false, true},
			{"secure.example.org.", false, true, true},
			{"secure.example.org.", true, true, true},
			{"secure.example.org.", false, false, false},
			{"legacy.example.org.", true, false, true},
			{"legacy.example.org.", false, true, true},
			{"legacy.example.org.", false, false, false},
		} {
			q := new(mdns.Msg)
			q.SetQuestion(tt.name, mdns.TypeA)
			q.RecursionDesired = true
			q.AuthenticatedData = tt.ad
			if tt.do {
				q.SetEdns0(1232, true)
			}
			r, _, err := (&mdns.Client{Net: network, Timeout: 10 * time.Second}).Exchange(q, gw)
			if err != nil {
				t.Fatalf("%s %s: %v", network, tt.name, err)
			}
			if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 || r.AuthenticatedData != tt.want {
				t.Errorf("%s %s asked with AD=%v DO=%v: %s, %d answers, AD=%v; want NOERROR, 1 answer, AD=%v",
					network, tt.name, tt.ad, tt.do, mdns.RcodeToString[r.Rcode], len(r.Answer), r.AuthenticatedData, tt.want)
			}
		}
	}
	// A DoH JSON answer always says AD: its client reads the bit, so the
	// forward asks for it, as a client setting AD does.
	q, err := ParseQuestion("secure.example.org", "A")
	if err != nil {
		t.Fatal(err)
	}
	if d := ResolveRecursive(context.Background(), q, testZones, forwarder(t, up.addr)); d.Status != 0 || len(d.Answer) != 1 || !d.AD {
		t.Errorf("resolve API: %+v, want the answer with AD", d)
	}
}
