package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
)

// Options configures a [Server].
type Options struct {
	// Addr is the host:port to serve on, UDP and TCP both. Required.
	Addr string
	// Zones returns the current zones; it is called once per query and must
	// be cheap and safe for concurrent use. Required.
	Zones func() []Zone
	// Forwarder recurses for names outside every zone (DESIGN §8). nil:
	// recursion is off, and every such name gets REFUSED.
	Forwarder *Forwarder
	// RecursionAllow are the source networks whose queries may recurse,
	// over UDP and TCP alike. A query from elsewhere, or without RD, for a
	// name outside every zone gets REFUSED. Empty: none. Needs Forwarder.
	RecursionAllow []netip.Prefix
	// RateLimit is the most UDP responses a second to one source network
	// (IPv4 /24, IPv6 /56) for one response, the same answer, NODATA
	// of a zone or error (see ratelimit.go); past it they are dropped
	// or slipped (RateLimitSlip). TCP and the sources in RecursionAllow
	// are never limited. 0: off; at most 1000.
	RateLimit int
	// RateLimitSlip: of the responses over RateLimit, one in every
	// RateLimitSlip is sent truncated (TC set, no records) rather than
	// dropped, for a real resolver there to ask again over TCP. 0: every
	// one is dropped; 1: every one truncated; at most 10.
	RateLimitSlip int
	// RateLimited is called with "dropped" or "truncated" for each
	// response over RateLimit; nil: not counted.
	RateLimited func(action string)
	// Logger; nil discards.
	Logger *slog.Logger
}

// Server answers DNS over UDP and TCP on one address.
type Server struct {
	opts Options
	log  *slog.Logger
	// writeTimeout bounds one TCP write ([tcpWriteTimeout]; tests shorten it).
	writeTimeout time.Duration
	// maxConns is the most TCP connections open at once ([maxTCPConns];
	// tests lower it).
	maxConns int
	// maxPerSource is the most of them one source may hold
	// ([maxTCPConnsPerSource]; tests lower it).
	maxPerSource int
	// rrl limits UDP responses (Options.RateLimit); nil: off.
	rrl *limiter
}

// tcpWriteTimeout bounds one TCP write. A client that does not take an
// answer (64 KiB at most) within it is closed: one that queues queries and
// never reads would otherwise hold its connection and goroutine for ever,
// and keep Serve from returning when it stops.
const tcpWriteTimeout = 5 * time.Second

// maxTCPConns is the most TCP connections served at once; one past it is
// closed as soon as it is accepted (RFC 7766 §6.2.2: servers SHOULD limit
// concurrent connections; BIND's tcp-clients, Knot's tcp-max-clients).
// Each holds a descriptor and a goroutine until it closes or idles, and the
// descriptors are the HTTPS listener's too. Resolvers come over TCP only
// after a truncated UDP answer, and close or idle out within seconds.
const maxTCPConns = 1000

// maxTCPConnsPerSource is the most of those one source holds (an IPv4
// address, or an IPv6 /64, which one host is commonly given): without it
// a single client could take every slot and shut all resolvers out of
// TCP, the only path for an answer too large for UDP. dnsdist's
// setMaxTCPConnectionsPerClient and PowerDNS's
// max-tcp-connections-per-client are the same bound (off by default
// there); 50 leaves a busy resolver room and takes 20 sources to fill.
const maxTCPConnsPerSource = 50

// New validates opts. It binds nothing.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		return nil, errors.New("dns: addr is required")
	}
	if _, _, err := net.SplitHostPort(opts.Addr); err != nil {
		return nil, fmt.Errorf("dns: addr %q: %v", opts.Addr, err)
	}
	if opts.Zones == nil {
		return nil, errors.New("dns: zones source is required")
	}
	if len(opts.RecursionAllow) > 0 && opts.Forwarder == nil {
		return nil, errors.New("dns: recursion allow-list without a forwarder")
	}
	for _, p := range opts.RecursionAllow {
		if !p.IsValid() {
			return nil, fmt.Errorf("dns: recursion allow-list: invalid prefix %v", p)
		}
	}
	if opts.RateLimit < 0 || opts.RateLimit > maxRateLimit {
		return nil, fmt.Errorf("dns: rate limit must be 0 (off) to %d, got %d", maxRateLimit, opts.RateLimit)
	}
	if opts.RateLimitSlip < 0 || opts.RateLimitSlip > maxRateLimitSlip {
		return nil, fmt.Errorf("dns: rate limit slip must be 0 to %d, got %d", maxRateLimitSlip, opts.RateLimitSlip)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: log, writeTimeout: tcpWriteTimeout, maxConns: maxTCPConns, maxPerSource: maxTCPConnsPerSource}
	if opts.RateLimit > 0 {
		s.rrl = newLimiter(opts.RateLimit, opts.RateLimitSlip, log, opts.RateLimited)
	}
	return s, nil
}

// ServeDNS answers one query. A forwarded query is bounded by the
// forwarder's deadline alone; [Server.Serve] also ends it when it stops.
func (s *Server) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	s.serve(context.Background(), w, req)
}

// serve answers req: authoritatively from the zones, or, for a name
// outside every zone from a source that may recurse, from the forwarder.
// Every answer to such a source has RA set: recursion is available to it.
func (s *Server) serve(ctx context.Context, w mdns.ResponseWriter, req *mdns.Msg) {
	zones := s.opts.Zones()
	_, udp := w.RemoteAddr().(*net.UDPAddr)
	var resp *mdns.Msg
	opt := req.IsEdns0()
	var badKey *mdns.TSIG // the query's TSIG, when its reply carries BADKEY
	var found asked       // what answer found, when it answers
	ra := s.mayRecurse(w.RemoteAddr())
	switch {
	case badOPT(req):
		// RFC 6891 §6.1.1: more than one OPT is FORMERR, and an OPT
		// outside the additional section or owned by a name other than
		// the root is not one (BIND answers them FORMERR too). Which one
		// holds the requester's size and flags is unknown, so the reply
		// has none. SetRcode, not SetRcodeFormatError, which says QUERY
		// whatever the request's opcode (RFC 1035 §4.1.1: copied).
		resp = new(mdns.Msg).SetRcode(req, mdns.RcodeFormatError)
		resp.RecursionAvailable = ra
		opt = nil
		badKey = signedBy(req)
	case opt != nil && opt.Version() != 0:
		// RFC 6891 §6.1.3: a version we do not speak is answered BADVERS,
		// whose OPT (added below) tells the requester the one we do.
		resp = new(mdns.Msg).SetRcode(req, mdns.RcodeBadVers)
		resp.RecursionAvailable = ra
		badKey = signedBy(req)
	case badTSIG(req):
		// RFC 8945 §5.2: a TSIG anywhere but last in the additional
		// section is FORMERR; so are two of them, and one that cannot be
		// understood.
		resp = new(mdns.Msg).SetRcode(req, mdns.RcodeFormatError)
		resp.RecursionAvailable = ra
	case req.IsTsig() != nil:
		// RFC 8945 §5.2.2: a server that does not know the key answers
		// NOTAUTH, with an unsigned TSIG saying BADKEY. This one knows
		// none: its answers are the same for everyone, and a signed
		// query answered unsigned, as before, reads to the client as
		// a forgery. A query to forward is no exception: the forwarder
		// could not sign its answer either.
		resp = new(mdns.Msg).SetRcode(req, mdns.RcodeNotAuth)
		resp.RecursionAvailable = ra
		badKey = req.IsTsig()
	case ra && recursable(req, zones):
		network := "tcp"
		if udp {
			network = "udp"
		}
		resp = s.opts.Forwarder.Forward(ctx, req, network)
	default:
		resp, found = answer(req, zones)
		resp.RecursionAvailable = ra
		if udp && len(req.Question) == 1 && req.Question[0].Qtype == mdns.TypeANY {
			// RFC 8482 §4.2: one RRset answers ANY over UDP. The whole
			// set is what a spoofed source would ask for, to amplify;
			// over TCP, where the source is real, it is still given.
			resp.Answer = firstRRset(resp.Answer)
		}
	}
	if udp && s.rrl != nil && !ra { // as s.limits, without asking mayRecurse again
		// Counted on the reply as built, before the OPT and the cut to
		// the query's size: a slipped reply gets its OPT below.
		kind, qtype, name := bucketOf(resp, found)
		switch s.rrl.check(addrOf(w.RemoteAddr()), kind, qtype, name) {
		case drop:
			return
		case truncate:
			resp = slipped(resp)
		}
	}
	if opt != nil && resp.IsEdns0() == nil {
		// RFC 6891 §7: a reply to a request with OPT carries OPT, or the
		// requester reads the server as one without EDNS. The size stated
		// is the one the forwarder asks of upstreams (forward.go). The
		// query's DO bit is copied, though no zone here is signed: RFC
		// 3225 §3 says it MUST be, and EDNS compliance checks look for it.
		resp.SetEdns0(ednsSize, opt.Do())
	}
	// A UDP reply fits what the query offers (RFC 6891 §6.2.5: 512 at
	// least) and never more than the size our OPT states: a spoofed
	// source offering 64 KiB must not buy a reply that large, and one
	// past the path MTU is fragmented (RFC 9715 §3.2). The client asks
	// again over TCP for the rest.
	size := replySize(opt)
	if udp {
		truncateRRsets(resp, size)
	} else {
		// Truncate compresses a UDP reply when it must; over TCP the
		// names are compressed always, as other servers send them: an
		// RRset at one name then carries it once, and a set whose plain
		// form is past the 64 KiB a TCP message holds still goes out.
		resp.Compress = true
	}
	if badKey != nil {
		appendBadKey(resp, req.Question, badKey, udp, size)
	}
	if err := w.WriteMsg(resp); err != nil {
		// A reply that cannot be packed (a record set past 64 KiB) would
		// leave the client waiting: tell it the server failed.
		fail := new(mdns.Msg).SetRcode(req, mdns.RcodeServerFailure)
		if opt != nil {
			fail.SetEdns0(ednsSize, opt.Do())
		}
		_ = w.WriteMsg(fail)
	}
}

// truncateRRsets cuts resp to size as [mdns.Msg.Truncate] does, record by
// record, and then drops what is left of every RRset it cut into. RFC
// 2181 §9 allows either: a partial RRset "may be left" in a reply with
// TC set, which the client "should ignore". Whole sets or none is the
// safer of the two for a client that uses such a reply anyway (a stub, a
// resolver whose TCP is blocked): it would take part of a set for all of
// it, and cache it so. The sets that fit whole stay (a CNAME before the
// set it leads to, say); the client asks again over TCP.
//
// TC is set only when an answer or authority record was cut, or a
// referral's in-domain glue ([inDomainGlue]), as RFC 2181 §9 and RFC 9471
// §3.1 ask; Truncate sets it for any record cut. Additional records
// beyond that (a forwarded reply's addresses of the name servers it
// names) are extra information: the reply goes without the sets that do
// not fit and TC clear, and a client that wants them asks for them.
func truncateRRsets(resp *mdns.Msg, size int) {
	answer, ns, extra := resp.Answer, resp.Ns, resp.Extra
	tc := resp.Truncated // a slipped reply's
	if len(extra) > 1 {
		// Truncate takes the OPT out of Extra and appends it after the
		// records it keeps, in place: over the first one it cut, which
		// the set counts must still read. One record alone is a whole
		// set, cut or not.
		extra = slices.Clone(extra)
	}
	resp.Truncate(size)
	resp.Answer = wholeRRsets(resp.Answer, answer)
	resp.Ns = wholeRRsets(resp.Ns, ns)
	resp.Extra = wholeRRsets(resp.Extra, extra)
	cut := len(resp.Answer) < len(answer) || len(resp.Ns) < len(ns)
	if !cut && len(resp.Extra) < len(extra) {
		cut = inDomainGlue(resp.Rcode, resp.Question, answer, ns, resp.Extra) < inDomainGlue(resp.Rcode, resp.Question, answer, ns, extra)
	}
	resp.Truncated = tc || cut
}

// inDomainGlue counts the address records in extra of the in-domain name
// servers of a referral: a NOERROR reply with NS records in its authority
// section ns for a zone that holds the name it refers for
// ([referredName]), whose servers at or below the delegated name cannot
// be found without those addresses. RFC 9471 §3.1: a referral that
// cannot hold all of them MUST have TC set. 0 for any other reply: an
// NXDOMAIN says the name is not there, which needs no name server's
// address, whatever NS come with it (RFC 2181 §9). An upward referral,
// to the root's servers, counts: every name is in the root's domain.
func inDomainGlue(rcode int, question []mdns.Question, answer, ns, extra []mdns.RR) int {
	if rcode != mdns.RcodeSuccess {
		return 0
	}
	name, ok := referredName(question, answer)
	if !ok {
		return 0
	}
	var servers map[string]bool
	for _, rr := range ns {
		if rr.Header().Rrtype == mdns.TypeSOA {
			return 0 // an NXDOMAIN or NODATA's, which the SOA says
		}
		if n, ok := rr.(*mdns.NS); ok && mdns.IsSubDomain(n.Hdr.Name, name) && mdns.IsSubDomain(n.Hdr.Name, n.Ns) {
			if servers == nil {
				servers = map[string]bool{}
			}
			servers[strings.ToLower(n.Ns)] = true
		}
	}
	count := 0
	for _, rr := range extra {
		if h := rr.Header(); (h.Rrtype == mdns.TypeA || h.Rrtype == mdns.TypeAAAA) && servers[strings.ToLower(h.Name)] {
			count++
		}
	}
	return count
}

// referredName is the name a reply with answer to question would be a
// referral for: the question's name when answer is empty; when it holds
// only CNAMEs (and the DNAMEs they come of, and their RRSIGs), the end of
// their chain, whose records a server that delegated it leaves to the
// delegated zone's (RFC 1034 §4.3.2 step 3b: BIND answers so). ok is
// false when answer answers the question: a record of the type asked at
// a name of the chain (a CNAME or DNAME asked for is one), or ANY.
func referredName(question []mdns.Question, answer []mdns.RR) (name string, ok bool) {
	if len(question) != 1 {
		return "", false
	}
	name = question[0].Name
	if len(answer) == 0 {
		return name, true
	}
	qt := question[0].Qtype
	if qt == mdns.TypeANY {
		return "", false
	}
	targets := make(map[string]string, len(answer))
	var asked []string // the owners of the records of type qt
	for _, rr := range answer {
		if h := rr.Header(); h.Rrtype == qt {
			// A DNAME asked for below another is no answer: that one is
			// applied (RFC 6672 §3.2 step 3c), its CNAME leading on.
			asked = append(asked, h.Name)
			continue
		}
		switch rr := rr.(type) {
		case *mdns.CNAME:
			targets[strings.ToLower(rr.Hdr.Name)] = rr.Target
		case *mdns.DNAME, *mdns.RRSIG:
			// A signed zone's chain, to a query with DO, holds each
			// CNAME's and DNAME's RRSIG (RFC 4035 §3.1.1): no answer.
		default:
			return "", false
		}
	}
	// Each CNAME leads on from the one before; a loop ends in as many
	// steps as there are records.
	for i := 0; ; i++ {
		if slices.ContainsFunc(asked, func(o string) bool { return strings.EqualFold(o, name) }) {
			return "", false
		}
		next, ok := targets[strings.ToLower(name)]
		if !ok || i == len(answer) {
			return name, true
		}
		name = next
	}
}

// wholeRRsets returns kept, what Truncate left of the section all, less
// the records of every RRset it cut some of.
func wholeRRsets(kept, all []mdns.RR) []mdns.RR {
	if len(kept) >= len(all) {
		return kept // nothing cut: the common case costs nothing
	}
	n := rrsetCounts(all)
	for _, rr := range kept {
		n[keyOf(rr)]--
	}
	return slices.DeleteFunc(kept, func(rr mdns.RR) bool { return n[keyOf(rr)] != 0 })
}

// rrsetKey names an RRset: its owner (lowercased: names compare without
// case), class and type.
type rrsetKey struct {
	name         string
	class, rtype uint16
}

func keyOf(rr mdns.RR) rrsetKey {
	h := rr.Header()
	return rrsetKey{strings.ToLower(h.Name), h.Class, h.Rrtype}
}

// rrsetCounts counts the records of each RRset in rrs.
func rrsetCounts(rrs []mdns.RR) map[rrsetKey]int {
	n := make(map[rrsetKey]int, 1)
	for _, rr := range rrs {
		n[keyOf(rr)]++
	}
	return n
}

// replySize is the most a UDP reply to a query with opt (nil: none) may
// hold: what the query offers, 512 at least (RFC 6891 §6.2.5), never
// past the size our OPT states.
func replySize(opt *mdns.OPT) int {
	if opt == nil {
		return mdns.MinMsgSize
	}
	return min(max(int(opt.UDPSize()), mdns.MinMsgSize), ednsSize)
}

// appendBadKey appends to resp, a reply to a query signed with ts whose
// question was question, the unsigned TSIG saying BADKEY (RFC 8945
// §5.2.2). Over UDP the reply then still fits size.
func appendBadKey(resp *mdns.Msg, question []mdns.Question, ts *mdns.TSIG, udp bool, size int) {
	// Last of the additional section, after the OPT, and past the cut
	// (Truncate leaves a message with a TSIG whole). No MAC (RFC 8945
	// §5.3.2); the time is ours, as BIND's is.
	resp.Extra = append(resp.Extra, &mdns.TSIG{
		Hdr:       mdns.RR_Header{Name: ts.Hdr.Name, Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
		Algorithm: ts.Algorithm, TimeSigned: uint64(time.Now().Unix()), Fudge: ts.Fudge,
		OrigId: ts.OrigId, Error: mdns.RcodeBadKey,
	})
	if !udp || resp.Len() <= size {
		return
	}
	// RFC 8945 §5.3: a reply the TSIG would push past the size is
	// altered so that the TSIG is in it, TC set: without it the signing
	// client cannot tell "no such key" from a forgery. Only the OPT (RFC
	// 6891 §7) stays beside it: the question goes too if the TSIG fits
	// only without it (the key's and the question's names, 255 bytes
	// each, pass 512).
	tsig, opt := resp.Extra[len(resp.Extra)-1], resp.IsEdns0()
	resp.Answer, resp.Ns, resp.Extra = nil, nil, nil
	if opt != nil {
		resp.Extra = append(resp.Extra, opt)
	}
	resp.Extra = append(resp.Extra, tsig)
	resp.Truncated = true
	if resp.Len() > size {
		resp.Question = nil
	}
	if resp.Len() > size {
		// With a long algorithm name too (up to 255 bytes, as the key's),
		// the TSIG alone passes 512: it is cut as any record past the
		// size is (RFC 1035 §4.1.1), the question back, and the client
		// asks again over TCP, where the whole reply goes.
		resp.Question = question
		resp.Extra = resp.Extra[:len(resp.Extra)-1]
	}
}

// firstRRset returns the records of rrs that share the first one's owner
// and type.
func firstRRset(rrs []mdns.RR) []mdns.RR {
	if len(rrs) == 0 {
		return rrs
	}
	first := rrs[0].Header()
	out := rrs[:0]
	for _, rr := range rrs {
		if h := rr.Header(); h.Rrtype == first.Rrtype && h.Name == first.Name {
			out = append(out, rr)
		}
	}
	return out
}

// badOPT reports whether req's OPT records break RFC 6891 §6.1.1: more
// than one, one in the answer or authority section, or one whose owner is
// not the root. miekg/dns parses each as it comes and reads only the last
// of the additional section ([mdns.Msg.IsEdns0]), so without this check a
// misplaced OPT would be ignored and a query with one answered as if it
// were well formed.
func badOPT(req *mdns.Msg) bool {
	for _, sec := range [][]mdns.RR{req.Answer, req.Ns} {
		for _, rr := range sec {
			if rr.Header().Rrtype == mdns.TypeOPT {
				return true
			}
		}
	}
	n := 0
	for _, rr := range req.Extra {
		if h := rr.Header(); h.Rrtype == mdns.TypeOPT {
			n++
			if h.Name != "." {
				return true
			}
		}
	}
	return n > 1
}

// badTSIG reports whether req's TSIG records break RFC 8945 §5.2: one
// in the answer or authority section, more than one, one that is not
// the last record of the additional section, or one without RDATA
// ([unreadableTSIG]). [mdns.Msg.IsTsig] looks at the last record alone,
// so without this a misplaced TSIG would be ignored and the query
// answered as if unsigned.
func badTSIG(req *mdns.Msg) bool {
	if ts := req.IsTsig(); ts != nil && unreadableTSIG(ts) {
		return true
	}
	for _, sec := range [][]mdns.RR{req.Answer, req.Ns} {
		for _, rr := range sec {
			if rr.Header().Rrtype == mdns.TypeTSIG {
				return true
			}
		}
	}
	for i, rr := range req.Extra {
		if rr.Header().Rrtype == mdns.TypeTSIG && i != len(req.Extra)-1 {
			return true
		}
	}
	return false
}

// signedBy returns req's TSIG when it is in place and can be read, else
// nil. A reply to such a request carries a TSIG whatever its rcode (RFC
// 8945 §5.2: REQUIRED), the BADKEY one here even when the request is
// refused before its key is looked at (BADVERS, a bad OPT): §5.3 forbids
// signing with a key the server does not know, and a client that gets
// no TSIG back takes the reply for a forgery.
func signedBy(req *mdns.Msg) *mdns.TSIG {
	if badTSIG(req) {
		return nil // FORMERR's own: a TSIG out of place is not read
	}
	return req.IsTsig()
}

// unreadableTSIG reports whether ts, as miekg/dns read it, is one RFC
// 8945 §5.2 cannot understand, FORMERR: one whose RDATA is empty, which
// miekg/dns reads without error as a TSIG of empty fields. Its BADKEY
// reply would carry an algorithm name of no bytes at all, not even the
// root's, and no client could parse it. A name read from the wire is
// never "" otherwise: the root is ".".
func unreadableTSIG(ts *mdns.TSIG) bool { return ts.Algorithm == "" }

// mayRecurse reports whether a query from addr may recurse: recursion is
// on and addr is in an allowed prefix.
func (s *Server) mayRecurse(addr net.Addr) bool {
	if s.opts.Forwarder == nil || len(s.opts.RecursionAllow) == 0 {
		return false
	}
	ip := addrOf(addr)
	for _, p := range s.opts.RecursionAllow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Listen binds UDP and TCP on Addr, so that a port conflict is reported
// before anything else starts. Serve them with [Server.Serve].
func (s *Server) Listen() (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(s.opts.Addr)
	// With port 0 the kernel picks the UDP port, and TCP must get the same
	// one; another process may hold it on TCP, so pick again a few times.
	tries := 1
	if port == "0" {
		tries = 20
	}
	var err error
	for range tries {
		var pc net.PacketConn
		pc, err = net.ListenPacket("udp", s.opts.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns: %w", err)
		}
		var ln net.Listener
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, fmt.Errorf("dns: %w", err)
}

// Serve answers on pc and ln until ctx ends, then shuts both down.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	g, ctx := errgroup.WithContext(ctx)
	// A query being forwarded when Serve stops ends with it.
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, req *mdns.Msg) { s.serve(ctx, w, req) })
	// UDPSize: a query as large as the size our OPT states (ednsSize) is
	// read whole; miekg/dns's default, 512, cut it and answered FORMERR.
	// DecorateReader: screen answers, with the query's OPT, the queries
	// miekg/dns would refuse without it or answer despite trailing bytes.
	udp := newServing(&mdns.Server{PacketConn: pc, Handler: h, ReadTimeout: 2 * time.Second, UDPSize: ednsSize, DecorateReader: s.screen})
	// mdns.Server.WriteTimeout is documented but never applied (miekg/dns
	// v1.1.73), so the connections bound their writes themselves. No cap
	// on queries per connection (CoreDNS sets none either): miekg/dns's
	// default closes after 128 with later pipelined queries unread, and
	// the kernel's reset then drops answers already written. The read,
	// idle and write timeouts and the connection caps bound a connection.
	tcp := newServing(&mdns.Server{Listener: &boundedListener{Listener: ln, timeout: s.writeTimeout, slots: make(chan struct{}, s.maxConns), perSource: s.maxPerSource, log: s.log, closed: make(chan struct{})}, Handler: h, DecorateReader: s.screen, MaxTCPQueries: -1, ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }})
	g.Go(udp.run)
	g.Go(tcp.run)
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(udp.shutdown(sctx), tcp.shutdown(sctx))
	})
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// boundedListener serves at most cap(slots) connections at once, and at
// most perSource of them from one source, closing any past that as soon
// as it is accepted, and gives each it serves a deadline on every write.
// A temporary accept error is waited out, not returned.
type boundedListener struct {
	net.Listener
	timeout   time.Duration
	slots     chan struct{} // one held per connection open
	perSource int
	log       *slog.Logger
	closed    chan struct{} // closed by Close: ends a wait after an accept error
	closeOnce sync.Once

	mu       sync.Mutex
	bySource map[netip.Prefix]int // open connections per source; no zero entries
}

func (l *boundedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *boundedListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !isTemporary(err) {
				return nil, err
			}
			// Out of descriptors (EMFILE, ENFILE: the HTTPS listener
			// shares them) with a connection waiting, accept fails at
			// once, every time. miekg/dns tries again at once on such an
			// error, which holds a core for as long as it lasts: wait
			// first, longer each time, as internal/edge and net/http do.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.log.Warn("dns: tcp accept", "err", err, "retry_in", backoff)
			select {
			case <-l.closed:
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		src, ok := l.takeSource(c.RemoteAddr())
		if !ok {
			c.Close() // over its source's share: as over the total, below
			continue
		}
		select {
		case l.slots <- struct{}{}:
			return &boundedConn{Conn: c, timeout: l.timeout, release: func() { <-l.slots; l.giveSource(src) }}, nil
		default:
			// Refused at once: left in the backlog it would wait for a
			// slot that may not come, and a client told now can retry
			// elsewhere.
			l.giveSource(src)
			c.Close()
		}
	}
}

// isTemporary reports whether err is one miekg/dns's accept loop retries
// at once (it asks net.Error's Temporary, as this does).
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// sourceOf is the prefix a per-source share is counted on: the address,
// or for IPv6 its /64.
func sourceOf(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip, _ := netip.AddrFromSlice(ta.IP)
	ip = ip.Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.Prefix(64)
	return p
}

// takeSource counts a connection from a against its source's share, and
// reports false (counting nothing) when the share is full.
func (l *boundedListener) takeSource(a net.Addr) (netip.Prefix, bool) {
	src := sourceOf(a)
	if l.perSource <= 0 {
		return src, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySource[src] >= l.perSource {
		return src, false
	}
	if l.bySource == nil {
		l.bySource = map[netip.Prefix]int{}
	}
	l.bySource[src]++
	return src, true
}

func (l *boundedListener) giveSource(src netip.Prefix) {
	if l.perSource <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.bySource[src] - 1; n > 0 {
		l.bySource[src] = n
	} else {
		delete(l.bySource, src)
	}
}

// boundedConn is a connection whose writes each end within timeout, and
// that gives its slot back when closed.
type boundedConn struct {
	net.Conn
	timeout time.Duration
	release func()
	once    sync.Once
}

func (c *boundedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *boundedConn) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		// Part of a message may have gone, and with it the framing:
		// nothing more can be said here. Closing also ends the read of
		// the next queued query at once, not after another stall.
		c.Conn.Close()
	}
	return n, err
}

// serving is one mdns.Server with its start and end. ShutdownContext on a
// server that has not started yet is refused ("server not started") and
// leaves it to serve forever once it does, so shutdown waits for the start,
// or for a start that failed.
type serving struct {
	srv     *mdns.Server
	started chan struct{} // closed once srv serves
	done    chan struct{} // closed when ActivateAndServe has returned
}

func newServing(srv *mdns.Server) *serving {
	v := &serving{srv: srv, started: make(chan struct{}), done: make(chan struct{})}
	srv.NotifyStartedFunc = func() { close(v.started) }
	return v
}

func (v *serving) run() error {
	defer close(v.done)
	return v.srv.ActivateAndServe()
}

func (v *serving) shutdown(ctx context.Context) error {
	select {
	case <-v.started:
		return v.srv.ShutdownContext(ctx)
	case <-v.done:
		return nil // it never served, or has stopped already
	}
}

// Run is Listen then Serve.
func (s *Server) Run(ctx context.Context) error {
	pc, ln, err := s.Listen()
	if err != nil {
		return err
	}
	s.log.Info("dns listening", "addr", pc.LocalAddr().String())
	return s.Serve(ctx, pc, ln)
}
