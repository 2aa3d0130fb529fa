package dns

import (
	"hash/maphash"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Response rate limiting (RRL), as BIND's rate-limit, Knot's rrl and NSD's
// rrl-ratelimit do it. A UDP source address can be forged: an attacker
// sends small queries in a victim's name and we send the victim larger
// answers. A resolver caches what we answer for its TTL, so the same
// answer to the same network many times a second is such an attack, and
// past Options.RateLimit a second it is dropped, but for one in every
// Options.RateLimitSlip, sent truncated instead: a real resolver there
// asks again over TCP, where the source is proven, and is answered.
//
// Responses are counted per source network (IPv4 /24, IPv6 /56: one
// network's resolvers and an attacker's spread of addresses count as one)
// and per response:
//   - an answer, by the name asked and the type of its first record (a
//     CNAME's, whatever type was asked); one the wildcard gave (the
//     zone's gateways, or an explicit *.{name} set), by that wildcard, so
//     that random names under it, each answered, share one count;
//   - NODATA, by the zone: every name exists here (the gateways' wildcard
//     covers it), so random names would otherwise each count apart;
//   - every error (REFUSED, FORMERR, NOTIMP, BADVERS, NOTAUTH to a
//     TSIG-signed query, SERVFAIL), one count per network.

// respKind is what a response is counted by, besides its source network.
type respKind uint8

const (
	kindAnswer   respKind = iota + 1 // name: the question's
	kindWildcard                     // name: the wildcard's parent
	kindNoData                       // name: the zone's
	kindError                        // no name
)

func (k respKind) String() string {
	switch k {
	case kindAnswer:
		return "answer"
	case kindWildcard:
		return "wildcard"
	case kindNoData:
		return "nodata"
	}
	return "error"
}

// verdict is what becomes of one response.
type verdict uint8

const (
	send     verdict = iota // under the limit: answered in full
	drop                    // over it: not answered
	truncate                // over it, the slip-th: TC set, records cut
)

// maxRateLimit bounds Options.RateLimit, as BIND bounds responses-per-second.
const maxRateLimit = 1000

// maxRateLimitSlip bounds Options.RateLimitSlip, as BIND bounds slip.
const maxRateLimitSlip = 10

// maxLimiterEntries bounds the limiter's table: a flood of forged sources
// adds an entry per network and response, and must not grow it without
// end. An entry is 48 bytes of map slot, and none holds a pointer, so
// the collector never scans the table: about 7 MiB when full, with the
// map's spare slots (TestLimiterBounded measures it). BIND's
// max-table-size defaults to 20,000 entries; this leaves a busy server
// room for every resolver network it hears from in one second.
const maxLimiterEntries = 1 << 16

// limiter holds one token bucket per (source network, response), kept as
// the bucket's theoretical arrival time (GCRA): a response at now is
// allowed when tat, pushed one interval on, is no more than burst past
// now. A bucket at rest (tat ≤ now) is full, the same as no entry, so
// such entries are dropped when room is needed, lazily: no goroutine
// outlives the server.
type limiter struct {
	slip     uint32
	interval int64 // ns: one response's worth of the bucket, 1s / rate
	burst    int64 // ns: a full bucket, rate × interval
	max      int   // entries at most
	seed     maphash.Seed
	now      func() int64 // monotonic ns; tests stop it
	log      *slog.Logger
	counted  func(action string) // nil: not counted

	mu        sync.Mutex
	table     map[limitKey]limitEntry
	lastSweep int64
	lastLog   int64
	logged    bool // lastLog is set
}

type limitKey struct {
	net   [16]byte // the source network's address: /24 (mapped) or /56
	name  uint64   // the name's hash, case folded
	qtype uint16
	kind  respKind
}

type limitEntry struct {
	tat  int64
	over uint32 // responses over the limit since the last one sent
}

func newLimiter(rate, slip int, log *slog.Logger, counted func(string)) *limiter {
	epoch := time.Now()
	interval := int64(time.Second) / int64(rate)
	return &limiter{
		slip:     uint32(slip),
		interval: interval,
		burst:    interval * int64(rate),
		max:      maxLimiterEntries,
		seed:     maphash.MakeSeed(),
		now:      func() int64 { return int64(time.Since(epoch)) },
		log:      log,
		counted:  counted,
		table:    make(map[limitKey]limitEntry),
	}
}

// check counts a response of kind for qtype and name (lowercase or not:
// it is folded) to src, and says what becomes of it.
func (l *limiter) check(src netip.Addr, kind respKind, qtype uint16, name string) verdict {
	k := limitKey{net: sourceNet(src), qtype: qtype, kind: kind}
	if kind != kindError {
		k.name = l.hash(name)
	}
	now := l.now()
	l.mu.Lock()
	e, ok := l.table[k]
	if !ok {
		if len(l.table) >= l.max && !l.makeRoom(now) {
			// Every count weighed is limiting its network: taking one's
			// place would hand that network its budget back, which a
			// flood of forged sources could do at will. This response
			// is held back instead, as the first over the limit of a
			// count of its own, which it does not get: truncated (but
			// for slip 0), as every first one is, so that a real
			// resolver asks over TCP at once. Slipped by turns with the
			// flood's, it would lose all but one in slip of its tries.
			v := l.slipped(1)
			l.mu.Unlock()
			l.count(v)
			return v
		}
		e.tat = now
	}
	if tat := max(e.tat, now) + l.interval; tat-now <= l.burst {
		l.table[k] = limitEntry{tat: tat}
		l.mu.Unlock()
		return send
	}
	e.over++
	l.table[k] = e
	v := l.slipped(e.over)
	// One line when a bucket starts to be limited, at most one a second
	// in all: a flood must not turn into a flood of log lines.
	logIt := e.over == 1 && (!l.logged || now-l.lastLog >= int64(time.Second))
	if logIt {
		l.logged, l.lastLog = true, now
	}
	l.mu.Unlock()
	if logIt {
		p, _ := src.Unmap().Prefix(sourceBits(src))
		l.log.Info("dns: rate limiting responses", "source", p.String(), "response", kind.String(), "name", name)
	}
	l.count(v)
	return v
}

// slipped is the verdict on the over-th response over the limit in a row.
func (l *limiter) slipped(over uint32) verdict {
	if l.slip > 0 && (over-1)%l.slip == 0 {
		// The first over the limit is one of them, so a resolver that
		// just crossed it is sent to TCP at once, not after a timeout.
		return truncate
	}
	return drop
}

// count reports a response held back with verdict v.
func (l *limiter) count(v verdict) {
	if l.counted != nil {
		if v == drop {
			l.counted("dropped")
		} else {
			l.counted("truncated")
		}
	}
}

// makeRoom makes room in the full table for one entry, and reports
// whether it could. Entries at rest go first, all of them, at most once
// a bucket's span (a sweep reads the whole table). Else, of evictSample
// entries (the map's iteration starts at random), the one nearest to
// full goes (idle longest, or spent least), but never one that is
// limiting: dropping it would restart its count full, and a flood of
// forged sources, a new entry each, would so hand the victim of a
// reflection its answers back early. BIND likewise keeps its penalized
// entries when it recycles; NSD and Knot's hashed tables let a colliding
// source take any one's place. With none to spare, makeRoom fails, and
// the response is held back (check): memory stays bounded.
func (l *limiter) makeRoom(now int64) bool {
	if now-l.lastSweep >= l.burst || l.lastSweep == 0 {
		l.lastSweep = now
		for k, e := range l.table {
			if e.tat <= now {
				delete(l.table, k)
			}
		}
		if len(l.table) < l.max {
			return true
		}
	}
	var victim limitKey
	var victimTat int64
	found := false
	n := 0
	for k, e := range l.table {
		if !l.limiting(e, now) && (!found || e.tat < victimTat) {
			victim, victimTat, found = k, e.tat, true
		}
		if n++; n == evictSample {
			break
		}
	}
	if found {
		delete(l.table, victim)
	}
	return found
}

// evictSample is how many entries makeRoom weighs for one to drop: a
// fixed cost per new entry however large the table. Only when nearly
// every entry is limiting do all of a sample's tend to be, and a new
// response is then held back though a few could have gone.
const evictSample = 32

// limiting reports whether e holds its bucket's responses back at now:
// the next one would be over the limit.
func (l *limiter) limiting(e limitEntry, now int64) bool {
	return e.tat-now > l.burst-l.interval
}

// hash is name's hash, ASCII case folded (RFC 4343), without allocating.
func (l *limiter) hash(name string) uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	var buf [64]byte
	for len(name) > 0 {
		n := copy(buf[:], name)
		for i := range n {
			if c := buf[i]; 'A' <= c && c <= 'Z' {
				buf[i] = c + 'a' - 'A'
			}
		}
		h.Write(buf[:n])
		name = name[n:]
	}
	return h.Sum64()
}

// sourceBits is the prefix length a source's network is counted on: /24
// for IPv4, as BIND's ipv4-prefix-length; /56 for IPv6, as its
// ipv6-prefix-length, the size one site is commonly given.
func sourceBits(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 24
	}
	return 56
}

func sourceNet(a netip.Addr) [16]byte {
	a = a.Unmap()
	p, _ := a.Prefix(sourceBits(a))
	return p.Addr().As16()
}

// addrOf is a's IP, unmapped; the zero Addr for another kind of address.
func addrOf(a net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	}
	return ip.Unmap()
}

// bucketOf is what resp is counted by, a what [answer] found of the
// question's name (zero when answer did not build resp: an error).
func bucketOf(resp *mdns.Msg, a asked) (kind respKind, qtype uint16, name string) {
	if a.zone == nil || resp.Rcode != mdns.RcodeSuccess && resp.Rcode != mdns.RcodeNameError {
		return kindError, 0, ""
	}
	if len(resp.Answer) == 0 {
		return kindNoData, 0, a.zone.Name
	}
	// By the type answered, not the type asked: a CNAME answers every
	// type at its name with the same records, and 65,000 types asked
	// would otherwise be as many counts. Over UDP ANY is answered with
	// its first RRset (RFC 8482), which counts as asking for its type.
	qtype = resp.Answer[0].Header().Rrtype
	switch {
	case a.own:
		return kindAnswer, qtype, a.name
	case a.wildcard != "":
		return kindWildcard, qtype, a.wildcard
	}
	return kindWildcard, qtype, a.zone.Name // the gateways' *.{zone}
}

// slipped is resp as a rate-limited truncation: its header with TC set,
// its question, and its OPT, if it has one; no record else, so it is
// about the size of the query and amplifies nothing.
func slipped(resp *mdns.Msg) *mdns.Msg {
	tc := &mdns.Msg{MsgHdr: resp.MsgHdr, Question: resp.Question}
	tc.Truncated = true
	if opt := resp.IsEdns0(); opt != nil {
		tc.Extra = []mdns.RR{opt}
	}
	return tc
}

// limits reports whether UDP replies to from are rate limited: the
// limiter is on, and from may not recurse. The sources in
// Options.RecursionAllow are the platform's own networks, which the
// operator vouches cannot be forged from outside; their resolvers relay
// every client's query, and stubs there without a cache of their own ask
// the same name many times a second, which is no attack.
func (s *Server) limits(from net.Addr) bool {
	return s.rrl != nil && !s.mayRecurse(from)
}

// limitReject is screen's reply (an error) to a UDP query from from,
// rate limited: nil when dropped, with TC set when slipped. Such a reply
// holds the question, an OPT and a BADKEY TSIG at most, what serve's
// slip of the same error holds (slipped keeps the question and OPT, and
// the TSIG is appended after it), so TC alone makes it the slip.
func (s *Server) limitReject(reply []byte, from net.Addr) []byte {
	if !s.limits(from) {
		return reply
	}
	switch s.rrl.check(addrOf(from), kindError, 0, "") {
	case drop:
		return nil
	case truncate:
		reply[2] |= 0x02 // TC
	}
	return reply
}
