package dns

import (
	"encoding/json"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// FuzzResolveQuestion feeds the HTTP resolve API's inputs (the name and
// type of /api/v3/dns/resolve, each query of a batch) through
// ParseQuestion and Resolve: a bad name or type is an error, never a
// panic, a type the DNS listener refuses is refused here too, and a
// question that parses gets an answer in the DoH shape, NOERROR or
// REFUSED off-zone, that encodes as JSON.
func FuzzResolveQuestion(f *testing.F) {
	for _, s := range [][2]string{
		{"x.apps.example.com", "A"}, {"apps.example.com.", "soa"}, {"example.org", "TXT"},
		{"*.apps.example.com", "255"}, {"", ""}, {"a..b", "A"}, {"x.apps.example.com", "65535"},
		{strings.Repeat("a.", 130), "AAAA"}, {"x\\.apps.example.com", "CNAME"}, {"é.apps.example.com", "A"},
		{"apps.example.com", "AXFR"}, {"apps.example.com", "251"}, {"x.apps.example.com", "OPT"},
		{"x.apps.example.com", "tsig"}, {"example.org", "249"}, {"x.apps.example.com", "128"},
		{"x.apps.example.com", "127"}, {"x.apps.example.com", "MAILA"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, typ string) {
		q, err := ParseQuestion(name, typ)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if !strings.HasSuffix(q.Name, ".") || len(q.Name) > 254 {
			t.Fatalf("ParseQuestion(%q) = name %q", name, q.Name)
		}
		in := new(mdns.Msg)
		in.SetQuestion("x.apps.example.com.", q.Type)
		if r := Answer(in, testZones); r.Rcode != mdns.RcodeSuccess {
			t.Fatalf("ParseQuestion(%q) = type %d, which the DNS listener answers %s in a zone", typ, q.Type, mdns.RcodeToString[r.Rcode])
		}
		out := Resolve(q, testZones)
		switch out.Status {
		case mdns.RcodeSuccess, mdns.RcodeRefused:
		default:
			t.Fatalf("Resolve(%+v) status %d", q, out.Status)
		}
		if len(out.Question) != 1 || out.Question[0] != q {
			t.Fatalf("Resolve(%+v) question %+v", q, out.Question)
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("answer does not encode: %v", err)
		}
	})
}
