package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return pc.LocalAddr().String()
}

func TestQueries(t *testing.T) {
	addr := startServer(t)
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
		{"www.apps.example.com.", mdns.TypeA, mdns.RcodeSuccess, []string{"CNAME hello.apps.example.com."}},
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
func TestWildcardRecords(t *testing.T) {
	addr := startServerFor(t, []Zone{{
		Name:     "apps.example.com",
		Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		Records: []Record{
			{Name: "*.apps.example.com", Type: "A", Values: []string{"192.0.2.1"}},
			{Name: "*.eu.apps.example.com", Type: "A", Values: []string{"192.0.2.2"}},
			{Name: "*.eu.apps.example.com", Type: "TXT", Values: []string{"eu"}},
			{Name: "*.cdn.apps.example.com", Type: "CNAME", Values: []string{"edge.example.net"}},
			{Name: "own.eu.apps.example.com", Type: "A", Values: []string{"192.0.2.3"}},
		},
	}})
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

func FuzzAnswer(f *testing.F) {
	for _, q := range []uint16{mdns.TypeA, mdns.TypeTXT, mdns.TypeANY, mdns.TypeSOA} {
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
	})
}
