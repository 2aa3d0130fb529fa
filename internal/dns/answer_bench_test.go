package dns

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"
)

// BenchmarkAnswer answers an A question against a zone of 10,000 record
// sets, for a one-label name and for the deepest a query can carry, with
// the zone scanned and indexed: unindexed, a deep name scans every record
// once per label (see [Zone.Index]).
func BenchmarkAnswer(b *testing.B) {
	z := Zone{Name: "apps.example.com", Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	for i := range 10000 {
		z.Records = append(z.Records, Record{Name: fmt.Sprintf("r%d.apps.example.com", i), Type: "A", Values: []string{"192.0.2.1"}})
	}
	deep := strings.Repeat("a.", 115) + "apps.example.com."
	for _, idx := range []bool{false, true} {
		zones := []Zone{z}
		if idx {
			zones = indexed(zones)
		}
		for _, name := range []string{"zz.apps.example.com.", deep} {
			b.Run(fmt.Sprintf("indexed=%v/labels=%d", idx, mdns.CountLabel(name)), func(b *testing.B) {
				m := new(mdns.Msg)
				m.SetQuestion(name, mdns.TypeA)
				b.ReportAllocs()
				for b.Loop() {
					if r := Answer(m, zones); len(r.Answer) != 1 {
						b.Fatalf("answer %v", r.Answer)
					}
				}
			})
		}
	}
}
