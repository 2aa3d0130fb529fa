package dns

import (
	"fmt"
	"strconv"
	"strings"

	mdns "github.com/miekg/dns"
)

// DoH is one answer in the DNS-over-HTTPS JSON shape (DESIGN §8), as the
// HTTP resolve API returns it. Status is the DNS rcode: 0 NOERROR, 5
// REFUSED for a name outside every zone.
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
// empty means A. The error names what is wrong.
func ParseQuestion(name, typ string) (DoHQuestion, error) {
	n := strings.TrimSuffix(name, ".")
	if n == "" {
		return DoHQuestion{}, fmt.Errorf("dns: name is required")
	}
	if _, ok := mdns.IsDomainName(n); !ok || len(n) > 253 || strings.ContainsAny(n, " \t\r\n\\") {
		return DoHQuestion{}, fmt.Errorf("dns: name %q is not a DNS name", name)
	}
	q := DoHQuestion{Name: mdns.Fqdn(n), Type: mdns.TypeA}
	if typ == "" {
		return q, nil
	}
	if t, ok := mdns.StringToType[strings.ToUpper(typ)]; ok {
		q.Type = t
		return q, nil
	}
	if t, err := strconv.ParseUint(typ, 10, 16); err == nil && t > 0 {
		q.Type = uint16(t)
		return q, nil
	}
	return DoHQuestion{}, fmt.Errorf("dns: type %q is not a DNS type (A, AAAA, CNAME, TXT, SOA, NS… or a number)", typ)
}

// Resolve answers q from zones, exactly as the DNS listener would: the
// same authoritative answer, REFUSED off-zone, and no recursion.
func Resolve(q DoHQuestion, zones []Zone) DoH {
	req := new(mdns.Msg)
	req.SetQuestion(q.Name, q.Type)
	resp := Answer(req, zones)
	out := DoH{
		Status:   resp.Rcode,
		TC:       resp.Truncated,
		RD:       req.RecursionDesired,
		RA:       resp.RecursionAvailable,
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
