package dns

import (
	"net/netip"
	"slices"
	"strings"

	mdns "github.com/miekg/dns"
)

// Zone is one zone as the server answers it.
type Zone struct {
	Name     string       // "apps.example.com", no trailing dot
	Gateways []netip.Addr // what the apex and *.{zone} resolve to
	TTL      uint32       // 0 = 60
	// Serial is the SOA serial, served as it is. Secondaries, caches and
	// monitors read a change of content from it (RFC 1982 arithmetic), so
	// the caller moves it forward whenever Gateways, TTL or Records change.
	Serial  uint32
	Records []Record

	// byName and wild index Records by lowercased name, and wildcard
	// record sets (*.{parent}) by parent; see [Zone.Index].
	byName, wild map[string][]Record
}

// Index makes every record lookup in z one map read, however many records
// it holds. Without it each lookup scans Records, and a question scans
// them once per label of its name, for the wildcard: a 120-label name
// against a zone of 10,000 records cost ~18 ms of CPU, so a few dozen
// spoofed UDP queries a second could hold a core. A server's zone source
// calls it once per snapshot; a zone without it (a test's, a handful of
// records) is scanned. Index it before sharing it: Answer only reads it.
func (z *Zone) Index() {
	z.byName = make(map[string][]Record, len(z.Records))
	z.wild = make(map[string][]Record)
	for _, r := range z.Records {
		n := recordName(r, z)
		z.byName[n] = append(z.byName[n], r)
		if parent, ok := strings.CutPrefix(n, "*."); ok {
			z.wild[parent] = append(z.wild[parent], r)
		}
	}
}

// Record is an explicit record set. Name is a full name under the zone (no
// trailing dot), or "@" for the apex.
type Record struct {
	Name   string
	Type   string // A, AAAA, CNAME or TXT
	TTL    uint32 // 0 = the zone's TTL
	Values []string
}

// Answer builds the authoritative reply to req from zones. It never returns
// nil and never panics on a parsed message, whatever it holds.
func Answer(req *mdns.Msg, zones []Zone) *mdns.Msg {
	resp, _ := answer(req, zones)
	return resp
}

// asked is what [answer] found of the question's name: what the rate
// limit counts the reply by ([bucketOf]), which the server so need not
// look up again. The zero value: no name in a zone was looked up.
type asked struct {
	zone *Zone  // the name's zone
	name string // the name, lowercased, without the trailing dot
	own  bool   // the name is the zone's apex or has records of its own
	// wildcard is the parent of the explicit wildcard (*.{wildcard})
	// that covers a name without records of its own; "": none, the
	// gateways' *.{zone} does.
	wildcard string
}

// answer is [Answer], with what it found of the question's name.
func answer(req *mdns.Msg, zones []Zone) (*mdns.Msg, asked) {
	resp := new(mdns.Msg)
	if req.Opcode != mdns.OpcodeQuery {
		return resp.SetRcode(req, mdns.RcodeNotImplemented), asked{}
	}
	if len(req.Question) != 1 || req.Response {
		return resp.SetRcodeFormatError(req), asked{}
	}
	resp.SetReply(req)
	q := req.Question[0]
	if metaType(q.Qtype) {
		resp.Rcode = metaRcode(q.Qtype)
		return resp, asked{}
	}
	resp.RecursionAvailable = false
	if q.Qclass != mdns.ClassINET && q.Qclass != mdns.ClassANY {
		resp.Rcode = mdns.RcodeRefused
		return resp, asked{}
	}
	resp.Authoritative = true
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	z := findZone(name, zones)
	if z == nil {
		resp.Authoritative = false
		resp.Rcode = mdns.RcodeRefused
		return resp, asked{}
	}
	a := asked{zone: z, name: name}
	ttl := z.TTL
	if ttl == 0 {
		ttl = 60
	}
	// Answers are owned by the name as asked, in its case (RFC 4343 §4.1:
	// resolvers that randomise a question's case compare it).
	owner := mdns.Fqdn(q.Name)
	// A CNAME to a name in this zone is followed, the target's records
	// added after it (RFC 1034 §4.3.2 step 3a), as BIND, Knot and CoreDNS
	// do: a stub that asks this server directly gets the address, and a
	// resolver saves a round trip. A target in another zone, a loop or a
	// chain past maxChain ends it; ANY and CNAME are answered by the
	// CNAME itself.
	var seen []string
	for {
		n := len(resp.Answer)
		target, wildcard, own := appendName(resp, z, name, owner, q.Qtype, ttl)
		if len(seen) == 0 {
			a.own, a.wildcard = own, wildcard
		}
		if target == "" {
			if len(resp.Answer) == n {
				// NODATA: the name exists (the wildcard covers every
				// name), the type does not; the SOA tells resolvers how
				// long to cache that (RFC 2308 §2.2, after a chain too).
				resp.Ns = append(resp.Ns, soa(z, ttl))
			}
			return resp, a
		}
		seen = append(seen, name)
		next := strings.ToLower(strings.TrimSuffix(target, "."))
		if q.Qtype == mdns.TypeCNAME || q.Qtype == mdns.TypeANY || len(seen) >= maxChain ||
			findZone(next, zones) != z || slices.Contains(seen, next) {
			return resp, a
		}
		name, owner = next, target
	}
}

// NSLabel is the first label of the name server name every zone's NS and
// SOA name, {NSLabel}.{zone}, answered as any other name of the zone (the
// gateways, unless it has addresses of its own). It is never an alias
// (RFC 2181 §10.3): the control API refuses a CNAME at it, and a CNAME at
// *.{zone} does not cover it ([Answer] answers the gateways there).
const NSLabel = "ns"

// maxChain is the most CNAMEs [Answer] follows in one reply (CoreDNS's
// file plugin stops at 8 too).
const maxChain = 8

// appendName appends to resp the records of type qtype at name in z,
// owned by owner (name in the question's case), and returns the target
// of name's CNAME, if it has one: then that CNAME is all it appends. It
// also says where name's records came from: own, when name is the apex
// or has records of its own; else from *.{wildcard}, when an explicit
// wildcard covers it, or from the gateways' *.{zone}.
func appendName(resp *mdns.Msg, z *Zone, name, owner string, qtype uint16, ttl uint32) (cname, wildcard string, own bool) {
	hdr := func(t uint16, ttl uint32) mdns.RR_Header {
		return mdns.RR_Header{Name: owner, Rrtype: t, Class: mdns.ClassINET, Ttl: ttl}
	}
	apex := name == z.Name
	if apex && (qtype == mdns.TypeSOA || qtype == mdns.TypeANY) {
		rr := soa(z, ttl)
		rr.Header().Name = owner
		resp.Answer = append(resp.Answer, rr)
	}
	if apex && (qtype == mdns.TypeNS || qtype == mdns.TypeANY) {
		resp.Answer = append(resp.Answer, &mdns.NS{Hdr: hdr(mdns.TypeNS, ttl), Ns: NSLabel + "." + z.Name + "."})
	}
	explicit := recordsFor(name, z)
	own = apex || len(explicit) > 0
	if !own {
		explicit, wildcard = wildcardOf(name, z)
		if isNSName(name, z) && slices.ContainsFunc(explicit, isCNAME) {
			// ns.{zone} names the zone's name server, which must not be
			// an alias (RFC 2181 §10.3: resolvers such as BIND skip it);
			// the control API refuses a CNAME at it, and one at *.{zone}
			// must not make it one either. A CNAME set is alone at its
			// name, so nothing else of the wildcard's is lost: the
			// gateways answer, as they would with no wildcard.
			explicit = nil
		}
	}
	// A CNAME owns its name alone (RFC 1034 §3.6.2): it answers every type.
	for _, r := range explicit {
		if isCNAME(r) {
			target := mdns.Fqdn(r.Values[0])
			resp.Answer = append(resp.Answer, &mdns.CNAME{Hdr: hdr(mdns.TypeCNAME, rttl(r, ttl)), Target: target})
			return target, wildcard, own
		}
	}
	var haveA, haveAAAA bool
	for _, r := range explicit {
		for _, v := range r.Values {
			switch strings.ToUpper(r.Type) {
			case "A":
				haveA = true
				if a, err := netip.ParseAddr(v); err == nil && a.Is4() && wants(qtype, mdns.TypeA) {
					resp.Answer = append(resp.Answer, &mdns.A{Hdr: hdr(mdns.TypeA, rttl(r, ttl)), A: a.AsSlice()})
				}
			case "AAAA":
				haveAAAA = true
				if a, err := netip.ParseAddr(v); err == nil && a.Is6() && wants(qtype, mdns.TypeAAAA) {
					resp.Answer = append(resp.Answer, &mdns.AAAA{Hdr: hdr(mdns.TypeAAAA, rttl(r, ttl)), AAAA: a.AsSlice()})
				}
			case "TXT":
				if wants(qtype, mdns.TypeTXT) {
					resp.Answer = append(resp.Answer, &mdns.TXT{Hdr: hdr(mdns.TypeTXT, rttl(r, ttl)), Txt: splitTXT(v)})
				}
			}
		}
	}
	// The apex and the wildcard *.{zone} answer the gateways, unless the
	// name has an address record of its own, of either type: a name that
	// has records is not covered by the wildcard (RFC 4592 §2.2.1), and an
	// operator who points mail.{zone} elsewhere with an A record alone
	// does not want dual-stack clients sent to the gateways by AAAA.
	ownAddr := haveA || haveAAAA
	for _, g := range z.Gateways {
		g = g.Unmap() // ::ffff:192.0.2.3 is an IPv4 gateway, answered as A
		if g.Is4() && !ownAddr && wants(qtype, mdns.TypeA) {
			resp.Answer = append(resp.Answer, &mdns.A{Hdr: hdr(mdns.TypeA, ttl), A: g.AsSlice()})
		}
		if g.Is6() && !ownAddr && wants(qtype, mdns.TypeAAAA) {
			resp.Answer = append(resp.Answer, &mdns.AAAA{Hdr: hdr(mdns.TypeAAAA, ttl), AAAA: g.AsSlice()})
		}
	}
	return "", wildcard, own
}

func isCNAME(r Record) bool { return strings.EqualFold(r.Type, "CNAME") && len(r.Values) > 0 }

// isNSName reports whether name (lowercased) is {NSLabel}.{zone}.
func isNSName(name string, z *Zone) bool {
	rest, ok := strings.CutPrefix(name, NSLabel+".")
	return ok && rest == z.Name
}

// metaType reports whether t is 0, OPT or in the range RFC 6895 §3.1
// keeps for meta-types and QTYPEs (TKEY, TSIG, IXFR, AXFR, MAILB, MAILA…):
// no record of such a type exists to be looked up. Type 0 is reserved and
// never allocated (RFC 6895 §3.1: it marks SIG(0)), so it is one of them. It is the one list of
// the types gatehouse will not look up: [Answer] answers them
// [metaRcode], the forwarder never relays them, and the resolve API
// refuses them ([ParseQuestion]). ANY is the exception: it is answered
// with every record at the name, over UDP and TCP and by the resolve API.
func metaType(t uint16) bool {
	return t == mdns.TypeNone || t == mdns.TypeOPT || (t >= 128 && t <= 255 && t != mdns.TypeANY)
}

// metaRcode is the answer to a question for a [metaType].
//
// AXFR and IXFR get REFUSED: a zone transfer is a real request this server
// declines for everyone, the case RFC 1035 §4.1.1 gives for REFUSED ("may
// not wish to perform a particular operation (e.g., zone transfer)"), and
// RFC 5936 §5 leaves who may transfer to the server's policy. An empty
// NOERROR would read as a transfer of nothing.
//
// Every other one gets FORMERR, type 0 included. OPT, TSIG and TKEY are meta-types (RFC
// 6895 §3.1): records of one message's transaction, never held at a name
// (RFC 6891 §6.1.1: OPT "MUST NOT be cached, forwarded, or stored"), so a
// question asking for one is not a question the server can interpret,
// RFC 1035 §4.1.1's FORMERR. NOTIMP ("does not support the requested kind
// of query") is kept for an opcode the server does not do, so the two
// stay apart; BIND answers these types FORMERR too. MAILA, MAILB and the
// rest of 128-248 get the same: one rcode for every type [metaType] lists
// but a transfer.
func metaRcode(t uint16) int {
	if t == mdns.TypeAXFR || t == mdns.TypeIXFR {
		return mdns.RcodeRefused
	}
	return mdns.RcodeFormatError
}

func wants(q, t uint16) bool { return q == t || q == mdns.TypeANY }

func rttl(r Record, def uint32) uint32 {
	if r.TTL != 0 {
		return r.TTL
	}
	return def
}

// findZone returns the most specific zone that name is in, or nil.
func findZone(name string, zones []Zone) *Zone {
	var best *Zone
	for i := range zones {
		z := &zones[i]
		if inZone(name, z.Name) {
			if best == nil || len(z.Name) > len(best.Name) {
				best = z
			}
		}
	}
	return best
}

// inZone reports whether name, in presentation form, is zone or a name
// under it. The dot before zone must end a label: in a\.apps.example.com
// (first label "a.apps", a name in example.com) it is escaped, and the
// name is not in apps.example.com.
func inZone(name, zone string) bool {
	if name == zone {
		return true
	}
	i := len(name) - len(zone) - 1
	return i > 0 && name[i] == '.' && name[i+1:] == zone && !escaped(name, i)
}

// escaped reports whether s[i] follows an odd run of backslashes, and so
// is part of a label rather than syntax.
func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// recordName is r's full name in z, lowercased, without the trailing dot.
func recordName(r Record, z *Zone) string {
	rn := strings.ToLower(strings.TrimSuffix(r.Name, "."))
	if rn == "@" || rn == "" {
		rn = z.Name
	}
	return rn
}

func recordsFor(name string, z *Zone) []Record {
	if z.byName != nil {
		return z.byName[name]
	}
	var out []Record
	for _, r := range z.Records {
		if recordName(r, z) == name {
			out = append(out, r)
		}
	}
	return out
}

// wildcardOf returns the record sets of the nearest *.{ancestor} of name
// in z (the API accepts such names), for a name with none of its own,
// and that wildcard's parent: its name without the leading "*.", "" when
// there is none. The zone's gateways stay the wildcard of last resort:
// unlike RFC 4592, a name that only exists as the parent of other
// records (shop, beside _gatehouse-challenge.shop) is still covered, as
// the gateways cover it.
func wildcardOf(name string, z *Zone) ([]Record, string) {
	for n := name; n != z.Name; {
		i, end := mdns.NextLabel(n, 0) // an escaped dot is inside a label
		if end {
			return nil, ""
		}
		parent := n[i:]
		recs := z.wild[parent]
		if z.wild == nil {
			recs = recordsFor("*."+parent, z)
		}
		if len(recs) > 0 {
			return recs, parent
		}
		n = parent
	}
	return nil, ""
}

func soa(z *Zone, ttl uint32) mdns.RR {
	return &mdns.SOA{
		Hdr:     mdns.RR_Header{Name: mdns.Fqdn(z.Name), Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: ttl},
		Ns:      NSLabel + "." + z.Name + ".",
		Mbox:    "hostmaster." + z.Name + ".",
		Serial:  z.Serial,
		Refresh: 3600, Retry: 600, Expire: 86400, Minttl: ttl,
	}
}

// splitTXT cuts a value into the 255-byte strings a TXT record holds.
// miekg/dns packs TXT strings in presentation form, reading a backslash as an
// escape, so each is escaped after the cut: the value goes out byte for
// byte.
func splitTXT(v string) []string {
	var out []string
	for len(v) > 255 {
		out = append(out, escapeTXT(v[:255]))
		v = v[255:]
	}
	return append(out, escapeTXT(v))
}

func escapeTXT(s string) string { return strings.ReplaceAll(s, `\`, `\\`) }
