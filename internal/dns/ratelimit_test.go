package dns

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// testLimiter is a limiter of rate and slip whose clock moves only when
// the test moves it.
func testLimiter(rate, slip int) (*limiter, *atomic.Int64) {
	var clock atomic.Int64
	clock.Store(int64(time.Hour)) // not 0, as a real clock is not
	l := newLimiter(rate, slip, slog.New(slog.DiscardHandler), nil)
	l.now = clock.Load
	return l, &clock
}

func verdicts(l *limiter, n int, src string, kind respKind, qtype uint16, name string) string {
	var out []string
	for range n {
		out = append(out, [...]string{send: "send", drop: "drop", truncate: "tc"}[l.check(netip.MustParseAddr(src), kind, qtype, name)])
	}
	return strings.Join(out, " ")
}

// TestLimiter: a bucket holds rate responses, then every slip-th over it
// is truncated and the rest dropped, the first over it truncated; it
// refills at rate a second; and each source network and response has a
// bucket of its own.
func TestLimiter(t *testing.T) {
	for _, tt := range []struct {
		rate, slip int
		want       string
	}{
		{3, 2, "send send send tc drop tc drop tc"},
		{3, 3, "send send send tc drop drop tc drop drop"},
		{2, 1, "send send tc tc tc"},
		{2, 0, "send send drop drop drop"},
		{1, 2, "send tc drop tc"},
	} {
		t.Run(fmt.Sprintf("rate=%d/slip=%d", tt.rate, tt.slip), func(t *testing.T) {
			l, _ := testLimiter(tt.rate, tt.slip)
			if got := verdicts(l, strings.Count(tt.want, " ")+1, "192.0.2.1", kindAnswer, mdns.TypeA, "a.apps.example.com"); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}

	t.Run("refill", func(t *testing.T) {
		l, clock := testLimiter(4, 2)
		q := func(n int) string { return verdicts(l, n, "192.0.2.1", kindAnswer, mdns.TypeA, "a") }
		if got := q(6); got != "send send send send tc drop" {
			t.Fatalf("burst: %s", got)
		}
		clock.Add(int64(time.Second / 4)) // one response's worth
		if got := q(2); got != "send tc" {
			t.Errorf("a quarter second on: %s, want send tc", got)
		}
		clock.Add(int64(time.Second))
		if got := q(5); got != "send send send send tc" {
			t.Errorf("a second on: %s, want the whole budget back", got)
		}
	})

	t.Run("buckets", func(t *testing.T) {
		l, _ := testLimiter(2, 1)
		full := "send send tc"
		check := func(what, src string, kind respKind, qtype uint16, name, want string) {
			t.Helper()
			if got := verdicts(l, 3, src, kind, qtype, name); got != want {
				t.Errorf("%s: %s, want %s", what, got, want)
			}
		}
		check("first", "192.0.2.1", kindAnswer, mdns.TypeA, "www.apps.example.com", full)
		check("same /24, other host, name in other case", "192.0.2.200", kindAnswer, mdns.TypeA, "WWW.Apps.Example.COM", "tc tc tc")
		check("IPv4-mapped source of the same /24", "::ffff:192.0.2.9", kindAnswer, mdns.TypeA, "www.apps.example.com", "tc tc tc")
		check("other /24", "192.0.3.1", kindAnswer, mdns.TypeA, "www.apps.example.com", full)
		check("other name", "192.0.2.1", kindAnswer, mdns.TypeA, "api.apps.example.com", full)
		check("other type", "192.0.2.1", kindAnswer, mdns.TypeAAAA, "www.apps.example.com", full)
		check("wildcard of the same name", "192.0.2.1", kindWildcard, mdns.TypeA, "www.apps.example.com", full)
		check("errors", "192.0.2.1", kindError, 0, "", full)
		check("errors, any name", "192.0.2.1", kindError, 0, "", "tc tc tc")
		check("IPv6", "2001:db8:0:100::1", kindError, 0, "", full)
		check("IPv6, same /56", "2001:db8:0:1ff::2", kindError, 0, "", "tc tc tc")
		check("IPv6, other /56", "2001:db8:0:200::1", kindError, 0, "", full)
	})

	t.Run("counted and logged once", func(t *testing.T) {
		var counts []string
		var log testutil.SyncBuffer
		l := newLimiter(2, 2, slog.New(slog.NewTextHandler(&log, nil)), func(a string) { counts = append(counts, a) })
		l.now = func() int64 { return int64(time.Hour) }
		verdicts(l, 6, "192.0.2.1", kindAnswer, mdns.TypeA, "www.apps.example.com")
		verdicts(l, 3, "192.0.3.1", kindAnswer, mdns.TypeA, "www.apps.example.com")
		if want := []string{"truncated", "dropped", "truncated", "dropped", "truncated"}; !slices.Equal(counts, want) {
			t.Errorf("counted %q, want %q", counts, want)
		}
		// The second network starts to be limited in the same second:
		// no second line.
		if lines := strings.Split(strings.TrimSpace(log.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `msg="dns: rate limiting responses" source=192.0.2.0/24 response=answer name=www.apps.example.com`) {
			t.Errorf("log: %q", lines)
		}
	})
}

// TestLimiterBounded: a flood of sources never grows the table past its
// cap, a limited bucket stays limited meanwhile, and buckets at rest make
// room for new ones.
func TestLimiterBounded(t *testing.T) {
	// At rate 2 a count of one response is not limiting: the flood's
	// counts make room for each other (at rate 1 they could not, see
	// TestLimiterFullKeepsLimitedCounts).
	l, clock := testLimiter(2, 1)
	l.max = 1000
	if got := verdicts(l, 3, "198.51.100.1", kindAnswer, mdns.TypeA, "victim"); got != "send send tc" {
		t.Fatalf("victim: %s", got)
	}
	for i := range 5000 {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
		if v := l.check(src, kindAnswer, mdns.TypeA, "victim"); v != send {
			t.Fatalf("source %d: %v, want sent", i, v)
		}
		if n := len(l.table); n > l.max {
			t.Fatalf("after %d sources the table holds %d entries, past its cap %d", i+1, n, l.max)
		}
		if i == l.max/2 {
			if got := verdicts(l, 1, "198.51.100.1", kindAnswer, mdns.TypeA, "victim"); got != "tc" {
				t.Fatalf("victim, the table half full: %s, want still limited", got)
			}
		}
	}
	// A second on, every bucket is at rest: the next new one sweeps them.
	clock.Add(int64(time.Second))
	l.check(netip.MustParseAddr("203.0.113.1"), kindError, 0, "")
	if n := len(l.table); n != 1 {
		t.Errorf("after a second at rest the table holds %d entries, want 1", n)
	}

	// At the real cap, what the table costs.
	l, _ = testLimiter(2, 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 4 * maxLimiterEntries {
		l.check(netip.AddrFrom4([4]byte{byte(11 + i>>16), byte(i >> 8), byte(i), 1}), kindAnswer, mdns.TypeA, "x")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := len(l.table); n != maxLimiterEntries {
		t.Errorf("table holds %d entries, want its cap %d", n, maxLimiterEntries)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("full table: %d entries, heap %+d KiB", len(l.table), grew>>10)
	if grew > 10<<20 {
		t.Errorf("a full table costs %d KiB, past 10 MiB", grew>>10)
	}
	runtime.KeepAlive(l)
}

// TestLimiterFullKeepsLimitedCounts: a full table makes room from the
// counts that are not limiting, never from one that is. A flood of forged
// sources, a new count each, must not hand a limited network its budget
// back before it has refilled; and when every count is limiting, a new
// one is held back as over the limit (slipped or dropped), not answered.
func TestLimiterFullKeepsLimitedCounts(t *testing.T) {
	for _, tt := range []struct {
		name string
		rate int
		// what the flood's sources past the table's room get: at rate 1
		// a count of one response is spent, and so limiting
		past string
	}{
		{"rate 1", 1, "held"},
		{"rate 100", 100, "send"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var counts []string
			l, clock := testLimiter(tt.rate, 2)
			l.counted = func(a string) { counts = append(counts, a) }
			l.max = 64
			victim := func(n int) string { return verdicts(l, n, "198.51.100.1", kindAnswer, mdns.TypeA, "victim") }
			if got, want := victim(tt.rate+1), strings.Repeat("send ", tt.rate)+"tc"; got != want {
				t.Fatalf("victim: %s, want %s", got, want)
			}
			// The clock stands still: no count is at rest, so none is
			// swept, and the victim stays limited throughout.
			var past []string
			for i := range 10 * l.max {
				v := l.check(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), kindAnswer, mdns.TypeA, "victim")
				if n := len(l.table); n > l.max {
					t.Fatalf("after %d sources the table holds %d counts, past its cap %d", i+1, n, l.max)
				}
				if i < l.max-1 {
					if v != send {
						t.Fatalf("source %d, with room: %v, want sent", i, v)
					}
					continue
				}
				if v == send {
					past = append(past, "send")
				} else {
					past = append(past, "held")
				}
			}
			if got, want := strings.Join(slices.Compact(past), " "), tt.past; got != want {
				t.Errorf("sources past the table's room: %s, want %s", got, want)
			}
			if got, want := victim(3), "drop tc drop"; got != want {
				t.Errorf("victim after the flood: %s, want %s (still limited)", got, want)
			}
			if held := len(counts) - 4; tt.past == "held" && held != len(past) {
				t.Errorf("%d responses held back without a count, %d counted", len(past), held)
			}
			// A second on, every count is at rest: a new one is answered.
			clock.Add(int64(time.Second))
			if got := verdicts(l, 1, "203.0.113.1", kindError, 0, ""); got != "send" {
				t.Errorf("a second on, a new source: %s, want send", got)
			}
		})
	}
}

// TestRateLimitFullTableUDP: over UDP, a flood from other networks that
// fills the limiter's table leaves a limited network limited.
func TestRateLimitFullTableUDP(t *testing.T) {
	addr, _, limited := rrlServer(t, Options{RateLimit: 2, RateLimitSlip: 2}, func(l *limiter) { l.max = 8 })
	victim := newUDPAsker(t, addr, "", limited)
	q := rrlQuery("fixed.apps.example.com.", mdns.TypeA, false)
	if got, want := victim.askN(3, q), "full full tc"; got != want {
		t.Fatalf("victim: got %s, want %s", got, want)
	}
	for i := range 64 {
		src := fmt.Sprintf("127.0.%d.1", 10+i)
		if got := newUDPAsker(t, addr, src, limited).askN(1, q); got != "full" {
			t.Fatalf("%s: got %s, want full", src, got)
		}
	}
	if got, want := victim.askN(2, q), "drop tc"; got != want {
		t.Errorf("victim after 64 other networks: got %s, want %s (still limited)", got, want)
	}
}

// TestRateLimitFullTableSendsNewCountsToTCP: when a flood of forged
// networks has filled the limiter's table with counts that are all
// limiting, a response that finds no room has no count, and so is the
// first over the limit of its own: truncated, as the first over a limit
// always is (dropped only with slip 0), never by turns with the flood's.
// A resolver in a network that was never over any limit must not lose
// its first query, and every one after, to the flood: TC sends it over
// TCP, which is never limited, at once.
func TestRateLimitFullTableSendsNewCountsToTCP(t *testing.T) {
	for _, tt := range []struct {
		slip int
		want string // each fresh network's one UDP query
	}{
		{1, "tc"},
		{2, "tc"},
		{3, "tc"},
		{0, "drop"},
	} {
		t.Run(fmt.Sprintf("slip %d", tt.slip), func(t *testing.T) {
			addr, _, limited := rrlServer(t, Options{RateLimit: 2, RateLimitSlip: tt.slip}, func(l *limiter) { l.max = 8 })
			q := rrlQuery("fixed.apps.example.com.", mdns.TypeA, false)
			// The clock stands still: each of the flood's networks
			// spends its count, limiting it, and the table fills.
			for i := range 16 {
				newUDPAsker(t, addr, fmt.Sprintf("127.0.%d.1", 10+i), limited).askN(2, q)
			}
			for i := range 4 {
				src := fmt.Sprintf("127.1.%d.1", i)
				if got := newUDPAsker(t, addr, src, limited).askN(1, q); got != tt.want {
					t.Errorf("%s, new among a full table's limiting counts: got %s, want %s", src, got, tt.want)
				}
			}
			if m := ask(t, "tcp", addr, "fixed.apps.example.com.", mdns.TypeA, 0); m.Truncated || len(m.Answer) != 1 {
				t.Errorf("over TCP: %v, want the answer", m)
			}
		})
	}
}

// rrlServer serves zones with the given rate limit on loopback, its
// limiter's clock stopped where the test moves it, and returns its
// address, the clock, and the limited responses as the server counts them.
// tweak, if given, adjusts the limiter before the server starts.
func rrlServer(t *testing.T, o Options, tweak ...func(*limiter)) (string, *atomic.Int64, <-chan string) {
	t.Helper()
	limited := make(chan string, 100)
	o.Addr = "127.0.0.1:0"
	o.RateLimited = func(a string) { limited <- a }
	if o.Zones == nil {
		o.Zones = func() []Zone { return testZones }
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(int64(time.Hour))
	s.rrl.now = clock.Load
	for _, f := range tweak {
		f(s.rrl)
	}
	pc, ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, "serve", func(ctx context.Context) error { return s.Serve(ctx, pc, ln) })
	return pc.LocalAddr().String(), &clock, limited
}

// udpAsker sends queries over one UDP socket from local and says, for
// each, what came of it: the reply, or nil when the server counted it
// dropped.
type udpAsker struct {
	t       *testing.T
	c       net.Conn
	replies chan []byte
	limited <-chan string
}

func newUDPAsker(t *testing.T, addr, local string, limited <-chan string) *udpAsker {
	t.Helper()
	d := net.Dialer{}
	if local != "" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	a := &udpAsker{t: t, c: c, replies: make(chan []byte, 100), limited: limited}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			buf := make([]byte, 65535)
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			a.replies <- buf[:n]
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return a
}

// ask sends q and waits for its reply or for the server to count a drop;
// a truncation is counted too, and must come with its reply.
func (a *udpAsker) ask(q *mdns.Msg) *mdns.Msg {
	a.t.Helper()
	b, err := q.Pack()
	if err != nil {
		a.t.Fatal(err)
	}
	return a.askBytes(b, q.Id)
}

// askBytes is ask with the query as bytes, id its id.
func (a *udpAsker) askBytes(b []byte, id uint16) *mdns.Msg {
	a.t.Helper()
	if _, err := a.c.Write(b); err != nil {
		a.t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	var counted string
	for {
		select {
		case r := <-a.replies:
			m := new(mdns.Msg)
			if err := m.Unpack(r); err != nil {
				a.t.Fatalf("reply: %v", err)
			}
			if m.Id != id {
				a.t.Fatalf("reply to %d, want to %d", m.Id, id)
			}
			if m.Truncated && counted == "" {
				// The server counts before it writes, but the reader
				// may be first to hand its part over.
				select {
				case counted = <-a.limited:
				case <-timeout:
					a.t.Fatal("a truncated reply, not counted")
				}
			}
			if m.Truncated != (counted == "truncated") {
				a.t.Fatalf("reply TC=%v, counted %q", m.Truncated, counted)
			}
			return m
		case counted = <-a.limited:
			if counted == "dropped" {
				return nil
			}
		case <-timeout:
			a.t.Fatal("no reply, and no drop counted, in 10s")
		}
	}
}

// outcome is a reply in brief: "full" (records, TC clear), "tc" (TC set,
// the question and OPT kept, nothing else), "drop", or the rcode.
func outcome(t *testing.T, q, m *mdns.Msg) string {
	t.Helper()
	switch {
	case m == nil:
		return "drop"
	case m.Truncated:
		if len(m.Answer) != 0 || len(m.Ns) != 0 || !slices.Equal(m.Question, q.Question) || (m.IsEdns0() != nil) != (q.IsEdns0() != nil) || len(m.Extra) > 1 {
			t.Errorf("truncated reply %v to %v: want the question, the OPT if asked with one, nothing else", m, q)
		}
		return "tc"
	case m.Rcode != mdns.RcodeSuccess:
		return mdns.RcodeToString[m.Rcode]
	case len(m.Answer) > 0:
		return "full"
	}
	return "nodata"
}

func rrlQuery(name string, qt uint16, edns bool) *mdns.Msg {
	q := new(mdns.Msg)
	q.SetQuestion(name, qt)
	if edns {
		q.SetEdns0(1232, false)
	}
	return q
}

// askN asks q n times (a new id each) and returns the outcomes.
func (a *udpAsker) askN(n int, q *mdns.Msg) string {
	a.t.Helper()
	var out []string
	for range n {
		q.Id = mdns.Id()
		out = append(out, outcome(a.t, q, a.ask(q)))
	}
	return strings.Join(out, " ")
}

// TestRateLimitUDP: over UDP, the same answer to one source network is
// sent rate times, then truncated every slip-th time and dropped the
// others; another name, another network, and TCP are not held back, and
// a second on the budget is back.
func TestRateLimitUDP(t *testing.T) {
	addr, clock, limited := rrlServer(t, Options{RateLimit: 3, RateLimitSlip: 2})
	a := newUDPAsker(t, addr, "", limited)

	fixed := rrlQuery("fixed.apps.example.com.", mdns.TypeA, true)
	if got, want := a.askN(8, fixed), "full full full tc drop tc drop tc"; got != want {
		t.Errorf("fixed, with EDNS:\n got %s\nwant %s", got, want)
	}
	if got, want := a.askN(2, rrlQuery("FIXED.apps.example.com.", mdns.TypeA, false)), "drop tc"; got != want {
		t.Errorf("fixed in other case, no EDNS: got %s, want %s", got, want)
	}
	if got, want := a.askN(4, rrlQuery("hello.apps.example.com.", mdns.TypeTXT, false)), "nodata nodata nodata tc"; got != want {
		t.Errorf("another name: got %s, want %s", got, want)
	}
	// NODATA counts by zone: another name's is the same count.
	if got, want := a.askN(1, rrlQuery("other.apps.example.com.", mdns.TypeTXT, false)), "drop"; got != want {
		t.Errorf("NODATA, another name: got %s, want %s", got, want)
	}
	// Names the gateways' wildcard answers count as the wildcard.
	var wild []string
	for i := range 4 {
		wild = append(wild, a.askN(1, rrlQuery(fmt.Sprintf("rand%d.apps.example.com.", i), mdns.TypeA, false)))
	}
	if got, want := strings.Join(wild, " "), "full full full tc"; got != want {
		t.Errorf("random names under the wildcard: got %s, want %s", got, want)
	}
	// Errors, screen's (FORMERR to a query with bytes after its last
	// record) and the handler's (REFUSED), are one count.
	trailing := func() string {
		q := rrlQuery("fixed.apps.example.com.", mdns.TypeA, true)
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return outcome(t, q, a.askBytes(append(b, 0), q.Id))
	}
	refused := rrlQuery("example.org.", mdns.TypeA, true)
	got := []string{a.askN(2, refused), trailing(), a.askN(1, refused), trailing(), trailing()}
	if got, want := strings.Join(got, " "), "REFUSED REFUSED FORMERR tc drop tc"; got != want {
		t.Errorf("errors:\n got %s\nwant %s", got, want)
	}

	other := newUDPAsker(t, addr, "127.0.1.1", limited)
	if got, want := other.askN(4, fixed), "full full full tc"; got != want {
		t.Errorf("another /24: got %s, want %s", got, want)
	}

	for i := range 8 {
		if m := ask(t, "tcp", addr, "fixed.apps.example.com.", mdns.TypeA, 1232); m.Truncated || len(m.Answer) != 1 {
			t.Fatalf("TCP query %d: %v", i, m)
		}
	}

	clock.Add(int64(time.Second))
	if got, want := a.askN(4, fixed), "full full full tc"; got != want {
		t.Errorf("a second on: got %s, want %s", got, want)
	}
	select {
	case c := <-limited:
		t.Errorf("a limited response not accounted for: %s", c)
	default:
	}
}

// TestRateLimitExemptsRecursionSources: the platform's networks, which
// may recurse, are never limited, in-zone answers and errors alike.
func TestRateLimitExemptsRecursionSources(t *testing.T) {
	// Never asked: every question here is in a zone or refused.
	fwd, err := NewForwarder(ForwarderOptions{Upstreams: []string{"192.0.2.53:53"}})
	if err != nil {
		t.Fatal(err)
	}
	addr, _, limited := rrlServer(t, Options{RateLimit: 1, RateLimitSlip: 1, Forwarder: fwd,
		RecursionAllow: []netip.Prefix{netip.MustParsePrefix("127.0.2.0/24")}})
	platform := newUDPAsker(t, addr, "127.0.2.1", limited)
	if got, want := platform.askN(5, rrlQuery("fixed.apps.example.com.", mdns.TypeA, false)), "full full full full full"; got != want {
		t.Errorf("platform source: got %s, want %s", got, want)
	}
	meta := rrlQuery("fixed.apps.example.com.", mdns.TypeAXFR, false)
	if got, want := platform.askN(3, meta), "REFUSED REFUSED REFUSED"; got != want {
		t.Errorf("platform source, errors: got %s, want %s", got, want)
	}
	other := newUDPAsker(t, addr, "127.0.3.1", limited)
	if got, want := other.askN(2, meta), "REFUSED tc"; got != want {
		t.Errorf("other source: got %s, want %s", got, want)
	}
}

// TestRateLimitRealClock: with the server's own clock, a bucket of one
// a second is spent by one answer and back within about a second.
func TestRateLimitRealClock(t *testing.T) {
	limited := make(chan string, 100)
	addr := startWith(t, Options{Zones: func() []Zone { return testZones }, RateLimit: 1, RateLimitSlip: 1,
		RateLimited: func(a string) { limited <- a }})
	a := newUDPAsker(t, addr, "", limited)
	q := rrlQuery("fixed.apps.example.com.", mdns.TypeA, true)
	start := time.Now()
	if got := a.askN(1, q); got != "full" {
		t.Fatalf("first: %s", got)
	}
	if got := a.askN(1, q); got != "tc" && time.Since(start) < time.Second {
		t.Fatalf("second, at once: %s, want tc", got)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("no full answer again within 5s")
		}
		got := a.askN(1, q)
		if got == "full" {
			if d := time.Since(start); d < 900*time.Millisecond {
				t.Fatalf("answered in full again after %v, before the bucket refilled", d)
			}
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the refill: no event to wait on
	}
}

func TestNewValidatesRateLimit(t *testing.T) {
	zones := func() []Zone { return nil }
	for _, o := range []Options{
		{RateLimit: -1}, {RateLimit: maxRateLimit + 1},
		{RateLimit: 20, RateLimitSlip: -1}, {RateLimit: 20, RateLimitSlip: maxRateLimitSlip + 1},
	} {
		o.Addr, o.Zones = "127.0.0.1:0", zones
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "rate limit") {
			t.Errorf("New(RateLimit %d, RateLimitSlip %d): %v, want refused", o.RateLimit, o.RateLimitSlip, err)
		}
	}
	for _, o := range []Options{{RateLimit: 0}, {RateLimit: maxRateLimit, RateLimitSlip: maxRateLimitSlip}, {RateLimit: 1}} {
		o.Addr, o.Zones = "127.0.0.1:0", zones
		if _, err := New(o); err != nil {
			t.Errorf("New(RateLimit %d, RateLimitSlip %d): %v", o.RateLimit, o.RateLimitSlip, err)
		}
	}
}

// TestRateLimitCountsTheAnswerNotTheQtype: a CNAME answers every type
// asked at its name, and an explicit wildcard's CNAME every type at every
// name under it, with the same records: asking for another type each
// time must not buy a fresh count. Answers that differ (a name's A and its
// TXT, an explicit wildcard's A and the gateways') still count apart.
func TestRateLimitCountsTheAnswerNotTheQtype(t *testing.T) {
	zones := []Zone{{
		Name:     "apps.example.com",
		Gateways: []netip.Addr{netip.MustParseAddr("192.0.2.10")},
		Records: []Record{
			{Name: "www.apps.example.com", Type: "CNAME", Values: []string{"target.example.net"}},
			{Name: "*.cdn.apps.example.com", Type: "CNAME", Values: []string{"edge.example.net"}},
			{Name: "*.img.apps.example.com", Type: "A", Values: []string{"192.0.2.7"}},
			{Name: "both.apps.example.com", Type: "A", Values: []string{"192.0.2.1"}},
			{Name: "both.apps.example.com", Type: "TXT", Values: []string{"v=1"}},
			{Name: "one.apps.example.com", Type: "CNAME", Values: []string{"hello.apps.example.com"}},
			{Name: "two.apps.example.com", Type: "CNAME", Values: []string{"hello.apps.example.com"}},
		},
	}}
	for _, tt := range []struct {
		name string
		qs   []*mdns.Msg
		want string
	}{
		{
			name: "a CNAME, other types",
			qs: []*mdns.Msg{rrlQuery("www.apps.example.com.", mdns.TypeA, false), rrlQuery("www.apps.example.com.", mdns.TypeMX, false),
				rrlQuery("www.apps.example.com.", 1000, false), rrlQuery("www.apps.example.com.", 1001, false)},
			want: "full full full tc",
		},
		{
			name: "a wildcard CNAME, other names and types",
			qs: []*mdns.Msg{rrlQuery("a.cdn.apps.example.com.", mdns.TypeA, false), rrlQuery("b.cdn.apps.example.com.", mdns.TypeSRV, false),
				rrlQuery("c.cdn.apps.example.com.", 2000, false), rrlQuery("d.cdn.apps.example.com.", 2001, false)},
			want: "full full full tc",
		},
		{
			// the same type from an explicit wildcard and the gateways'
			name: "two wildcards",
			qs: []*mdns.Msg{rrlQuery("a.img.apps.example.com.", mdns.TypeA, false), rrlQuery("b.img.apps.example.com.", mdns.TypeA, false),
				rrlQuery("c.img.apps.example.com.", mdns.TypeA, false), rrlQuery("other.apps.example.com.", mdns.TypeA, false)},
			want: "full full full full",
		},
		{
			// by the name asked, not the end of the chain (the gateways')
			name: "two CNAMEs to one name in the zone",
			qs: []*mdns.Msg{rrlQuery("one.apps.example.com.", mdns.TypeA, false), rrlQuery("one.apps.example.com.", mdns.TypeA, false),
				rrlQuery("one.apps.example.com.", mdns.TypeA, false), rrlQuery("two.apps.example.com.", mdns.TypeA, false)},
			want: "full full full full",
		},
		{
			// the same gateways, but the apex is a name of its own
			name: "the apex and the gateways' wildcard",
			qs: []*mdns.Msg{rrlQuery("apps.example.com.", mdns.TypeA, false), rrlQuery("apps.example.com.", mdns.TypeA, false),
				rrlQuery("apps.example.com.", mdns.TypeA, false), rrlQuery("other.apps.example.com.", mdns.TypeA, false)},
			want: "full full full full",
		},
		{
			name: "a name's A and TXT",
			qs: []*mdns.Msg{rrlQuery("both.apps.example.com.", mdns.TypeA, false), rrlQuery("both.apps.example.com.", mdns.TypeA, false),
				rrlQuery("both.apps.example.com.", mdns.TypeA, false), rrlQuery("both.apps.example.com.", mdns.TypeTXT, false)},
			want: "full full full full",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, _, limited := rrlServer(t, Options{RateLimit: 3, RateLimitSlip: 1, Zones: func() []Zone { return zones }})
			a := newUDPAsker(t, addr, "", limited)
			var got []string
			for _, q := range tt.qs {
				got = append(got, a.askN(1, q))
			}
			if got := strings.Join(got, " "); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRateLimitUnparsedQueries: a query that does not parse, its last
// record cut short or an A record of three bytes, is answered FORMERR as
// before, and over UDP that error is limited with the others: miekg/dns
// would write it itself, past every limit.
func TestRateLimitUnparsedQueries(t *testing.T) {
	q := rrlQuery("fixed.apps.example.com.", mdns.TypeA, true)
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	cut := b[:len(b)-3] // the OPT's last bytes
	short := new(mdns.Msg)
	short.SetQuestion("fixed.apps.example.com.", mdns.TypeA)
	sb, err := short.Pack()
	if err != nil {
		t.Fatal(err)
	}
	sb[11] = 1 // ARCOUNT: one record, an A of the root with three bytes of address
	sb = append(sb, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 3, 192, 0, 2)
	for _, tt := range []struct {
		name string
		b    []byte
	}{{"last record cut", cut}, {"A record of three bytes", sb}} {
		t.Run(tt.name, func(t *testing.T) {
			addr, _, limited := rrlServer(t, Options{RateLimit: 1, RateLimitSlip: 2})
			a := newUDPAsker(t, addr, "", limited)
			var got []string
			for range 4 {
				id := mdns.Id()
				binary.BigEndian.PutUint16(tt.b, id)
				m := a.askBytes(tt.b, id)
				if m != nil && !m.Truncated && (len(m.Question) != 1 || m.Question[0].Name != "fixed.apps.example.com.") {
					t.Errorf("reply %v: want the question", m)
				}
				got = append(got, outcome(t, short, m))
			}
			if got, want := strings.Join(got, " "), "FORMERR tc drop tc"; got != want {
				t.Errorf("got %s, want %s", got, want)
			}
			// Over TCP, never limited.
			for range 3 {
				if m := new(mdns.Msg); m.Unpack(rawTCP(t, addr, tt.b)) != nil || m.Rcode != mdns.RcodeFormatError || m.Truncated {
					t.Fatalf("TCP: %v", m)
				}
			}
		})
	}
}

// TestRateLimitQueriesRefusedByTheirHeader: miekg/dns refuses some queries
// from their header alone (an opcode it does not serve, not one question)
// and answers them a bare header without reading further; screen, when
// what follows the header does not parse (nothing at all, a name pointing
// past the message), must send that reply itself over UDP for the limiter
// to count it. Before, a header of 12 bytes, forged from a victim, was
// answered every time. The reply not limited is the one TCP gets.
func TestRateLimitQueriesRefusedByTheirHeader(t *testing.T) {
	update := uint16(mdns.OpcodeUpdate) << 11
	hdr := func(bits, qd uint16, rest ...byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, 0)
		b = binary.BigEndian.AppendUint16(b, bits)
		b = binary.BigEndian.AppendUint16(b, qd)
		return append(append(b, 0, 0, 0, 0, 0, 0), rest...)
	}
	cut := hdr(update, 1, 0, 0, 6, 0, 1, 0, 0, 1)
	cut[9] = 1 // NSCOUNT (UPDATE's prerequisites): one, cut short
	for _, tt := range []struct {
		name  string
		b     []byte
		rcode string
	}{
		{"UPDATE, the header alone", hdr(update, 1), "NOTIMP"},
		{"UPDATE, its zone name a pointer past the message", hdr(update, 1, 0xC0, 0xFF, 0, 6, 0, 1), "NOTIMP"},
		{"UPDATE, its one record cut short", cut, "NOTIMP"},
		{"no question, the header alone", hdr(1<<8, 0), "FORMERR"},
		{"two questions, the header alone", hdr(1<<8, 2), "FORMERR"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, _, limited := rrlServer(t, Options{RateLimit: 1, RateLimitSlip: 2})
			a := newUDPAsker(t, addr, "", limited)
			var got []string
			for i := range 4 {
				id := mdns.Id()
				binary.BigEndian.PutUint16(tt.b, id)
				m := a.askBytes(tt.b, id)
				got = append(got, outcome(t, new(mdns.Msg), m))
				if i == 0 && m != nil {
					// miekg/dns's own reply, which TCP gets.
					udp, err := m.Pack()
					if err != nil {
						t.Fatal(err)
					}
					if tcp := rawTCP(t, addr, tt.b); !bytes.Equal(udp, tcp) {
						t.Errorf("UDP reply %x, TCP reply %x: want the same", udp, tcp)
					}
				}
			}
			if got, want := strings.Join(got, " "), tt.rcode+" tc drop tc"; got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

// TestSlippedBADKEYSameFromScreenAndServe: a signed message over the
// limit, slipped, gets the same reply whether serve answers it (a QUERY)
// or screen does (an UPDATE): NOTAUTH with TC set, the question, the OPT
// and the unsigned BADKEY TSIG, nothing else. Errors share one count per
// network, so the first message spends the budget and both after it slip.
func TestSlippedBADKEYSameFromScreenAndServe(t *testing.T) {
	addr, _, limited := rrlServer(t, Options{RateLimit: 1, RateLimitSlip: 1})
	signed := func(op int) *mdns.Msg {
		q := new(mdns.Msg)
		q.SetQuestion("hello.apps.example.com.", mdns.TypeA)
		q.Opcode = op
		q.SetEdns0(1232, false)
		return q
	}
	if r := exchangeSigned(t, "udp", addr, signed(mdns.OpcodeQuery), "platform-key."); r.Rcode != mdns.RcodeNotAuth || r.Truncated {
		t.Fatalf("first: %v, want NOTAUTH in full", r)
	}
	for _, op := range []int{mdns.OpcodeQuery, mdns.OpcodeUpdate} {
		q := signed(op)
		r := exchangeSigned(t, "udp", addr, q, "platform-key.")
		ts := r.IsTsig()
		if r.Rcode != mdns.RcodeNotAuth || !r.Truncated || r.Opcode != op || len(r.Question) != 1 || r.IsEdns0() == nil ||
			ts == nil || ts.Error != mdns.RcodeBadKey || len(r.Answer)+len(r.Ns) != 0 || len(r.Extra) != 2 {
			t.Errorf("opcode %d over the limit: %v; want NOTAUTH, TC, the question, OPT and BADKEY TSIG", op, r)
		}
		if a := <-limited; a != "truncated" {
			t.Errorf("opcode %d: counted %q, want truncated", op, a)
		}
	}
}
