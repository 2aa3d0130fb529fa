package gatehouse

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
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

// TestDocumentedMetricsExist is TestMetricsDocumented the other way: every
// row of docs/config.md's Metrics table names a metric a running gateway
// registers, with those labels, and the type it gives is the type a
// scrape of /metrics says, for each family the scrape holds (a vector
// with no series yet is not in it; the table's rows are driven by a few
// requests first, so most are). An operator's alert on a documented
// name must not silently match nothing.
func TestDocumentedMetricsExist(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/config.md has no ## Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)(?:\\{([a-z_,]*)\\})?` \\| ([a-z]+) \\|")
	rows := row.FindAllStringSubmatch(section, -1)
	if len(rows) < 10 {
		t.Fatalf("only %d rows in the Metrics table", len(rows))
	}

	cfg := testConfig(t)
	cfg.DNS.RateLimit, cfg.DNS.RateLimitSlip = 1, 1
	r := start(t, cfg)
	// A DNS answer over dns.rate_limit: the second, truncated, is counted
	// before it is sent.
	for i := range 2 {
		q := new(mdns.Msg)
		q.SetQuestion("hello.test.local.", mdns.TypeA)
		m, _, err := (&mdns.Client{Timeout: 10 * time.Second}).Exchange(q, r.g.Addrs().DNS)
		if err != nil || m.Truncated != (i == 1) {
			t.Fatalf("DNS query %d: %v %v", i+1, m, err)
		}
	}
	if code, b := r.control(t, "PUT", "/api/v3/apps/fenced", `{"policy":[{"action":"deny","path":"/admin/*"}]}`); code != 200 {
		t.Fatalf("put: %d %s", code, b)
	}
	// The write reaches the table through the store's watch: until then
	// the app's requests are an unknown host's, and count nothing of its.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return r.g.Live().Load().Lookup("fenced.test.local").Kind == route.KindApp
	}, "the app never reached the routing table")
	// Series for most vectors: an unknown host, a method of the client's
	// own (a fast path handoff), a forward mark naming no peer, a policy
	// 403, an app with no host (an upstream error).
	for _, q := range []struct{ method, host, path, mark string }{
		{"GET", "nope.test.local", "/", ""},
		{"BREW", "nope.test.local", "/", "nowhere"},
		{"GET", "fenced.test.local", "/admin/x", ""},
		{"GET", "fenced.test.local", "/", ""},
	} {
		req, _ := http.NewRequest(q.method, "http://"+r.g.Addrs().HTTP+q.path, nil)
		req.Host = q.host
		if q.mark != "" {
			req.Header.Set("X-Gatehouse-Forwarded", q.mark)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	registered := map[string]string{} // name -> labels, comma separated
	descs := make(chan *prometheus.Desc)
	go func() { r.g.Registry().Describe(descs); close(descs) }()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	labels := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	for d := range descs {
		s := d.String()
		if m := name.FindStringSubmatch(s); m != nil {
			l := ""
			if lm := labels.FindStringSubmatch(s); lm != nil {
				l = lm[1]
			}
			registered[m[1]] = l
		}
	}
	fams := scrape(t, r.g.Addrs().Management)
	// The one vector with series before anything is counted in it, as
	// the section says.
	if n := len(fams["gatehouse_hosts"].GetMetric()); n != 4 {
		t.Errorf("gatehouse_hosts has %d series once started, want its 4 states", n)
	}
	typed := 0
	for _, rw := range rows {
		metric, ls, typ := rw[1], rw[2], rw[3]
		got, ok := registered[metric]
		if !ok {
			t.Errorf("docs/config.md names %s, which the gateway does not register", metric)
			continue
		}
		if got != ls {
			t.Errorf("%s: labels {%s}, docs/config.md says {%s}", metric, got, ls)
		}
		if f, ok := fams[metric]; ok {
			typed++
			if want := strings.ToUpper(typ); f.GetType().String() != want {
				t.Errorf("%s: a scrape says %s, docs/config.md says %s", metric, f.GetType(), typ)
			}
		}
	}
	if typed < len(rows)-4 {
		t.Errorf("only %d of the %d documented metrics in the scrape: the test drives too few", typed, len(rows))
	}
}
