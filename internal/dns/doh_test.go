package dns

import (
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// TestParseQuestionTypes: a question may ask for any data type, and for
// ANY, which the DNS listener answers over UDP and TCP with every record
// it holds at the name; the resolve API answers it the same. Meta-types
// and the other query-only types (OPT, and 128-254: TKEY, TSIG, IXFR,
// AXFR, MAILB, MAILA and the unassigned rest) are no question a resolver
// answers, so they are refused, by mnemonic or number, naming the type.
func TestParseQuestionTypes(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		want uint16 // 0: refused
		msg  string // in the error
	}{
		{"", mdns.TypeA, ""},
		{"aaaa", mdns.TypeAAAA, ""},
		{"TXT", mdns.TypeTXT, ""},
		{"ANY", mdns.TypeANY, ""},
		{"255", mdns.TypeANY, ""},
		{"127", 127, ""},
		{"256", 256, ""},
		{"65535", 65535, ""},
		{"OPT", 0, `"OPT" is OPT (41)`},
		{"41", 0, `"41" is OPT (41)`},
		{"TSIG", 0, `"TSIG" is TSIG (250)`},
		{"250", 0, `"250" is TSIG (250)`},
		{"tkey", 0, `"tkey" is TKEY (249)`},
		{"AXFR", 0, `"AXFR" is AXFR (252)`},
		{"252", 0, `"252" is AXFR (252)`},
		{"IXFR", 0, `"IXFR" is IXFR (251)`},
		{"MAILA", 0, `"MAILA" is MAILA (254)`},
		{"MAILB", 0, `"MAILB" is MAILB (253)`},
		{"NXNAME", 0, `"NXNAME" is NXNAME (128)`},
		{"128", 0, `"128" is NXNAME (128)`},
		{"200", 0, `"200" is TYPE200 (200)`},
		{"254", 0, `"254" is MAILA (254)`},
		{"0", 0, `"0" is None (0)`},
	} {
		q, err := ParseQuestion("x.apps.example.com", tc.typ)
		switch {
		case tc.want != 0 && (err != nil || q.Type != tc.want):
			t.Errorf("type %q: %+v, %v; want type %d", tc.typ, q, err, tc.want)
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "meta")):
			t.Errorf("type %q: %+v, %v; want an error with %s", tc.typ, q, err, tc.msg)
		}
	}
}
