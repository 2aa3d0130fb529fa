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
// panic, and a question that parses gets an answer in the DoH shape with a
// DNS status, REFUSED off-zone, that encodes as JSON.
func FuzzResolveQuestion(f *testing.F) {
	for _, s := range [][2]string{
		{"x.apps.example.com", "A"}, {"apps.example.com.", "soa"}, {"example.org", "TXT"},
		{"*.apps.example.com", "255"}, {"", ""}, {"a..b", "A"}, {"x.apps.example.com", "65535"},
		{strings.Repeat("a.", 130), "AAAA"}, {"x\\.apps.example.com", "CNAME"}, {"é.apps.example.com", "A"},
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
		out := Resolve(q, testZones)
		switch out.Status {
		case mdns.RcodeSuccess, mdns.RcodeNameError, mdns.RcodeRefused, mdns.RcodeNotImplemented, mdns.RcodeFormatError:
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
