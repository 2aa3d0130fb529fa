package gatehouse

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// scrape reads the management listener's /metrics with a real HTTP client
// and parses it with Prometheus's own text parser, as a scraper would.
func scrape(t *testing.T, mgmt string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + mgmt + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("/metrics: %d %s", res.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// seriesValues flattens the gatehouse_* families of a scrape to one value
// per series, keyed `name{l="v",...}`: a counter's or gauge's value, a
// histogram's sample count. The connection gauges are left out: the
// scrape's own connection is not theirs, but a test's client may still
// hold one as the scrape runs.
func seriesValues(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "gatehouse_") || name == "gatehouse_active_connections" {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			key := name + "{" + strings.Join(ls, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// background reports whether series k moves on its own, whatever the
// requests: the hosts' states, the bus, the store's reloads.
func background(k string) bool {
	for _, p := range []string{"gatehouse_hosts{", "gatehouse_host_", "gatehouse_bus_", "gatehouse_store_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// TestMetricsCountEachRefusal: each kind of answer a client can get moves
// exactly the series docs/config.md's Metrics table says, by exactly one,
// and no other request series moves: an unknown host's 404, a policy
// 403, an app window's 429, a host's answer, an answer outside 100-599
// from a host (a 5xx, as RFC 9110 §15 says a client treats it), a host
// that dies mid-request (502), an app with no host, a method of the
// client's own. Real requests to a real gateway, a real scrape.
func TestMetricsCountEachRefusal(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	r := start(t, testConfig(t))
	apps := map[string]string{
		"hello":  `{}`,
		"dies":   `{}`,
		"empty":  `{}`,
		"fenced": `{"policy":[{"action":"deny","path":"/admin/*"}]}`,
		"tight":  `{"rate_limit":{"requests":1,"window":"60s"}}`,
	}
	for app, body := range apps {
		if code, b := r.control(t, "PUT", "/api/v3/apps/"+app, body); code != 200 {
			t.Fatalf("put %s: %d %s", app, code, b)
		}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.URL.Query().Has("die"):
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		case req.URL.Query().Has("status"):
			n, _ := strconv.Atoi(req.URL.Query().Get("status"))
			w.WriteHeader(n)
		default:
			io.WriteString(w, "ok")
		}
	})
	for _, app := range []string{"hello", "dies", "tight"} {
		startHost(t, r, "h-"+app, app, h)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		l := r.g.Live().Load()
		return len(l.Pool("hello")) == 1 && len(l.Pool("dies")) == 1 && len(l.Pool("tight")) == 1
	}, "hosts not routable")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	do := func(method, host, target string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+r.g.Addrs().HTTP+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s%s: %v", method, host, target, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	// tight's one request of the window goes before the baseline.
	if code := do("GET", "tight.test.local", "/"); code != 200 {
		t.Fatalf("tight's first request: %d", code)
	}
	mgmt := r.g.Addrs().Management

	tests := []struct {
		name         string
		method, host string
		target       string
		status       []int    // what the client may get
		moved        []string // the series that move by exactly one
	}{
		{"unknown host", "GET", "nope.test.local", "/", []int{404},
			[]string{`gatehouse_http_requests_total{app="_unknown",code="4xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="_unknown"}`}},
		{"own method, unknown host", "BREW", "nope.test.local", "/", []int{404},
			[]string{`gatehouse_http_requests_total{app="_unknown",code="4xx",method="OTHER"}`, `gatehouse_http_request_duration_seconds{app="_unknown"}`,
				`gatehouse_fast_path_handoffs_total{reason="method"}`}},
		{"host answers", "GET", "hello.test.local", "/", []int{200},
			[]string{`gatehouse_http_requests_total{app="hello",code="2xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="hello"}`}},
		// A status past 599 is no HTTP answer: a 502, the host's error.
		{"host answers 799", "GET", "hello.test.local", "/?status=799", []int{502},
			[]string{`gatehouse_http_requests_total{app="hello",code="5xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="hello"}`,
				`gatehouse_upstream_errors_total{app="hello",reason="other"}`}},
		{"policy 403", "GET", "fenced.test.local", "/admin/x", []int{403},
			[]string{`gatehouse_http_requests_total{app="fenced",code="4xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="fenced"}`,
				`gatehouse_policy_denied_total{app="fenced"}`}},
		{"app window 429", "GET", "tight.test.local", "/", []int{429},
			[]string{`gatehouse_http_requests_total{app="tight",code="4xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="tight"}`,
				`gatehouse_rate_limited_total{app="tight",limit="app"}`}},
		{"no host", "GET", "empty.test.local", "/", []int{502, 503},
			[]string{`gatehouse_http_requests_total{app="empty",code="5xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="empty"}`,
				`gatehouse_upstream_errors_total{app="empty",reason="no_host"}`}},
		{"host dies mid-request", "GET", "dies.test.local", "/?die", []int{502},
			[]string{`gatehouse_http_requests_total{app="dies",code="5xx",method="GET"}`, `gatehouse_http_request_duration_seconds{app="dies"}`,
				`gatehouse_upstream_errors_total{app="dies",reason="other"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := seriesValues(scrape(t, mgmt))
			if code := do(tt.method, tt.host, tt.target); !slices.Contains(tt.status, code) {
				t.Fatalf("status %d, want one of %v", code, tt.status)
			}
			after := seriesValues(scrape(t, mgmt))
			for _, k := range tt.moved {
				if d := after[k] - before[k]; d != 1 {
					t.Errorf("%s moved by %v, want 1", k, d)
				}
			}
			for k, v := range after {
				if background(k) {
					continue
				}
				if !slices.Contains(tt.moved, k) && v != before[k] {
					t.Errorf("%s moved from %v to %v, and should not have", k, before[k], v)
				}
			}
			for k := range before {
				if _, ok := after[k]; !ok {
					t.Errorf("%s left /metrics", k)
				}
			}
		})
	}
}

// TestMetricsCardinalityBounded: nothing a client chooses makes a series.
// Clients send a few hundred requests, each with a Host, path, method,
// User-Agent and X-Forwarded-For of its own, to unknown hosts, to names
// under the zone that are no app, and to an app whose host answers each
// with a status code of its own (100-999); the gatehouse_* series after
// the first round are all there are after ten rounds.
func TestMetricsCardinalityBounded(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.UnknownRequests = 100000 // the 429s of the unknown-host budget are a series of their own
	r := start(t, cfg)
	if code, b := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put: %d %s", code, b)
	}
	startHost(t, r, "h1", "hello", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := strconv.Atoi(req.URL.Query().Get("status"))
		w.WriteHeader(n)
	}))
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host not routable")
	// Raw requests: the client's own method tokens and statuses, on one
	// kept-alive connection a round (bounded: 3 × 20 requests a round,
	// 10 rounds, a 10 s deadline each).
	statuses := []int{200, 201, 204, 299, 301, 399, 404, 418, 499, 503, 599, 600, 799, 999}
	round := func(n int) {
		c, err := net.DialTimeout("tcp", r.g.Addrs().HTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var reqs strings.Builder
		for i := range 20 {
			id := fmt.Sprintf("%d-%d", n, i)
			extra := "User-Agent: ua-" + id + "\r\nX-Forwarded-For: 198.51.100." + strconv.Itoa(i) + ", 203.0.113." + strconv.Itoa(n) + "\r\n"
			fmt.Fprintf(&reqs, "M%s /p/%s HTTP/1.1\r\nHost: x%s.evil.example\r\n%s\r\n", strings.ReplaceAll(id, "-", "X"), id, id, extra)
			fmt.Fprintf(&reqs, "GET /q/%s HTTP/1.1\r\nHost: n%s.test.local:%d\r\n%s\r\n", id, id, 1000+i, extra)
			fmt.Fprintf(&reqs, "GET /s/%s?status=%d HTTP/1.1\r\nHost: hello.test.local\r\n%s\r\n", id, statuses[(n*20+i)%len(statuses)], extra)
		}
		fmt.Fprintf(&reqs, "GET / HTTP/1.1\r\nHost: x.evil.example\r\nConnection: close\r\n\r\n")
		go io.WriteString(c, reqs.String())
		// Read to the close; each answer is read by count, not parsed:
		// the server closes after the last.
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("round %d: %v", n, err)
		}
	}
	answered := 0.0 // gatehouse_http_requests_total, summed over the series
	names := func() []string {
		var ks []string
		answered = 0
		for k, v := range seriesValues(scrape(t, r.g.Addrs().Management)) {
			ks = append(ks, k)
			if strings.HasPrefix(k, "gatehouse_http_requests_total{") {
				answered += v
			}
		}
		slices.Sort(ks)
		return ks
	}
	round(0)
	first := names()
	for n := 1; n < 10; n++ {
		round(n)
	}
	last := names()
	if answered != 10*61 {
		t.Fatalf("%v requests counted, want %d: the rounds did not reach the gateway", answered, 10*61)
	}
	if !slices.Equal(first, last) {
		var grown []string
		for _, k := range last {
			if !slices.Contains(first, k) {
				grown = append(grown, k)
			}
		}
		t.Fatalf("series grew from %d to %d with the clients' choices; new: %v", len(first), len(last), grown)
	}
	if len(first) > 60 {
		t.Fatalf("%d gatehouse series after one round: %v", len(first), first)
	}
}
