package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

var testZones = []Zone{{
	Name:     "apps.example.com",
	Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
	TTL:      30,
	Records: []Record{
		{Name: "_gatehouse-challenge.shop.apps.example.com", Type: "TXT", Values: []string{"tok123"}},
		{Name: "www.apps.example.com", Type: "CNAME", Values: []string{"hello.apps.example.com"}},
		{Name: "fixed.apps.example.com", Type: "A", TTL: 5, Values: []string{"127.0.0.9"}},
	},
}}

// startServer serves testZones on a random loopback port over UDP and TCP.
func startServer(t *testing.T) string {
	t.Helper()
	return startServerFor(t, testZones)
}

// startServerFor serves zones on a random loopback port over UDP and TCP.
func startServerFor(t *testing.T, zones []Zone) string {
	t.Helper()
	return startWith(t, Options{Zones: func() []Zone { return zones }})
}

// startWith serves a server built from o on a random loopback port over
// UDP and TCP until t ends, and returns its address.
func startWith(t *testing.T, o Options) string {
	t.Helper()
	o.Addr = "127.0.0.1:0"
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "serve", func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	return pc.LocalAddr().String()
}

// indexed returns a copy of zones with each [Zone.Index]ed, as a server's
// zone source serves them.
func indexed(zones []Zone) []Zone {
	out := slices.Clone(zones)
	for i := range out {
		out[i].Index()
	}
	return out
}

// TestQueries asks the same questions of the zones scanned and indexed:
// the index changes how records are found, never what is answered.
func TestQueries(t *testing.T) {
	for _, idx := range []bool{false, true} {
		t.Run(fmt.Sprintf("indexed=%v", idx), func(t *testing.T) {
			zones := testZones
			if idx {
				zones = indexed(zones)
			}
			testQueries(t, startServerFor(t, zones))
		})
	}
}

func testQueries(t *testing.T, addr string) {
	tests := []struct {
		name  string
		qtype uint16
		rcode int
		want  []string // answer RRs, as text without the header TTL detail
	}{
		{"hello.apps.example.com.", mdns.TypeA, mdns.RcodeSuccess, []string{"A 127.0.0.1"}},
		{"HELLO.Apps.Example.com.", mdns.TypeA, mdns.RcodeSuccess, []string{"A 127.0.0.1"}},
		{"deep.x.apps.example.com.", mdns.TypeAAAA, mdns.RcodeSuccess, []string{"AAAA ::1"}},
		{"apps.example.com.", mdns.TypeA, mdns.RcodeSuccess, []string{"A 127.0.0.1"}},
		{"apps.example.com.", mdns.TypeSOA, mdns.RcodeSuccess, []string{"SOA ns.apps.example.com."}},
		{"apps.example.com.", mdns.TypeNS, mdns.RcodeSuccess, []string{"NS ns.apps.example.com."}},
		{"_gatehouse-challenge.shop.apps.example.com.", mdns.TypeTXT, mdns.RcodeSuccess, []string{`TXT "tok123"`}},
		{"www.apps.example.com.", mdns.TypeA, mdns.RcodeSuccess, []string{"CNAME hello.apps.example.com.", "A 127.0.0.1"}},
		{"fixed.apps.example.com.", mdns.TypeA, mdns.RcodeSuccess, []string{"A 127.0.0.9"}},
		{"hello.apps.example.com.", mdns.TypeMX, mdns.RcodeSuccess, nil},
		{"example.com.", mdns.TypeA, mdns.RcodeRefused, nil},
		{"google.com.", mdns.TypeA, mdns.RcodeRefused, nil},
		{"xapps.example.com.", mdns.TypeA, mdns.RcodeRefused, nil},
	}
	for _, proto := range []string{"udp", "tcp"} {
		c := &mdns.Client{Net: proto}
		for _, tt := range tests {
			m := new(mdns.Msg)
			m.SetQuestion(tt.name, tt.qtype)
			m.RecursionDesired = true
			r, _, err := c.Exchange(m, addr)
			if err != nil {
				t.Fatalf("%s %s: %v", proto, tt.name, err)
			}
			if r.Rcode != tt.rcode {
				t.Errorf("%s %s %s: rcode %s, want %s", proto, tt.name, mdns.TypeToString[tt.qtype], mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tt.rcode])
				continue
			}
			if r.RecursionAvailable {
				t.Errorf("%s %s: RA set; recursion is off", proto, tt.name)
			}
			if tt.rcode == mdns.RcodeSuccess && !r.Authoritative {
				t.Errorf("%s %s: not authoritative", proto, tt.name)
			}
			var got []string
			for _, rr := range r.Answer {
				f := strings.Fields(rr.String())
				got = append(got, f[3]+" "+f[4])
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("%s %s %s: answer %q, want %q", proto, tt.name, mdns.TypeToString[tt.qtype], got, tt.want)
			}
			if tt.rcode == mdns.RcodeSuccess && len(tt.want) == 0 && len(r.Ns) != 1 {
				t.Errorf("%s %s: NODATA without SOA in authority", proto, tt.name)
			}
		}
	}
}

// TestWildcardRecords: a record set the API accepts at *.{name} (the
// wildcard label first) answers every name under {name} that has no
// records of its own, over the zone's gateways.
// Scanned and indexed alike.
func TestWildcardRecords(t *testing.T) {
	zones := []Zone{{
		Name:     "apps.example.com",
		Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		Records: []Record{
			{Name: "*.apps.example.com", Type: "A", Values: []string{"192.0.2.1"}},
			{Name: "*.EU.apps.example.com.", Type: "A", Values: []string{"192.0.2.2"}},
			{Name: "*.eu.apps.example.com", Type: "TXT", Values: []string{"eu"}},
			{Name: "*.cdn.apps.example.com", Type: "CNAME", Values: []string{"edge.example.net"}},
			{Name: "Own.eu.apps.example.com", Type: "A", Values: []string{"192.0.2.3"}},
			{Name: "@", Type: "TXT", Values: []string{"apex"}},
		},
	}}
	for _, idx := range []bool{false, true} {
		t.Run(fmt.Sprintf("indexed=%v", idx), func(t *testing.T) {
			zs := zones
			if idx {
				zs = indexed(zones)
			}
			testWildcardRecords(t, startServerFor(t, zs))
		})
	}
}

func testWildcardRecords(t *testing.T, addr string) {
	tests := []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"hello.apps.example.com.", mdns.TypeA, "A 192.0.2.1"},
		{"a.b.apps.example.com.", mdns.TypeA, "A 192.0.2.1"},
		{"shop.eu.apps.example.com.", mdns.TypeA, "A 192.0.2.2"},
		{"x.y.eu.apps.example.com.", mdns.TypeTXT, `TXT "eu"`},
		{"img.cdn.apps.example.com.", mdns.TypeA, "CNAME edge.example.net."},
		{"own.eu.apps.example.com.", mdns.TypeA, "A 192.0.2.3"},
		{"apps.example.com.", mdns.TypeA, "A 127.0.0.1"}, // the apex is not under its wildcard
		{"apps.example.com.", mdns.TypeTXT, `TXT "apex"`},
		{"own.EU.apps.example.com.", mdns.TypeTXT, ""}, // NODATA: own has records, so no wildcard
	}
	c := &mdns.Client{Net: "udp"}
	for _, tt := range tests {
		m := new(mdns.Msg)
		m.SetQuestion(tt.name, tt.qtype)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []string
		for _, rr := range r.Answer {
			f := strings.Fields(rr.String())
			got = append(got, f[3]+" "+f[4])
			if f[0] != tt.name {
				t.Errorf("%s: answer owner %s, want the query name", tt.name, f[0])
			}
		}
		if strings.Join(got, "|") != tt.want {
			t.Errorf("%s %s: answer %q, want %q", tt.name, mdns.TypeToString[tt.qtype], got, tt.want)
		}
	}
}

// TestNSNameNeverAnAlias: ns.{zone}, the name the zone's NS and SOA give
// as its name server, is never answered with a CNAME, though a CNAME at
// *.{zone} covers every other name: a name server name must not be an
// alias (RFC 2181 §10.3; resolvers such as BIND skip such a server), as
// the control API refuses a CNAME at ns.{zone} itself. It answers the
// gateways then, as with no wildcard, and its own addresses when it has
// them; the wildcard's addresses, which are no alias, still cover it.
func TestNSNameNeverAnAlias(t *testing.T) {
	gw := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	zones := []Zone{
		{Name: "alias.example", Gateways: gw, Records: []Record{
			{Name: "*.alias.example", Type: "CNAME", Values: []string{"lb.example.net"}},
		}},
		{Name: "own.example", Gateways: gw, Records: []Record{
			{Name: "*.own.example", Type: "CNAME", Values: []string{"lb.example.net"}},
			{Name: "ns.own.example", Type: "A", Values: []string{"192.0.2.53"}},
		}},
		{Name: "addr.example", Gateways: gw, Records: []Record{
			{Name: "*.addr.example", Type: "A", Values: []string{"192.0.2.1"}},
		}},
	}
	tests := []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"ns.alias.example.", mdns.TypeA, "A 127.0.0.1"},
		{"NS.Alias.example.", mdns.TypeA, "A 127.0.0.1"},
		{"ns.alias.example.", mdns.TypeCNAME, ""},
		{"ns.alias.example.", mdns.TypeTXT, ""},
		{"hello.alias.example.", mdns.TypeA, "CNAME lb.example.net."},
		{"x.ns.alias.example.", mdns.TypeA, "CNAME lb.example.net."},
		{"ns.own.example.", mdns.TypeA, "A 192.0.2.53"},
		{"ns.addr.example.", mdns.TypeA, "A 192.0.2.1"},
	}
	for _, idx := range []bool{false, true} {
		zs := zones
		if idx {
			zs = indexed(zones)
		}
		addr := startServerFor(t, zs)
		for _, network := range []string{"udp", "tcp"} {
			for _, tt := range tests {
				r := ask(t, network, addr, tt.name, tt.qtype, 0)
				var got []string
				for _, rr := range r.Answer {
					f := strings.Fields(rr.String())
					got = append(got, f[3]+" "+f[4])
				}
				if r.Rcode != mdns.RcodeSuccess || strings.Join(got, "|") != tt.want {
					t.Errorf("indexed=%v %s %s %s: %s %q, want NOERROR %q", idx, network, tt.name, mdns.TypeToString[tt.qtype], mdns.RcodeToString[r.Rcode], got, tt.want)
				}
			}
			// As a resolver asks it: the zone's NS, then its address.
			ns := ask(t, network, addr, "alias.example.", mdns.TypeNS, 0)
			if len(ns.Answer) != 1 {
				t.Fatalf("%s NS: %v", network, ns.Answer)
			}
			name := ns.Answer[0].(*mdns.NS).Ns
			if r := ask(t, network, addr, name, mdns.TypeA, 0); len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != mdns.TypeA {
				t.Errorf("indexed=%v %s %s A: %v; want an address, no alias", idx, network, name, r.Answer)
			}
		}
	}
}

// TestTXTBytes: a TXT value is served byte for byte, whatever it holds
// (the API takes any 1 to 2048 bytes), as a stub resolver reads it.
func TestTXTBytes(t *testing.T) {
	values := []string{
		`tok123`,
		`a\b\065"c\`,
		strings.Repeat(`\`, 300),
		strings.Repeat("k", 254) + `\x` + strings.Repeat("y", 300),
	}
	var recs []Record
	for i, v := range values {
		recs = append(recs, Record{Name: fmt.Sprintf("t%d.apps.example.com", i), Type: "TXT", Values: []string{v}})
	}
	addr := startServerFor(t, []Zone{{Name: "apps.example.com", Records: recs}})
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	for i, want := range values {
		got, err := res.LookupTXT(context.Background(), fmt.Sprintf("t%d.apps.example.com", i))
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("TXT %d: got %q, %v; want %q", i, got, err, want)
		}
	}
}

func TestBadQueries(t *testing.T) {
	addr := startServer(t)
	tests := []struct {
		name  string
		build func() *mdns.Msg
		rcode int
	}{
		{"no question", func() *mdns.Msg { m := new(mdns.Msg); m.Id = 7; return m }, mdns.RcodeFormatError},
		{"two questions", func() *mdns.Msg {
			m := new(mdns.Msg)
			m.SetQuestion("a.apps.example.com.", mdns.TypeA)
			m.Question = append(m.Question, m.Question[0])
			return m
		}, mdns.RcodeFormatError},
		{"update opcode", func() *mdns.Msg {
			m := new(mdns.Msg)
			m.SetUpdate("apps.example.com.")
			return m
		}, mdns.RcodeNotImplemented},
		{"chaos class", func() *mdns.Msg {
			m := new(mdns.Msg)
			m.SetQuestion("a.apps.example.com.", mdns.TypeA)
			m.Question[0].Qclass = mdns.ClassCHAOS
			return m
		}, mdns.RcodeRefused},
	}
	c := &mdns.Client{Net: "udp"}
	for _, tt := range tests {
		r, _, err := c.Exchange(tt.build(), addr)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if r.Rcode != tt.rcode {
			t.Errorf("%s: rcode %s, want %s", tt.name, mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tt.rcode])
		}
		// The server speaks for none of these: it holds no CHAOS data
		// (version.bind and the like), and AA on a refusal would say it did.
		if r.Authoritative {
			t.Errorf("%s: AA set on %s", tt.name, mdns.RcodeToString[r.Rcode])
		}
	}
	// Garbage bytes get no answer and do not stop the server.
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte{0xde, 0xad})
	conn.Close()
	m := new(mdns.Msg)
	m.SetQuestion("ok.apps.example.com.", mdns.TypeA)
	if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode != mdns.RcodeSuccess {
		t.Fatalf("server unhealthy after garbage: %v %v", r, err)
	}
}

// TestServeStopsWhenCanceledEarly: a context that ends before (or as) the
// servers start still stops Serve. A SIGTERM during boot must not leave
// gatehouse serving DNS forever.
func TestServeStopsWhenCanceledEarly(t *testing.T) {
	for _, early := range []bool{true, false} {
		s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }})
		if err != nil {
			t.Fatal(err)
		}
		pc, ln, err := s.Listen()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if early {
			cancel()
		}
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, pc, ln) }()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("canceled before start %v: serve: %v", early, err)
			}
		case <-time.After(5 * time.Second):
			pc.Close()
			ln.Close()
			t.Fatalf("canceled before start %v: Serve still running 5s after its context ended", early)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []Options{{}, {Addr: "nope", Zones: func() []Zone { return nil }}, {Addr: "127.0.0.1:0"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// FuzzAnswer: whatever a parsed query holds, Answer returns a reply that
// packs, and a question for a meta-type or query-only type gets its
// refusal with nothing in it, while every other type is looked up.
func FuzzAnswer(f *testing.F) {
	for _, q := range []uint16{mdns.TypeA, mdns.TypeTXT, mdns.TypeANY, mdns.TypeSOA,
		mdns.TypeAXFR, mdns.TypeIXFR, mdns.TypeOPT, mdns.TypeTSIG, mdns.TypeTKEY, mdns.TypeMAILA, 128, 127, mdns.TypeURI} {
		m := new(mdns.Msg)
		m.SetQuestion("x.apps.example.com.", q)
		b, _ := m.Pack()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(mdns.Msg)
		if err := req.Unpack(b); err != nil {
			return
		}
		resp := Answer(req, testZones)
		if resp == nil {
			t.Fatal("nil answer")
		}
		if _, err := resp.Pack(); err != nil && len(req.Question) == 1 && !strings.Contains(err.Error(), "domain") {
			t.Fatalf("answer does not pack: %v", err)
		}
		if req.Opcode != mdns.OpcodeQuery || req.Response || len(req.Question) != 1 {
			return
		}
		qt := req.Question[0].Qtype
		switch {
		case metaType(qt) && (resp.Rcode != metaRcode(qt) || len(resp.Answer)+len(resp.Ns) != 0):
			t.Fatalf("type %d: %s with %d answers and %d authority records, want %s and none", qt, mdns.RcodeToString[resp.Rcode], len(resp.Answer), len(resp.Ns), mdns.RcodeToString[metaRcode(qt)])
		case !metaType(qt) && resp.Rcode != mdns.RcodeSuccess && resp.Rcode != mdns.RcodeRefused:
			t.Fatalf("type %d: %s, want an answer or REFUSED", qt, mdns.RcodeToString[resp.Rcode])
		}
	})
}

// TestMetaTypeQueries: a question for a zone transfer (AXFR, IXFR) gets
// REFUSED, and one for another meta-type or query-only type (OPT, TSIG,
// TKEY, MAILA, MAILB, the rest of 128-254) FORMERR, over UDP and TCP, for
// a name in a zone or outside every zone, from a source that may recurse
// or not, with nothing in the answer. None reaches the upstream, over the
// listener or the resolve API's core. ANY and the data types are answered
// as before.
func TestMetaTypeQueries(t *testing.T) {
	up := startUpstream(t, 0)
	f := forwarder(t, up.addr)
	servers := []struct {
		name string
		addr string
		ra   bool
	}{
		{"authoritative", startServer(t), false},
		{"recursing", startGateway(t, f, "127.0.0.1/32"), true},
	}
	tests := []struct {
		qname  string
		qtype  uint16
		rcode  int
		answer string // the first answer, "TYPE data"; "" none
	}{
		{"apps.example.com.", mdns.TypeAXFR, mdns.RcodeRefused, ""},
		{"apps.example.com.", mdns.TypeIXFR, mdns.RcodeRefused, ""},
		{"hello.apps.example.com.", mdns.TypeAXFR, mdns.RcodeRefused, ""},
		{"example.org.", mdns.TypeAXFR, mdns.RcodeRefused, ""},
		{"example.org.", mdns.TypeIXFR, mdns.RcodeRefused, ""},
		{"hello.apps.example.com.", mdns.TypeOPT, mdns.RcodeFormatError, ""},
		{"example.org.", mdns.TypeOPT, mdns.RcodeFormatError, ""},
		{"hello.apps.example.com.", mdns.TypeTSIG, mdns.RcodeFormatError, ""},
		{"example.org.", mdns.TypeTSIG, mdns.RcodeFormatError, ""},
		{"apps.example.com.", mdns.TypeTKEY, mdns.RcodeFormatError, ""},
		{"example.org.", mdns.TypeTKEY, mdns.RcodeFormatError, ""},
		{"hello.apps.example.com.", mdns.TypeMAILA, mdns.RcodeFormatError, ""},
		{"example.org.", mdns.TypeMAILB, mdns.RcodeFormatError, ""},
		{"hello.apps.example.com.", 128, mdns.RcodeFormatError, ""},
		{"example.org.", 200, mdns.RcodeFormatError, ""},
		{"hello.apps.example.com.", mdns.TypeNone, mdns.RcodeFormatError, ""},
		{"example.org.", mdns.TypeNone, mdns.RcodeFormatError, ""},
		// Unchanged: the data types on either side of the range, and ANY.
		{"hello.apps.example.com.", mdns.TypeA, mdns.RcodeSuccess, "A 127.0.0.1"},
		{"_gatehouse-challenge.shop.apps.example.com.", mdns.TypeTXT, mdns.RcodeSuccess, `TXT "tok123"`},
		{"apps.example.com.", mdns.TypeANY, mdns.RcodeSuccess, "SOA ns.apps.example.com."},
		{"hello.apps.example.com.", 127, mdns.RcodeSuccess, ""},
		{"hello.apps.example.com.", mdns.TypeURI, mdns.RcodeSuccess, ""},
	}
	for _, s := range servers {
		for _, network := range []string{"udp", "tcp"} {
			for _, tt := range tests {
				name := fmt.Sprintf("%s %s %s %s", s.name, network, tt.qname, mdns.Type(tt.qtype))
				total := up.total()
				r := query(t, network, s.addr, tt.qname, tt.qtype, true)
				if r.Rcode != tt.rcode {
					t.Errorf("%s: rcode %s, want %s", name, mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tt.rcode])
				}
				got := ""
				if len(r.Answer) > 0 {
					f := strings.Fields(r.Answer[0].String())
					got = f[3] + " " + f[4]
				}
				if got != tt.answer {
					t.Errorf("%s: answer %q, want %q", name, got, tt.answer)
				}
				if len(r.Question) != 1 || r.Question[0].Name != tt.qname || r.Question[0].Qtype != tt.qtype {
					t.Errorf("%s: question %v", name, r.Question)
				}
				if r.RecursionAvailable != s.ra {
					t.Errorf("%s: RA %v, want %v", name, r.RecursionAvailable, s.ra)
				}
				if tt.rcode != mdns.RcodeSuccess && (r.Authoritative || len(r.Answer)+len(r.Ns) != 0) {
					t.Errorf("%s: AA %v with %d answers and %d authority records, want neither", name, r.Authoritative, len(r.Answer), len(r.Ns))
				}
				if up.total() != total {
					t.Errorf("%s: the upstream was asked", name)
				}
			}
		}
	}
	// The resolve API's core, given such a question, answers the same and
	// forwards nothing either.
	for _, tt := range tests {
		if tt.rcode == mdns.RcodeSuccess {
			continue
		}
		total := up.total()
		d := ResolveRecursive(context.Background(), DoHQuestion{Name: tt.qname, Type: tt.qtype}, testZones, f)
		if d.Status != tt.rcode || len(d.Answer) != 0 || up.total() != total {
			t.Errorf("resolve %s %s: %+v, upstream asked %d times; want %s", tt.qname, mdns.Type(tt.qtype), d, up.total()-total, mdns.RcodeToString[tt.rcode])
		}
	}
	// The upstream does answer what may be forwarded: its silence above is
	// the gateway's doing.
	if r := query(t, "udp", servers[1].addr, "example.org.", mdns.TypeA, true); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 || up.total() != 1 {
		t.Errorf("example.org A: %s with %d answers, upstream asked %d times; want its answer", mdns.RcodeToString[r.Rcode], len(r.Answer), up.total())
	}
}

// TestRefusedTypesAgree: the listener and the resolve API refuse the same
// types. The API's 400 for a type and the listener's REFUSED or FORMERR
// for a name it would otherwise answer come from one list, checked here
// over every type number (0 aside: the API reads it as no type at all).
func TestRefusedTypesAgree(t *testing.T) {
	for typ := 1; typ <= 0xFFFF; typ++ {
		_, err := ParseQuestion("hello.apps.example.com", strconv.Itoa(typ))
		req := new(mdns.Msg)
		req.SetQuestion("hello.apps.example.com.", uint16(typ))
		rcode := Answer(req, testZones).Rcode
		if api, listener := err != nil, rcode != mdns.RcodeSuccess; api != listener {
			t.Errorf("type %d: the API refuses it %v (%v), the listener answers %s", typ, api, err, mdns.RcodeToString[rcode])
		}
	}
}

// ask sends one question over network, with an EDNS(0) OPT of edns bytes
// when edns is not 0, and returns the reply.
func ask(t *testing.T, network, addr, name string, qt uint16, edns uint16) *mdns.Msg {
	t.Helper()
	q := new(mdns.Msg)
	q.SetQuestion(name, qt)
	if edns > 0 {
		q.SetEdns0(edns, false)
	}
	resp, _, err := (&mdns.Client{Net: network, Timeout: 3 * time.Second, UDPSize: 65535}).Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, mdns.TypeToString[qt], err)
	}
	return resp
}

// TestOwnAddressRecordOwnsTheName: a name with an address record of its
// own (fixed: A only) is not covered by the wildcard for the other type
// either: its AAAA is NODATA, not the gateways' (RFC 4592 §2.2.1). A name
// with a TXT record only, and any other name, still gets the gateways.
func TestOwnAddressRecordOwnsTheName(t *testing.T) {
	addr := startServer(t)
	tests := []struct {
		name string
		qt   uint16
		want []string // the answers' data
	}{
		{"fixed.apps.example.com.", mdns.TypeA, []string{"127.0.0.9"}},
		{"fixed.apps.example.com.", mdns.TypeAAAA, nil},
		{"_gatehouse-challenge.shop.apps.example.com.", mdns.TypeAAAA, []string{"::1"}},
		{"shop.apps.example.com.", mdns.TypeAAAA, []string{"::1"}},
		{"shop.apps.example.com.", mdns.TypeA, []string{"127.0.0.1"}},
	}
	for _, tt := range tests {
		r := ask(t, "udp", addr, tt.name, tt.qt, 0)
		var got []string
		for _, rr := range r.Answer {
			got = append(got, strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
		if r.Rcode != mdns.RcodeSuccess || strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s %s: %s %q, want %q", tt.name, mdns.TypeToString[tt.qt], mdns.RcodeToString[r.Rcode], got, tt.want)
		}
		if len(tt.want) == 0 && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != mdns.TypeSOA) {
			t.Errorf("%s %s: NODATA without the SOA: %v", tt.name, mdns.TypeToString[tt.qt], r.Ns)
		}
	}
}

// TestMappedGatewayAnswersA: a zone's gateway stored IPv4-mapped
// (::ffff:192.0.2.3, as gatehouse once seeded it from such an https
// listener address) is an IPv4 address: *.{zone} answers it as A, and
// not as AAAA, where it would be an IPv6 address no one listens on.
func TestMappedGatewayAnswersA(t *testing.T) {
	addr := startServerFor(t, []Zone{{
		Name:     "apps.example.com",
		Gateways: []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.3"), netip.MustParseAddr("2001:db8::1")},
	}})
	for qt, want := range map[uint16]string{mdns.TypeA: "192.0.2.3", mdns.TypeAAAA: "2001:db8::1"} {
		r := ask(t, "udp", addr, "shop.apps.example.com.", qt, 0)
		var got []string
		for _, rr := range r.Answer {
			got = append(got, strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
		if r.Rcode != mdns.RcodeSuccess || strings.Join(got, ",") != want {
			t.Errorf("%s: %s %q, want %q", mdns.TypeToString[qt], mdns.RcodeToString[r.Rcode], got, want)
		}
	}
}

// TestEDNSReplyHasOPT: a reply to a query with OPT carries OPT (RFC 6891
// §7), over UDP and TCP, answered, refused or malformed alike; a query
// without OPT gets none.
func TestEDNSReplyHasOPT(t *testing.T) {
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, q := range []struct {
			name string
			qt   uint16
		}{{"shop.apps.example.com.", mdns.TypeA}, {"example.org.", mdns.TypeA}, {"shop.apps.example.com.", mdns.TypeTSIG}} {
			r := ask(t, network, addr, q.name, q.qt, 1232)
			if o := r.IsEdns0(); o == nil || o.UDPSize() != ednsSize {
				t.Errorf("%s %s %s (%s): OPT %v, want one stating %d", network, q.name, mdns.TypeToString[q.qt], mdns.RcodeToString[r.Rcode], o, ednsSize)
			}
		}
		if r := ask(t, network, addr, "shop.apps.example.com.", mdns.TypeA, 0); r.IsEdns0() != nil {
			t.Errorf("%s: a query without OPT got one", network)
		}
	}
}

// TestAnswerKeepsQuestionCase: answers are owned by the name as asked, in
// its case (RFC 4343 §4.1), the apex's SOA too.
func TestAnswerKeepsQuestionCase(t *testing.T) {
	addr := startServer(t)
	for _, q := range []struct {
		name string
		qt   uint16
	}{{"ShOp.ApPs.ExAmPlE.cOm.", mdns.TypeA}, {"FIXED.apps.example.com.", mdns.TypeA}, {"Apps.Example.Com.", mdns.TypeSOA}} {
		r := ask(t, "udp", addr, q.name, q.qt, 0)
		if len(r.Answer) == 0 || r.Answer[0].Header().Name != q.name {
			t.Errorf("%s %s: answers %v, want them owned by %s", q.name, mdns.TypeToString[q.qt], r.Answer, q.name)
		}
	}
}

// TestUnpackableReplyIsServfail: a reply that cannot be packed (a TXT set
// past 64 KiB, which the API refuses now but a store may still hold) gets
// SERVFAIL over TCP, not silence until the client gives up.
func TestUnpackableReplyIsServfail(t *testing.T) {
	vals := make([]string, 34)
	for i := range vals {
		vals[i] = strings.Repeat("x", 2048)
	}
	zones := []Zone{{Name: "z.test", Gateways: testZones[0].Gateways, Records: []Record{{Name: "big.z.test", Type: "TXT", Values: vals}}}}
	addr := startServerFor(t, zones)
	if r := ask(t, "tcp", addr, "big.z.test.", mdns.TypeTXT, 0); r.Rcode != mdns.RcodeServerFailure {
		t.Fatalf("rcode %s, want SERVFAIL", mdns.RcodeToString[r.Rcode])
	}
}

// TestSOASerial: the SOA carries the zone's serial, as the apex's answer
// and in a NODATA reply's authority section, over UDP and TCP.
func TestSOASerial(t *testing.T) {
	z := testZones[0]
	z.Serial = 4242
	addr := startServerFor(t, []Zone{z})
	for _, network := range []string{"udp", "tcp"} {
		for _, q := range []struct {
			name string
			qt   uint16
		}{{"apps.example.com.", mdns.TypeSOA}, {"hello.apps.example.com.", mdns.TypeMX}} {
			r := ask(t, network, addr, q.name, q.qt, 0)
			rrs := append(r.Answer, r.Ns...)
			if len(rrs) != 1 {
				t.Fatalf("%s %s %s: %v", network, q.name, mdns.TypeToString[q.qt], r)
			}
			if soa, ok := rrs[0].(*mdns.SOA); !ok || soa.Serial != z.Serial {
				t.Errorf("%s %s %s: %v, want the SOA with serial %d", network, q.name, mdns.TypeToString[q.qt], rrs[0], z.Serial)
			}
		}
	}
}

// TestMinimalANYOverUDP: an ANY question over UDP gets one RRset, not the
// name's every record (RFC 8482 §4.2): ANY is the amplifier of choice for
// a spoofed source, and no resolver needs the whole set. Over TCP, where
// the source is real, it still gets all of them; and a name whose only
// record is a CNAME gets that CNAME either way.
func TestMinimalANYOverUDP(t *testing.T) {
	addr := startServer(t)
	rrsets := func(m *mdns.Msg) map[uint16]bool {
		types := map[uint16]bool{}
		for _, rr := range m.Answer {
			types[rr.Header().Rrtype] = true
		}
		return types
	}
	tcp := ask(t, "tcp", addr, "apps.example.com.", mdns.TypeANY, 1232)
	if got := rrsets(tcp); len(got) < 3 || !got[mdns.TypeSOA] || !got[mdns.TypeNS] {
		t.Fatalf("apex ANY over TCP: %v, want the SOA, the NS and the addresses", tcp.Answer)
	}
	for _, edns := range []uint16{0, 1232} {
		udp := ask(t, "udp", addr, "apps.example.com.", mdns.TypeANY, edns)
		if udp.Rcode != mdns.RcodeSuccess || !udp.Authoritative || udp.Truncated || len(rrsets(udp)) != 1 {
			t.Errorf("apex ANY over UDP (EDNS %d): %s aa=%v tc=%v %v, want one RRset", edns,
				mdns.RcodeToString[udp.Rcode], udp.Authoritative, udp.Truncated, udp.Answer)
		}
		www := ask(t, "udp", addr, "www.apps.example.com.", mdns.TypeANY, edns)
		if len(www.Answer) != 1 || www.Answer[0].Header().Rrtype != mdns.TypeCNAME {
			t.Errorf("www ANY over UDP (EDNS %d): %v, want its CNAME", edns, www.Answer)
		}
	}
}
