package dns

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// rawUDP sends q over UDP to addr and returns the reply as it came off
// the wire, so a test sees its size before any client repacks it.
func rawUDP(t *testing.T, addr string, q *mdns.Msg) []byte {
	t.Helper()
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
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
	return buf[:n]
}

// bigTXTZone is testZones with a TXT set at big.apps.example.com of
// about 4 KiB, the size the API allows two values of.
func bigTXTZone() []Zone {
	z := testZones[0]
	vals := make([]string, 20)
	for i := range vals {
		vals[i] = strings.Repeat(string(rune('a'+i)), 200)
	}
	z.Records = append(append([]Record(nil), z.Records...), Record{Name: "big.apps.example.com", Type: "TXT", Values: vals})
	return []Zone{z}
}

// TestUDPReplyAtMostOurSize: a UDP reply is never larger than the size the
// server states in its own OPT (1232), whatever larger size the query
// offers: the rest is cut and TC set, and the client asks again over TCP.
// A query's source address over UDP is not proven, so a larger reply is
// the amplification a spoofed query buys, and a reply past the path MTU
// is fragmented (RFC 9715 §3.2, RFC 6891 §6.2.5, DNS flag day 2020).
func TestUDPReplyAtMostOurSize(t *testing.T) {
	addr := startServerFor(t, bigTXTZone())
	for _, offer := range []uint16{0, 512, 1232, 4096, 65535} {
		q := new(mdns.Msg)
		q.SetQuestion("big.apps.example.com.", mdns.TypeTXT)
		if offer > 0 {
			q.SetEdns0(offer, false)
		}
		wire := rawUDP(t, addr, q)
		limit := min(max(int(offer), mdns.MinMsgSize), ednsSize)
		r := new(mdns.Msg)
		if err := r.Unpack(wire); err != nil {
			t.Fatalf("offer %d: %v", offer, err)
		}
		if len(wire) > limit || !r.Truncated {
			t.Errorf("offer %d: %d bytes, TC %v; want at most %d and TC", offer, len(wire), r.Truncated, limit)
		}
	}
	// Over TCP the whole set comes back.
	if r := ask(t, "tcp", addr, "big.apps.example.com.", mdns.TypeTXT, 4096); r.Truncated || len(r.Answer) != 20 {
		t.Errorf("tcp: TC %v with %d answers, want all 20", r.Truncated, len(r.Answer))
	}
}

// TestEDNSVersion: a query with an EDNS version other than 0 gets BADVERS
// with an OPT of version 0 and nothing else (RFC 6891 §6.1.3), over UDP
// and TCP, in a zone or outside every one; the requester learns the
// version it can use. Version 0 is answered as usual.
func TestEDNSVersion(t *testing.T) {
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"hello.apps.example.com.", "example.org."} {
			for _, v := range []uint8{1, 255} {
				q := new(mdns.Msg)
				q.SetQuestion(name, mdns.TypeA)
				q.SetEdns0(1232, false)
				q.IsEdns0().SetVersion(v)
				r, _, err := (&mdns.Client{Net: network, Timeout: 3 * time.Second}).Exchange(q, addr)
				if err != nil {
					t.Fatalf("%s %s version %d: %v", network, name, v, err)
				}
				o := r.IsEdns0()
				if r.Rcode != mdns.RcodeBadVers || o == nil || o.Version() != 0 || len(r.Answer)+len(r.Ns) != 0 {
					t.Errorf("%s %s version %d: %s, OPT %v, %d answers; want BADVERS, OPT version 0, none", network, name, v, mdns.RcodeToString[r.Rcode], o, len(r.Answer))
				}
			}
		}
		if r := ask(t, network, addr, "hello.apps.example.com.", mdns.TypeA, 1232); r.Rcode != mdns.RcodeSuccess || len(r.Answer) == 0 {
			t.Errorf("%s version 0: %s with %d answers", network, mdns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
}

// TestEDNSDOBitCopied: the DO bit of a query's OPT is copied into the
// reply's (RFC 3225 §3), answered, refused or BADVERS alike, over UDP and
// TCP; a query without it gets a reply without it.
func TestEDNSDOBitCopied(t *testing.T) {
	addr := startServer(t)
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"hello.apps.example.com.", "example.org."} {
			for _, do := range []bool{true, false} {
				for _, v := range []uint8{0, 1} {
					q := new(mdns.Msg)
					q.SetQuestion(name, mdns.TypeA)
					q.SetEdns0(1232, do)
					q.IsEdns0().SetVersion(v)
					r, _, err := (&mdns.Client{Net: network, Timeout: 3 * time.Second}).Exchange(q, addr)
					if err != nil {
						t.Fatalf("%s %s DO %v: %v", network, name, do, err)
					}
					if o := r.IsEdns0(); o == nil || o.Do() != do {
						t.Errorf("%s %s DO %v version %d (%s): OPT %v, want DO %v", network, name, do, v, mdns.RcodeToString[r.Rcode], o, do)
					}
				}
			}
		}
	}
}

// TestEscapedDotInLabel: a dot inside a label (a\.apps.example.com. is
// the name whose first label is "a.apps", in example.com) is not a label
// boundary. Such a name is not in apps.example.com and gets REFUSED, and
// x\.y.apps.example.com. is one label under the zone, not a name under
// y.apps.example.com. An escaped backslash before a real dot is a
// boundary as usual.
func TestEscapedDotInLabel(t *testing.T) {
	z := testZones[0]
	z.Records = append(append([]Record(nil), z.Records...), Record{Name: "*.y.apps.example.com", Type: "A", Values: []string{"192.0.2.7"}})
	addr := startServerFor(t, []Zone{z})
	tests := []struct {
		name  string
		rcode int
		want  string // the first answer's data
	}{
		{`a\.apps.example.com.`, mdns.RcodeRefused, ""},
		{`x.y\.apps.example.com.`, mdns.RcodeRefused, ""},
		{`x\.y.apps.example.com.`, mdns.RcodeSuccess, "127.0.0.1"},
		{`x.y.apps.example.com.`, mdns.RcodeSuccess, "192.0.2.7"},
		{`a\\.apps.example.com.`, mdns.RcodeSuccess, "127.0.0.1"},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			r := ask(t, network, addr, tt.name, mdns.TypeA, 0)
			got := ""
			if len(r.Answer) > 0 {
				got = strings.TrimPrefix(r.Answer[0].String(), r.Answer[0].Header().String())
			}
			if r.Rcode != tt.rcode || got != tt.want || r.Authoritative != (tt.rcode == mdns.RcodeSuccess) {
				t.Errorf("%s %s: %s AA %v answer %q; want %s answer %q", network, tt.name, mdns.RcodeToString[r.Rcode], r.Authoritative, got, mdns.RcodeToString[tt.rcode], tt.want)
			}
		}
	}
}

// TestTCPClientThatStopsReading: a TCP client that sends queries and
// never reads the answers does not hold its connection, and a goroutine,
// for ever: a write that cannot finish within the write timeout closes
// the connection. And such a client does not keep Serve from returning
// when its context ends (a SIGTERM must end the process, DESIGN §3).
func TestTCPClientThatStopsReading(t *testing.T) {
	base := goleak.IgnoreCurrent()

	// Stop reading for well past the write timeout, then read: the server
	// has closed the connection after what the kernel buffered, not
	// waited to answer every query.
	addr, stop := startBigTXT(t, 200*time.Millisecond)
	c := stall(t, addr)
	time.Sleep(time.Second)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	frames := 0
	for {
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			break
		}
		if _, err := io.ReadFull(c, make([]byte, int(hdr[0])<<8|int(hdr[1]))); err != nil {
			break
		}
		frames++
	}
	if frames >= 128 {
		t.Errorf("read all %d answers: the server waited for a client that did not read", frames)
	}
	stop(c)

	// A client stalled as Serve stops, within the write timeout, does not
	// keep it running.
	addr, stop = startBigTXT(t, 3*time.Second)
	c = stall(t, addr)
	time.Sleep(time.Second)
	stop(c)
	goleak.VerifyNone(t, base)
}

// startBigTXT serves a zone whose big.z.test TXT set is 57 KiB, with TCP
// writes bounded by writeTimeout. stop ends Serve and fails t unless it
// returns within 15 s while c, a client that may not read, is still open.
func startBigTXT(t *testing.T, writeTimeout time.Duration) (addr string, stop func(c net.Conn)) {
	t.Helper()
	vals := make([]string, 28)
	for i := range vals {
		vals[i] = strings.Repeat("x", 2048) // 28 of the API's largest
	}
	zones := []Zone{{Name: "z.test", Records: []Record{{Name: "big.z.test", Type: "TXT", Values: vals}}}}
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return zones }})
	if err != nil {
		t.Fatal(err)
	}
	s.writeTimeout = writeTimeout
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, smallSendBuffer{ln}) }()
	return ln.Addr().String(), func(c net.Conn) {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			c.Close()
			<-done
			t.Errorf("Serve still running 15 s after its context ended, held by a client that does not read")
		}
	}
}

// smallSendBuffer gives the connections it accepts a small send buffer,
// so that a client that does not read stalls the server's writes within
// a few answers, whatever the host's TCP buffer sizes.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := c.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// stall connects to addr over TCP and queues more answers than the
// kernel buffers on both sides hold while nobody reads (128, the most one
// connection is answered, of 57 KiB: 7 MiB), so the server's writes
// block; then it reads nothing.
func stall(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	q := new(mdns.Msg)
	q.SetQuestion("big.z.test.", mdns.TypeTXT)
	b, _ := q.Pack()
	frame := append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	for range 128 {
		if _, err := c.Write(frame); err != nil {
			break // the server gave up on us already
		}
	}
	return c
}

// TestTCPPipelinedQueries: a client may send many queries on one TCP
// connection before reading (RFC 7766 §6.2.1.1); each gets its answer, in
// order here. miekg/dns's default closes a connection after 128 queries
// with the rest unread, and the kernel's reset then discards answers
// already written: 200 pipelined queries got 34 answers.
func TestTCPPipelinedQueries(t *testing.T) {
	addr := startServer(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 300
	var all []byte
	for i := range n {
		q := new(mdns.Msg)
		q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
		q.Id = uint16(i)
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, byte(len(b)>>8), byte(len(b))), b...)
	}
	if _, err := c.Write(all); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, n, err)
		}
		b := make([]byte, int(hdr[0])<<8|int(hdr[1]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, n, err)
		}
		r := new(mdns.Msg)
		if err := r.Unpack(b); err != nil || r.Id != uint16(i) || len(r.Answer) != 1 {
			t.Fatalf("answer %d: id %d, %d records, %v", i+1, r.Id, len(r.Answer), err)
		}
	}
}

// TestBadOPTRecords: a query whose OPT record breaks RFC 6891 §6.1.1 gets
// FORMERR, over UDP and TCP, in a zone or outside every one, as BIND
// answers it: more than one OPT (which of them states the requester's
// size and flags is anyone's guess), an OPT in the answer or authority
// section (it belongs in the additional one alone), or one owned by a
// name other than the root.
func TestBadOPTRecords(t *testing.T) {
	opt := func(owner string) *mdns.OPT {
		return &mdns.OPT{Hdr: mdns.RR_Header{Name: owner, Rrtype: mdns.TypeOPT, Class: 4096}}
	}
	tests := []struct {
		name string
		edit func(q *mdns.Msg)
	}{
		{"two OPT", func(q *mdns.Msg) { q.SetEdns0(1232, false); q.Extra = append(q.Extra, opt(".")) }},
		{"OPT in answer", func(q *mdns.Msg) { q.Answer = append(q.Answer, opt(".")) }},
		{"OPT in authority", func(q *mdns.Msg) { q.Ns = append(q.Ns, opt(".")) }},
		{"OPT in answer beside one in additional", func(q *mdns.Msg) { q.SetEdns0(1232, false); q.Answer = append(q.Answer, opt(".")) }},
		{"OPT not at the root", func(q *mdns.Msg) { q.Extra = append(q.Extra, opt("example.org.")) }},
	}
	addr := startServer(t)
	for _, tt := range tests {
		for _, network := range []string{"udp", "tcp"} {
			for _, name := range []string{"hello.apps.example.com.", "example.org."} {
				q := new(mdns.Msg)
				q.SetQuestion(name, mdns.TypeA)
				tt.edit(q)
				r, _, err := (&mdns.Client{Net: network, Timeout: 3 * time.Second}).Exchange(q, addr)
				if err != nil {
					t.Fatalf("%s: %s %s: %v", tt.name, network, name, err)
				}
				if r.Rcode != mdns.RcodeFormatError || len(r.Answer) != 0 {
					t.Errorf("%s: %s %s: %s with %d answers, want FORMERR and none", tt.name, network, name, mdns.RcodeToString[r.Rcode], len(r.Answer))
				}
			}
		}
	}
}

// TestTCPConnectionLimit: TCP connections past the limit are closed at
// once, unanswered, rather than each holding a socket and a goroutine
// (the process's descriptors are the HTTPS listener's too); a slot frees
// when a connection ends. RFC 7766 §6.2.2.
func TestTCPConnectionLimit(t *testing.T) {
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }})
	if err != nil {
		t.Fatal(err)
	}
	s.maxConns = 2
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "serve", func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	addr := ln.Addr().String()
	q := new(mdns.Msg)
	q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
	// query opens a connection, asks q on it and returns the connection,
	// left open, and whether q was answered.
	query := func() (*mdns.Conn, bool) {
		co, err := mdns.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { co.Close() })
		co.SetDeadline(time.Now().Add(3 * time.Second))
		if err := co.WriteMsg(q); err != nil {
			return co, false
		}
		r, err := co.ReadMsg()
		return co, err == nil && r.Rcode == mdns.RcodeSuccess && len(r.Answer) == 1
	}
	first, ok1 := query()
	_, ok2 := query()
	if !ok1 || !ok2 {
		t.Fatalf("the first two connections answered %v, %v; want both", ok1, ok2)
	}
	if _, ok := query(); ok {
		t.Errorf("a third connection while two are open was answered; want it closed")
	}
	first.Close()
	for i := 0; ; i++ {
		if _, ok := query(); ok {
			break
		}
		if i == 50 {
			t.Fatal("no connection answered after one of the two closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCNAMEChasedInZone: a CNAME whose target is in the same zone is
// followed, and the target's records of the asked type added after it
// (RFC 1034 §4.3.2 step 3a), so a stub that asks this server directly
// gets an address; NODATA at the end of the chain has the SOA (RFC 2308
// §2.2). A target outside the zone, and a loop, end the chain.
func TestCNAMEChasedInZone(t *testing.T) {
	z := testZones[0]
	z.Records = append(append([]Record(nil), z.Records...),
		Record{Name: "two.apps.example.com", Type: "CNAME", Values: []string{"www.apps.example.com"}},
		Record{Name: "out.apps.example.com", Type: "CNAME", Values: []string{"example.org"}},
		Record{Name: "loop1.apps.example.com", Type: "CNAME", Values: []string{"loop2.apps.example.com"}},
		Record{Name: "loop2.apps.example.com", Type: "CNAME", Values: []string{"loop1.apps.example.com"}},
		Record{Name: "tofixed.apps.example.com", Type: "CNAME", Values: []string{"FIXED.apps.example.com"}},
	)
	addr := startServerFor(t, []Zone{z})
	tests := []struct {
		name   string
		qt     uint16
		answer []string // owner and data of each answer
		soa    bool     // the SOA in authority
	}{
		{"www.apps.example.com.", mdns.TypeA, []string{"www.apps.example.com. hello.apps.example.com.", "hello.apps.example.com. 127.0.0.1"}, false},
		{"WWW.apps.example.com.", mdns.TypeAAAA, []string{"WWW.apps.example.com. hello.apps.example.com.", "hello.apps.example.com. ::1"}, false},
		{"two.apps.example.com.", mdns.TypeA, []string{"two.apps.example.com. www.apps.example.com.", "www.apps.example.com. hello.apps.example.com.", "hello.apps.example.com. 127.0.0.1"}, false},
		{"tofixed.apps.example.com.", mdns.TypeA, []string{"tofixed.apps.example.com. FIXED.apps.example.com.", "FIXED.apps.example.com. 127.0.0.9"}, false},
		{"www.apps.example.com.", mdns.TypeTXT, []string{"www.apps.example.com. hello.apps.example.com."}, true},
		{"www.apps.example.com.", mdns.TypeCNAME, []string{"www.apps.example.com. hello.apps.example.com."}, false},
		{"out.apps.example.com.", mdns.TypeA, []string{"out.apps.example.com. example.org."}, false},
		{"loop1.apps.example.com.", mdns.TypeA, []string{"loop1.apps.example.com. loop2.apps.example.com.", "loop2.apps.example.com. loop1.apps.example.com."}, false},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			r := ask(t, network, addr, tt.name, tt.qt, 0)
			var got []string
			for _, rr := range r.Answer {
				got = append(got, rr.Header().Name+" "+strings.TrimPrefix(rr.String(), rr.Header().String()))
			}
			soa := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == mdns.TypeSOA
			if r.Rcode != mdns.RcodeSuccess || !r.Authoritative || strings.Join(got, "|") != strings.Join(tt.answer, "|") || soa != tt.soa {
				t.Errorf("%s %s %s: %s AA %v %q, SOA %v; want %q, SOA %v", network, tt.name, mdns.TypeToString[tt.qt], mdns.RcodeToString[r.Rcode], r.Authoritative, got, soa, tt.answer, tt.soa)
			}
		}
	}
	// A stub resolver pointed at the server gets the address.
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ips, err := res.LookupIP(ctx, "ip4", "www.apps.example.com"); err != nil || len(ips) != 1 || !ips[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("LookupIP www.apps.example.com: %v, %v; want 127.0.0.1", ips, err)
	}
}

// TestTCPConnectionLimitPerSource: one address may hold only so many of
// the TCP slots, so a single client cannot take all of them and shut
// every resolver out of TCP (the truncated answers' only path). Past its
// share its next connection is closed at once; another address is still
// answered.
func TestTCPConnectionLimitPerSource(t *testing.T) {
	s, err := New(Options{Addr: "127.0.0.1:0", Zones: func() []Zone { return testZones }})
	if err != nil {
		t.Fatal(err)
	}
	s.maxConns, s.maxPerSource = 10, 2
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "serve", func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	addr := ln.Addr().String()
	q := new(mdns.Msg)
	q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
	// query opens a connection from the loopback address from, asks q on
	// it, and returns the connection, left open, and whether q was
	// answered.
	query := func(from string) (*mdns.Conn, bool) {
		d := &net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		co := &mdns.Conn{Conn: c}
		t.Cleanup(func() { co.Close() })
		co.SetDeadline(time.Now().Add(3 * time.Second))
		if err := co.WriteMsg(q); err != nil {
			return co, false
		}
		r, err := co.ReadMsg()
		return co, err == nil && r.Rcode == mdns.RcodeSuccess && len(r.Answer) == 1
	}
	first, ok1 := query("127.0.0.1")
	_, ok2 := query("127.0.0.1")
	if !ok1 || !ok2 {
		t.Fatalf("127.0.0.1's first two connections answered %v, %v; want both", ok1, ok2)
	}
	if _, ok := query("127.0.0.1"); ok {
		t.Errorf("127.0.0.1's third connection while two are open was answered; want it closed")
	}
	if _, ok := query("127.0.0.2"); !ok {
		t.Errorf("127.0.0.2 was refused while 127.0.0.1 held its share")
	}
	first.Close()
	for i := 0; ; i++ {
		if _, ok := query("127.0.0.1"); ok {
			break
		}
		if i == 50 {
			t.Fatal("127.0.0.1 was not answered after one of its connections closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTCPReplyCompressed: a TCP reply's names are compressed, as a UDP
// one's are: an RRset of many records at one name is sent with its owner
// name once, not once a record, so it costs less and fits the 64 KiB a
// TCP message may carry where the uncompressed form would not.
func TestTCPReplyCompressed(t *testing.T) {
	z := testZones[0]
	vals := make([]string, 200)
	for i := range vals {
		vals[i] = net.IPv4(10, 0, byte(i/250), byte(i%250+1)).String()
	}
	z.Records = append(append([]Record(nil), z.Records...), Record{Name: "many.apps.example.com", Type: "A", Values: vals})
	addr := startServerFor(t, []Zone{z})

	q := new(mdns.Msg).SetQuestion("many.apps.example.com.", mdns.TypeA)
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write(append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)); err != nil {
		t.Fatal(err)
	}
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatal(err)
	}
	wire := make([]byte, int(n[0])<<8|int(n[1]))
	if _, err := io.ReadFull(c, wire); err != nil {
		t.Fatal(err)
	}
	r := new(mdns.Msg)
	if err := r.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	if len(r.Answer) != len(vals) {
		t.Fatalf("%d answers, want %d", len(r.Answer), len(vals))
	}
	r.Compress = false
	if plain := r.Len(); len(wire) >= plain {
		t.Fatalf("TCP reply of %d bytes, uncompressed it is %d: names not compressed", len(wire), plain)
	}
}

// TestUDPQueryUpToOurSize: the server's OPT says it takes UDP messages of
// up to 1232 bytes (RFC 6891 §6.2.3: the size a requestor, here the
// server, can reassemble and deliver), so a query that large over UDP (a
// padded one, RFC 7830, or one with large EDNS options) is answered.
// miekg/dns reads 512 bytes of a datagram by default: the rest was cut
// and the query answered FORMERR.
func TestUDPQueryUpToOurSize(t *testing.T) {
	addr := startServer(t)
	for _, size := range []int{300, 513, 800, ednsSize} {
		q := new(mdns.Msg)
		q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
		q.SetEdns0(ednsSize, false)
		base := q.Len() + 4 // the padding option's code and length
		q.IsEdns0().Option = append(q.IsEdns0().Option, &mdns.EDNS0_PADDING{Padding: make([]byte, size-base)})
		if q.Len() != size {
			t.Fatalf("query of %d bytes, want %d", q.Len(), size)
		}
		r := new(mdns.Msg)
		if err := r.Unpack(rawUDP(t, addr, q)); err != nil {
			t.Fatalf("query of %d bytes: %v", size, err)
		}
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("query of %d bytes: %s with %d answers, want NOERROR and the address", size, mdns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
}

// TestMalformedQuestionName: a question whose name is not a name (a
// label of 64 bytes, which is an extended label type's first byte; a
// name past 255 bytes; a compression pointer to itself or past the
// message; one cut short) gets FORMERR with the query's id, over UDP and
// TCP, as BIND, NSD and Knot answer it; a name of exactly 255 bytes is a
// name, outside every zone here: REFUSED.
func TestMalformedQuestionName(t *testing.T) {
	addr := startServer(t)
	label := func(n int) []byte { return append([]byte{byte(n)}, strings.Repeat("a", n)...) }
	name := func(sizes ...int) []byte {
		var b []byte
		for _, n := range sizes {
			b = append(b, label(n)...)
		}
		return append(b, 0)
	}
	query := func(qname []byte) []byte {
		b := []byte{0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
		return append(append(b, qname...), 0, byte(mdns.TypeA), 0, byte(mdns.ClassINET))
	}
	for _, tt := range []struct {
		name  string
		query []byte
		rcode int
	}{
		{"label of 64", query(name(64, 3)), mdns.RcodeFormatError},
		{"name of 256", query(name(63, 63, 63, 62)), mdns.RcodeFormatError},
		{"name of 321", query(name(63, 63, 63, 63, 63)), mdns.RcodeFormatError},
		{"pointer to itself", query([]byte{0xc0, headerLen}), mdns.RcodeFormatError},
		{"pointer past the end", query([]byte{0xc0, 0xff}), mdns.RcodeFormatError},
		{"cut short", query(name(63))[:headerLen+30], mdns.RcodeFormatError},
		{"name of 255", query(name(63, 63, 63, 61)), mdns.RcodeRefused},
	} {
		for _, network := range []string{"udp", "tcp"} {
			var raw []byte
			if network == "tcp" {
				raw = rawTCP(t, addr, tt.query)
			} else {
				c, err := net.Dial("udp", addr)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(3 * time.Second))
				if _, err := c.Write(tt.query); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 65535)
				n, err := c.Read(buf)
				c.Close()
				if err != nil {
					t.Fatalf("%s %s: %v", network, tt.name, err)
				}
				raw = buf[:n]
			}
			m := new(mdns.Msg)
			if err := m.Unpack(raw); err != nil {
				t.Fatalf("%s %s: %v", network, tt.name, err)
			}
			if m.Id != 0xabcd || !m.Response || m.Rcode != tt.rcode || len(m.Answer) != 0 {
				t.Errorf("%s %s: id %#x %s with %d answers, want %s to id 0xabcd", network, tt.name, m.Id, mdns.RcodeToString[m.Rcode], len(m.Answer), mdns.RcodeToString[tt.rcode])
			}
		}
	}
}
