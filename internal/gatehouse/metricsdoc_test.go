package gatehouse

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsDocumented: every metric a running gateway registers for
// /metrics, its Go runtime, process and scrape handler families aside
// (go_*, process_*, promhttp_*, which client_golang documents), is named
// with its labels in docs/config.md's Metrics section, so an operator
// writing alerts finds there what /metrics has to offer. A vector with no
// series yet is not in a scrape, so the registry's descriptions are read,
// not a scrape.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/config.md has no ## Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	r := start(t, testConfig(t))
	descs := make(chan *prometheus.Desc)
	go func() { r.g.Registry().Describe(descs); close(descs) }()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	labels := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	n := 0
	for d := range descs {
		s := d.String()
		m := name.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no name in %s", s)
		}
		if strings.HasPrefix(m[1], "go_") || strings.HasPrefix(m[1], "process_") || strings.HasPrefix(m[1], "promhttp_") {
			continue
		}
		n++
		want := "`" + m[1] + "`"
		if l := labels.FindStringSubmatch(s); l != nil && l[1] != "" {
			want = "`" + m[1] + "{" + l[1] + "}`"
		}
		if !strings.Contains(section, want) {
			t.Errorf("docs/config.md's Metrics section does not name %s", want)
		}
	}
	if n < 10 {
		t.Fatalf("only %d gatehouse metrics registered", n)
	}
}
