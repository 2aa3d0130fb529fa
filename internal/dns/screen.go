package dns

import (
	"encoding/binary"
	"errors"
	"net"
	"time"

	mdns "github.com/miekg/dns"
)

// screen is the mdns.Server's DecorateReader: it sees each message as it
// is read, before miekg/dns decides anything, and answers itself the
// queries miekg/dns would get wrong. It answers FORMERR to one with
// bytes after its last record, of any opcode: miekg/dns parses what the
// counts say and ignores the rest, but such a message is not what its
// header describes (BIND and Knot answer it FORMERR too). And it answers
// the queries miekg/dns refuses from the header alone (an opcode it does
// not serve: NOTIMP; not one question, more records than a query holds:
// FORMERR) with the query's question and, when the query had one, an OPT:
// RFC 6891 §7 asks for OPT in every reply to a query with OPT, and
// miekg/dns sends a bare header. A whole one of those with an EDNS
// version other than 0 gets BADVERS, and one signed NOTAUTH with a
// BADKEY TSIG (its BADVERS, or FORMERR for a bad OPT, that TSIG too),
// as [Server.serve] answers the queries it reads. A
// message screen answers reaches miekg/dns marked as a response, which
// it drops (DefaultMsgAcceptFunc), so nothing answers it twice.
//
// A response (QR set) is never answered, by screen or miekg/dns: a reply
// to a spoofed "response" would reflect it. A message that does not parse
// is left to miekg/dns as before (its OPT cannot be found), but for a UDP
// one from a rate limited source, and a NOTIFY: screen sends miekg/dns's
// reply itself, for the limiter to count it, and with the NOTIFY's
// opcode where miekg/dns says QUERY ([Server.unparsed]). A NOTIFY that
// parses, screen answers NOTIMP as it does a refused opcode, the reply
// [Server.serve] would give it.
func (s *Server) screen(inner mdns.Reader) mdns.Reader {
	return screened{s: s, inner: inner}
}

type screened struct {
	s     *Server
	inner mdns.Reader
}

func (r screened) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	m, err := r.inner.ReadTCP(conn, timeout)
	if err != nil {
		return m, err
	}
	if reply := r.s.reject(m, conn.RemoteAddr()); reply != nil {
		// miekg/dns answers a connection's queries one at a time, so
		// nothing else writes to conn now; one Write keeps the frame whole.
		_, _ = conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...))
		markAnswered(m)
	}
	return m, nil
}

func (r screened) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *mdns.SessionUDP, error) {
	m, sess, err := r.inner.ReadUDP(conn, timeout)
	if err != nil {
		return m, sess, err
	}
	if reply := r.s.reject(m, sess.RemoteAddr()); reply != nil {
		if reply = r.s.limitReject(reply, sess.RemoteAddr()); reply != nil {
			_, _ = mdns.WriteToSessionUDP(conn, reply, sess)
		}
		markAnswered(m)
	}
	return m, sess, nil
}

// ReadPacketConn serves a PacketConn other than *net.UDPConn, which
// Serve accepts too.
func (r screened) ReadPacketConn(conn net.PacketConn, timeout time.Duration) ([]byte, net.Addr, error) {
	pr, ok := r.inner.(mdns.PacketConnReader)
	if !ok {
		return nil, nil, errors.New("dns: the reader cannot read a packet connection")
	}
	m, addr, err := pr.ReadPacketConn(conn, timeout)
	if err != nil {
		return m, addr, err
	}
	if reply := r.s.reject(m, addr); reply != nil {
		// A packet's source can be forged as a UDP one's: limited alike.
		if reply = r.s.limitReject(reply, addr); reply != nil {
			_, _ = conn.WriteTo(reply, addr)
		}
		markAnswered(m)
	}
	return m, addr, nil
}

// markAnswered sets QR in m's header, so that miekg/dns drops it.
func markAnswered(m []byte) { m[2] |= 0x80 }

// reject returns the reply to m when screen answers it, else nil.
func (s *Server) reject(m []byte, from net.Addr) []byte {
	if len(m) < headerLen {
		return nil // miekg/dns drops it
	}
	h := mdns.Header{
		Id:      binary.BigEndian.Uint16(m),
		Bits:    binary.BigEndian.Uint16(m[2:]),
		Qdcount: binary.BigEndian.Uint16(m[4:]),
		Ancount: binary.BigEndian.Uint16(m[6:]),
		Nscount: binary.BigEndian.Uint16(m[8:]),
		Arcount: binary.BigEndian.Uint16(m[10:]),
	}
	action := mdns.DefaultMsgAcceptFunc(h)
	if action == mdns.MsgIgnore {
		return nil
	}
	w, ok := walk(m, h)
	if !ok {
		reply, _ := s.unparsed(m, action, from)
		return reply
	}
	rcode := mdns.RcodeFormatError
	switch {
	case w.end != len(m):
		// Not what its header says, whatever its opcode: FORMERR, read
		// no further, as BIND's parser refuses it before the opcode is
		// looked at. NOTIMP would be unsigned to a signed UPDATE.
	case action == mdns.MsgAccept && int(h.Bits>>11)&0xF == mdns.OpcodeQuery && unpacks(m, h):
		// Nearly every query: miekg/dns unpacks it for the handler, whose
		// answers are limited, and that is its one unpack.
		return nil
	case action == mdns.MsgAccept:
		// Well formed: the handler answers it, if its records parse. But
		// a NOTIFY that parses, which unparsed has read whole to know
		// it, gets here the NOTIMP the handler would give it, as a
		// refused opcode does: handed on, it would be unpacked again,
		// only to be answered the same.
		reply, parsed := s.unparsed(m, action, from)
		if !parsed || int(h.Bits>>11)&0xF == mdns.OpcodeQuery {
			return reply
		}
		rcode = mdns.RcodeNotImplemented
	case action == mdns.MsgRejectNotImplemented:
		rcode = mdns.RcodeNotImplemented
	}
	req := &mdns.Msg{MsgHdr: mdns.MsgHdr{Id: h.Id, Opcode: int(h.Bits>>11) & 0xF,
		RecursionDesired: h.Bits&(1<<8) != 0, CheckingDisabled: h.Bits&(1<<4) != 0}}
	if h.Qdcount == 1 {
		name, off, err := mdns.UnpackDomainName(m, headerLen)
		if err != nil {
			// walk steps over a pointer without following it
			reply, _ := s.unparsed(m, action, from)
			return reply
		}
		req.Question = []mdns.Question{{Name: name, Qtype: binary.BigEndian.Uint16(m[off:]), Qclass: binary.BigEndian.Uint16(m[off+2:])}}
	}
	var opt *mdns.OPT
	badOPT := w.badOPT
	if w.opt >= 0 {
		// as [Server.serve] does: a bad OPT (badOPT) gets no OPT back
		rr, _, err := mdns.UnpackRR(m, w.opt)
		if err == nil && rr.Header().Name == "." {
			opt, _ = rr.(*mdns.OPT)
		}
		badOPT = badOPT || opt == nil
	}
	var badKey *mdns.TSIG
	if w.end == len(m) {
		// What the header refuses is read after the OPT records, the EDNS
		// version and the TSIG, in [Server.serve]'s order: RFC 6891
		// §6.1.1 answers more than one OPT FORMERR, §6.1.3 a version we
		// do not speak BADVERS, and RFC 8945 §5.2 has the TSIG checked
		// before the message is processed, a TSIG in every reply to a
		// signed one. An UPDATE signed with a key we do not know is
		// answered BADKEY as a signed QUERY or NOTIFY is, not NOTIMP: the
		// client would take an unsigned NOTIMP for a forgery. The BADVERS
		// and the FORMERR for a bad OPT carry the BADKEY TSIG too, when
		// the TSIG is in place and can be read ([signedBy]).
		ts, unreadable := tsigAt(m, w.tsig)
		switch {
		case badOPT:
			rcode, badKey = mdns.RcodeFormatError, ts
		case opt != nil && opt.Version() != 0:
			rcode, badKey = mdns.RcodeBadVers, ts
		case w.tsig == tsigMisplaced || unreadable:
			// RFC 8945 §5.2: a TSIG out of place, or one that cannot be
			// read, is FORMERR.
			rcode = mdns.RcodeFormatError
		case ts != nil:
			rcode, badKey = mdns.RcodeNotAuth, ts
		}
	}
	resp := new(mdns.Msg).SetRcode(req, rcode)
	resp.RecursionAvailable = s.mayRecurse(from)
	if opt != nil {
		resp.SetEdns0(ednsSize, opt.Do())
	}
	if badKey != nil {
		_, tcp := from.(*net.TCPAddr)
		appendBadKey(resp, req.Question, badKey, !tcp, replySize(opt))
	}
	b, err := resp.Pack()
	if err != nil {
		return nil
	}
	return b
}

// tsigAt reads the TSIG at off in m, the offset walk found ([walked].tsig):
// nil when there is none there (off < 0), and unreadable when it cannot
// be read ([unreadableTSIG]).
func tsigAt(m []byte, off int) (ts *mdns.TSIG, unreadable bool) {
	if off < 0 {
		return nil, false
	}
	rr, _, err := mdns.UnpackRR(m, off)
	if ts, _ = rr.(*mdns.TSIG); err != nil || ts == nil || unreadableTSIG(ts) {
		return nil, true
	}
	return ts, false
}

// unparsed is the reply to m, a query screen would leave to miekg/dns,
// when m does not parse (a record cut short, an address of three bytes, a
// name pointing past the message): the FORMERR or NOTIMP that miekg/dns
// would send, byte for byte but for the opcode, the request's. That has
// the question when miekg/dns read one: for a query it accepts from its
// header, one the unpack got to; for one it refuses from its header (an
// opcode it does not serve, not one question), none, as it reads no
// further. miekg/dns writes that reply itself, past the handler and so
// past the rate limit: an endless stream of replies to a forged source,
// which the limiter must count with every other error. And its FORMERR
// says QUERY whatever the request's opcode (SetRcodeFormatError), where
// RFC 1035 §4.1.1 has a reply copy it: a NOTIFY, the other opcode it
// reads, gets its FORMERR from here, over TCP too. nil when miekg/dns
// would hand m to the handler (an accepted query that parses), or when
// its reply is right and m came over TCP or from a source that is not
// limited: miekg/dns answers it as before, and a QUERY is not unpacked
// twice there. From a limited UDP source it is, here and again by
// miekg/dns (about 0.7 µs and 5 allocations a query), unless [unpacks]
// vouches for it: only the unpack tells which miekg/dns would answer
// itself, past the limiter.
// parsed says m was unpacked whole, without error (and so reply is nil):
// [Server.reject] answers such a NOTIFY itself.
func (s *Server) unparsed(m []byte, action mdns.MsgAcceptAction, from net.Addr) (reply []byte, parsed bool) {
	// Past DefaultMsgAcceptFunc, the one opcode but QUERY not refused NOTIMP.
	notify := action != mdns.MsgRejectNotImplemented && int(m[2]>>3)&0xF != mdns.OpcodeQuery
	if _, tcp := from.(*net.TCPAddr); !notify && (tcp || !s.limits(from)) {
		return nil, false
	}
	req := new(mdns.Msg)
	if action == mdns.MsgAccept {
		if err := req.Unpack(m); err == nil {
			return nil, true
		}
	} else if err := req.Unpack(m[:headerLen]); err != nil {
		// miekg/dns answers a query it refuses from its header without
		// reading further, whatever follows (nothing, or records that
		// would parse): from the header alone, as here.
		return nil, false
	}
	// As miekg/dns builds it: the query turned into its reply, the
	// question kept if it read one, every record dropped; the opcode
	// the query's.
	opcode := req.Opcode
	req.SetRcodeFormatError(req)
	req.Zero, req.Opcode = false, opcode
	if action == mdns.MsgRejectNotImplemented {
		req.Rcode = mdns.RcodeNotImplemented
	}
	req.Answer, req.Ns, req.Extra = nil, nil, nil
	b, err := req.Pack()
	if err != nil {
		return nil, false
	}
	return b, false
}

// unpacks reports whether miekg/dns (v1.1.73) surely unpacks m, a
// QUERY walk stepped over to its end, without error, so that screen need
// not unpack it to know: one question, whose name has no compression
// pointer and is at most 255 bytes, the root's included (miekg/dns's
// budget); no record but, at most, an OPT at the root whose options are
// each one miekg/dns reads from any bytes: COOKIE, PADDING, NSID, and
// [forwardedOption], an unknown code to it. That is the shape of nearly
// every query (dig, BIND, Unbound, a stub), and it costs no allocation.
// For any other (a pointer, a CLIENT-SUBNET option, whose unpack checks
// its address family, a TSIG) screen unpacks to know. FuzzUnparsedAsMiekg
// checks every message this vouches for against miekg/dns's unpack.
func unpacks(m []byte, h mdns.Header) bool {
	if h.Qdcount != 1 || h.Ancount != 0 || h.Nscount != 0 || h.Arcount > 1 {
		return false
	}
	off, budget := headerLen, 255 // miekg/dns's maxDomainNameWireOctets
	for {
		if off >= len(m) {
			return false
		}
		c := int(m[off])
		if c == 0 {
			break
		}
		if c&0xC0 != 0 {
			return false // a pointer: where it leads is the unpack's to read
		}
		// As miekg/dns counts: the label and its separator, and a name
		// that reaches the whole budget is already too long.
		if budget -= c + 1; budget <= 0 {
			return false
		}
		off += 1 + c
	}
	off += 1 + 4 // the root, type, class
	if h.Arcount == 0 {
		return off == len(m)
	}
	// The OPT: the root, type, class (the size), TTL, RDLENGTH.
	if off+11 > len(m) || m[off] != 0 || binary.BigEndian.Uint16(m[off+1:]) != mdns.TypeOPT {
		return false
	}
	end := off + 11 + int(binary.BigEndian.Uint16(m[off+9:]))
	if end != len(m) {
		return false
	}
	for off += 11; off < end; {
		if off+4 > end {
			return false
		}
		switch binary.BigEndian.Uint16(m[off:]) {
		case mdns.EDNS0COOKIE, mdns.EDNS0PADDING, mdns.EDNS0NSID, forwardedOption:
		default:
			return false
		}
		off += 4 + int(binary.BigEndian.Uint16(m[off+2:]))
	}
	return off == end
}

// headerLen is the size of a DNS message header.
const headerLen = 12

// walked is where a message's parts are: the end of its last record,
// and the offset of its OPT record, -1 when it has none or its OPT
// records break RFC 6891 §6.1.1 (more than one, or one outside the
// additional section).
type walked struct {
	end, opt int
	// tsig is the offset of the TSIG record, the last of the additional
	// section; -1: none; tsigMisplaced: one elsewhere, or more than one,
	// which RFC 8945 §5.2 answers FORMERR (badTSIG).
	tsig int
	// badOPT: the OPT records break RFC 6891 §6.1.1 (more than one, or
	// one outside the additional section); opt is then -1.
	badOPT bool
}

// tsigMisplaced is [walked].tsig for a message whose TSIG is not where
// RFC 8945 §5.2 puts it.
const tsigMisplaced = -2

// walk steps over m's question and records as its header counts them,
// reading no more than their lengths, so a 64 KiB message of thousands
// of records costs microseconds and no allocation. It reports false when
// they do not fit in m.
func walk(m []byte, h mdns.Header) (walked, bool) {
	off := headerLen
	for range h.Qdcount {
		var ok bool
		if off, ok = skipName(m, off); !ok || off+4 > len(m) {
			return walked{}, false
		}
		off += 4 // type, class
	}
	w := walked{opt: -1, tsig: -1}
	opts := 0
	n := int(h.Ancount) + int(h.Nscount) + int(h.Arcount)
	for i := range n {
		start := off
		var ok bool
		if off, ok = skipName(m, off); !ok || off+10 > len(m) {
			return walked{}, false
		}
		switch binary.BigEndian.Uint16(m[off:]) {
		case mdns.TypeTSIG:
			if i == n-1 && i >= int(h.Ancount)+int(h.Nscount) && w.tsig == -1 {
				w.tsig = start
			} else {
				w.tsig = tsigMisplaced
			}
		case mdns.TypeOPT:
			opts++
			if i >= int(h.Ancount)+int(h.Nscount) {
				w.opt = start
			} else {
				opts++ // outside the additional section: bad whatever else
			}
		}
		off += 10 + int(binary.BigEndian.Uint16(m[off+8:])) // type, class, TTL, length, data
		if off > len(m) {
			return walked{}, false
		}
	}
	if opts > 1 {
		w.opt, w.badOPT = -1, true
	}
	w.end = off
	return w, true
}

// skipName returns the offset just past the name at off in m: its
// labels up to the root or a compression pointer, which ends a name.
// The pointer is not followed: where it points is the parser's concern.
func skipName(m []byte, off int) (int, bool) {
	// A name is at most 255 bytes, so at most 128 labels with the root.
	for range 128 {
		if off >= len(m) {
			return 0, false
		}
		c := int(m[off])
		switch c & 0xC0 {
		case 0x00:
			if c == 0 {
				return off + 1, true
			}
			off += 1 + c
		case 0xC0:
			if off+2 > len(m) {
				return 0, false
			}
			return off + 2, true
		default:
			return 0, false // the extended label types of RFC 6891 §5 are retired
		}
	}
	return 0, false
}
