package dns

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	mdns "github.com/miekg/dns"
)

// DoH is one answer in the DNS-over-HTTPS JSON shape (DESIGN §8), as the
// HTTP resolve API returns it. Status is the DNS rcode: 0 NOERROR, 2
// SERVFAIL when no upstream answered a forwarded query, 3 NXDOMAIN from an
// upstream, 5 REFUSED for a name outside every zone when recursion is not
// offered. RA says whether it was.
type DoH struct {
	Status   int           `json:"Status"`
	TC       bool          `json:"TC"`
	RD       bool          `json:"RD"`
	RA       bool          `json:"RA"`
	AD       bool          `json:"AD"`
	CD       bool          `json:"CD"`
	Question []DoHQuestion `json:"Question"`
	Answer   []DoHAnswer   `json:"Answer,omitempty"`
}

// DoHQuestion is the question of a [DoH] answer.
type DoHQuestion struct {
	Name string `json:"name"`
	Type uint16 `json:"type"`
	// CheckingDisabled is the query's CD bit (a DoH JSON client's cd=1):
	// echoed in the answer's CD, and sent upstream by a forward, so that
	// a validating upstream answers a name with broken DNSSEC, as the DNS
	// listener does for a query with CD set. Not part of the question's
	// JSON.
	CheckingDisabled bool `json:"-"`
}

// DoHAnswer is one resource record of a [DoH] answer; Data is the
// record's data in presentation form (an address, a name, a quoted TXT).
type DoHAnswer struct {
	Name string `json:"name"`
	Type uint16 `json:"type"`
	TTL  uint32 `json:"TTL"`
	Data string `json:"data"`
}

// ParseQuestion checks a resolve query: name must be a DNS name of at most
// 253 characters; typ is a type mnemonic (A, aaaa, TXT…) or number, and
// empty means A; a meta-type or query-only type other than ANY is refused.
// The error names what is wrong.
func ParseQuestion(name, typ string) (DoHQuestion, error) {
	n := strings.TrimSuffix(name, ".")
	if n == "" {
		return DoHQuestion{}, fmt.Errorf("dns: name is required")
	}
	// A dot still at the end ("a.example..", "..") closes an empty
	// label, which IsDomainName would take as the final dot.
	if _, ok := mdns.IsDomainName(n); !ok || len(n) > 253 || strings.HasSuffix(n, ".") || strings.ContainsAny(n, " \t\r\n\\") {
		return DoHQuestion{}, fmt.Errorf("dns: name %q is not a DNS name", name)
	}
	q := DoHQuestion{Name: mdns.Fqdn(n), Type: mdns.TypeA}
	if typ == "" {
		return q, nil
	}
	if t, ok := mdns.StringToType[strings.ToUpper(typ)]; ok {
		q.Type = t
	} else if t, err := strconv.ParseUint(typ, 10, 16); err == nil {
		q.Type = uint16(t)
	} else {
		return DoHQuestion{}, fmt.Errorf("dns: type %q is not a DNS type (A, AAAA, CNAME, TXT, SOA, NS… or a number)", typ)
	}
	if metaType(q.Type) {
		return DoHQuestion{}, fmt.Errorf("dns: type %q is %s (%d), a meta-type or query-only type that cannot be resolved; of those only ANY (255) is answered", typ, mdns.Type(q.Type), q.Type)
	}
	return q, nil
}

// Resolve answers q from zones, exactly as the DNS listener answers a
// source that may not recurse: the same authoritative answer, REFUSED
// off-zone, RA false.
func Resolve(q DoHQuestion, zones []Zone) DoH {
	return ResolveRecursive(context.Background(), q, zones, nil)
}

// ResolveRecursive answers q as the DNS listener answers a source that
// may recurse through f: a name in a zone authoritatively, any other from
// f's upstreams (SERVFAIL, Status 2, when none answers), RA true either
// way. ctx bounds the forward. A nil f offers no recursion: [Resolve].
func ResolveRecursive(ctx context.Context, q DoHQuestion, zones []Zone, f *Forwarder) DoH {
	req := new(mdns.Msg)
	req.SetQuestion(q.Name, q.Type)
	req.CheckingDisabled = q.CheckingDisabled
	// The answer's JSON always carries AD, which its client reads: ask
	// for it (RFC 6840 §5.7), as a DNS client that understands it does.
	req.AuthenticatedData = true
	var resp *mdns.Msg
	switch {
	case f != nil && recursable(req, zones):
		resp = f.Forward(ctx, req, "tcp") // TCP: an HTTP answer has no size limit
	default:
		resp = Answer(req, zones)
		resp.RecursionAvailable = f != nil
	}
	return toDoH(q, req, resp)
}

func toDoH(q DoHQuestion, req, resp *mdns.Msg) DoH {
	out := DoH{
		Status:   resp.Rcode,
		TC:       resp.Truncated,
		RD:       req.RecursionDesired,
		RA:       resp.RecursionAvailable,
		AD:       resp.AuthenticatedData,
		CD:       req.CheckingDisabled,
		Question: []DoHQuestion{q},
	}
	for _, rr := range resp.Answer {
		h := rr.Header()
		out.Answer = append(out.Answer, DoHAnswer{
			Name: h.Name, Type: h.Rrtype, TTL: h.Ttl,
			Data: strings.TrimPrefix(rr.String(), h.String()),
		})
	}
	return out
}
