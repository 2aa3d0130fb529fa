// Package dns is gatehouse's authoritative DNS server (DESIGN §8) for the
// zones in the store: SOA and NS at each apex, the wildcard *.{zone}
// answering the zone's gateway addresses, and the zone's explicit A, AAAA,
// CNAME and TXT records, where a record set named *.{name} answers every
// name under {name} that has none of its own. A name with an A or AAAA
// record of its own gets no gateway address of either type. A CNAME to a
// name in the same zone is followed, its target's records added. Answers
// keep the question's case, a reply to a query with EDNS(0) carries OPT,
// a query with another EDNS version gets BADVERS, and one whose OPT is
// not one record at the root in the additional section FORMERR. A query
// with bytes after its last record gets FORMERR; one with no or several
// questions, or more records than a query holds, FORMERR, and one with an
// opcode other than QUERY NOTIMP, each with the question and, for a query
// with EDNS(0), OPT. A response (QR set) is never answered. A reply too large
// to pack is SERVFAIL. A UDP reply is at most the size the query's OPT
// offers (512 without one) and never past 1232 bytes, the size our OPT
// states: what does not fit is cut, whole RRsets at a time (no part of
// one is sent, which RFC 2181 §9 allows), and TC set when an answer or
// authority record is among it, or a referral's in-domain glue (RFC 9471
// §3.1; after a CNAME into the delegated zone too), not when it is only
// additional records (RFC 2181 §9). An ANY
// question over UDP gets one RRset (RFC 8482), over TCP all of them. A
// name outside every zone gets REFUSED: the gateway is not an open
// resolver. A zone transfer (AXFR, IXFR) gets REFUSED too, and a
// question for a meta-type (OPT, TSIG, TKEY, the rest of 128-254 but
// ANY) or the reserved type 0 FORMERR, for every name: the resolve API
// refuses the same types ([ParseQuestion]). The server knows no TSIG
// key: a signed message of any opcode gets NOTAUTH with an unsigned
// TSIG saying BADKEY (RFC 8945 §5.2.2), the key checked before the
// opcode, the question count and the record counts are, after the OPT
// records and the EDNS version, whose BADVERS or FORMERR to a signed
// query carries that TSIG too; over UDP, when the reply with it passes
// the size, TC is set and the question cut so that the TSIG fits
// (§5.3), the TSIG itself only when it alone passes. A query whose TSIG
// is not the last record, or has no RDATA, gets FORMERR.
//
// Recursion is the operator's opt-in, for the platform only: with a
// [Forwarder], a query with RD set from a source network in
// Options.RecursionAllow for a name outside every zone is forwarded to the
// upstreams and their answer relayed with RA set (SERVFAIL when none
// answers); the query's AD, CD and DO bits go upstream with it, and the
// upstream's AD comes back to a query that set AD or DO (RFC 6840
// §5.7-5.8). Names in a zone are always answered here, never forwarded, as
// are the zone transfers and meta-types above; and a query another
// gatehouse forwarded (it carries an EDNS mark) is never forwarded again,
// so upstreams that lead back to a gatehouse cannot loop.
// The HTTP resolve API offers the same through [ResolveRecursive] to the
// platform's credential.
//
// UDP replies are rate limited (Options.RateLimit; BIND's and Knot's RRL),
// for a forged source must not turn the server into an amplifier: past
// the limit a second, the same reply to one source network (IPv4 /24,
// IPv6 /56) is dropped, but one in every Options.RateLimitSlip sent
// truncated (TC set, the question and OPT kept) for a real resolver to
// ask again over TCP. An answer counts by its name and the type of its
// records (a CNAME's, whatever type was asked), or by the wildcard that
// gave it, NODATA by its zone, and every error as one. TCP, whose
// source is proven, and the sources that may recurse are never limited.
//
// The zones come from a snapshot function the caller supplies, so the
// server reads whatever table is current without importing the store. A
// zone's SOA serial is the caller's [Zone.Serial]: gatehouse derives it
// from the store's revisions of the zone and its records, so it moves
// forward with every change and is the same on every gateway.
package dns
