//go:build linux

package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

const wrkSample = `Running 10s test @ http://127.0.0.1:40001/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.12ms    2.01ms  41.50ms   88.12%
    Req/Sec     7.80k   512.33     9.01k    70.50%
  Latency Distribution
     50%  812.00us
     75%    4.90ms
     90%    6.10ms
     99%    1.20s
  155234 requests in 10.00s, 175.62MB read
  Non-2xx or 3xx responses: 7
  Socket errors: connect 1, read 2, write 0, timeout 3
Requests/sec:  15523.40
Transfer/sec:     17.56MB
`

func TestParseWrk(t *testing.T) {
	var r wrkResult
	if err := parseWrk(wrkSample, &r); err != nil {
		t.Fatal(err)
	}
	want := wrkResult{requests: 155234, rps: 15523.40, p50: 812 * time.Microsecond, p99: 1200 * time.Millisecond, errors: 13}
	if r != want {
		t.Fatalf("parseWrk = %+v, want %+v", r, want)
	}
	if err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused\n", &r); err == nil {
		t.Fatal("parseWrk accepted output without a request count")
	}
}

func TestParseWrkDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"812.00us", 812 * time.Microsecond, true},
		{"1.50ms", 1500 * time.Microsecond, true},
		{"2.00s", 2 * time.Second, true},
		{"1.00m", time.Minute, true},
		{"fast", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseWrkDuration(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseWrkDuration(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-targets", "nginx, direct,nginx", "-rounds", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.targets) != 2 || c.targets[0] != "nginx" || c.targets[1] != "direct" || c.rounds != 2 {
		t.Fatalf("parseFlags = %+v", c)
	}
	if c.body != 1024 {
		t.Fatalf("default -body %d, want the issue's 1024", c.body)
	}
	if c.headers != "host" || requestFields(c.headers) != nil {
		t.Fatalf("default -headers %q: want host, wrk's Host alone", c.headers)
	}
	if c, err := parseFlags([]string{"-headers", "browser"}); err != nil || len(requestFields(c.headers)) < 10 {
		t.Fatalf("-headers browser: %v, %d fields", err, len(requestFields(c.headers)))
	}
	if !c.l7TLS || !c.l7TLSNew {
		t.Fatalf("L7 over TLS and its new-connection test must run by default: %+v", c)
	}
	if c, _ := parseFlags(nil); slices.ContainsFunc(c.targets, func(t string) bool { return strings.HasPrefix(t, "floor") }) {
		t.Fatalf("the Go floors run by default: %q", c.targets)
	}
	if c, err := parseFlags([]string{"-targets", "gatehouse,floor-go,floor-epoll"}); err != nil || len(c.targets) != 3 {
		t.Fatalf("floors named in -targets: %q, %v", c.targets, err)
	}
	for _, bad := range [][]string{
		{"-targets", "caddy"}, {"-targets", "floor"}, {"-rounds", "0"}, {"-rounds", "21"}, {"-duration", "100ms"},
		{"-conns", "0"}, {"-threads", "65"}, {"-idle", "-1"}, {"-tls-streams", "0"},
		{"-body", "0"}, {"-body", "16777217"}, {"-headers", "firefox"}, {"-headers", ""},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestParseFlagsAB: -gatehouse-b adds the second build right after
// gatehouse, so the two run next to each other in every round; without
// gatehouse among the targets there is nothing to compare it with.
func TestParseFlagsAB(t *testing.T) {
	c, err := parseFlags([]string{"-targets", "direct,gatehouse,nginx", "-gatehouse-b", "/tmp/b"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"direct", "gatehouse", targetB, "nginx"}; !slices.Equal(c.targets, want) {
		t.Fatalf("targets %q, want %q", c.targets, want)
	}
	if _, err := parseFlags([]string{"-targets", "nginx", "-gatehouse-b", "/tmp/b"}); err == nil {
		t.Error("-gatehouse-b without gatehouse among the targets accepted")
	}
	if _, err := parseFlags([]string{"-targets", targetB}); err == nil {
		t.Errorf("%s accepted as a target of its own", targetB)
	}
}

// TestSignTest: the sign test's p against binomial tails worked by hand.
func TestSignTest(t *testing.T) {
	tests := []struct {
		k, m int
		want float64
	}{
		{0, 0, 1},       // no rounds: no evidence
		{1, 1, 1},       // an even split
		{2, 0, 0.5},     // 2 × 1/4
		{8, 0, 0.0078},  // 2 × 1/256
		{12, 4, 0.0768}, // 2 × (1+16+120+560+1820)/65536
		{4, 12, 0.0768},
		{16, 0, 0.00003},
	}
	for _, tt := range tests {
		if got := signTest(tt.k, tt.m); math.Abs(got-tt.want) > 0.0001 {
			t.Errorf("signTest(%d, %d) = %.5f, want %.5f", tt.k, tt.m, got, tt.want)
		}
	}
}

// TestReportAB: an A/B run's report compares the builds round by round
// (B's CPU per request over A's in the same round) and gives the median;
// a run without -gatehouse-b has no such section.
func TestReportAB(t *testing.T) {
	cfg, err := parseFlags([]string{"-targets", "gatehouse,nginx", "-gatehouse-b", "/tmp/b", "-rounds", "3"})
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg, t.TempDir())
	p := &proc{}
	r.targets = []*target{{name: "gatehouse", proc: p}, {name: targetB, proc: p}, {name: "nginx", proc: p}}
	r.l7["gatehouse"] = []wrkResult{{round: 0, requests: 1000, rps: 100, cpu: 0.040}, {round: 1, requests: 1000, rps: 100, cpu: 0.050}, {round: 2, requests: 2000, rps: 200, cpu: 0.080}}
	r.l7[targetB] = []wrkResult{{round: 0, requests: 1000, rps: 110, cpu: 0.036}, {round: 1, requests: 1000, rps: 100, cpu: 0.050}, {round: 2, requests: 2000, rps: 180, cpu: 0.060}}
	r.finish()
	md := r.markdown()
	if !strings.Contains(md, "| L7 (per request) | 0.90× | 0.90, 1.00, 0.75 | 2 of 3 (p 0.50) | 1.00× |") {
		t.Errorf("no per-round A/B row for L7:\n%s", md)
	}
	if strings.Contains(md, "L7 over TLS (per request)") {
		t.Errorf("an A/B row for a phase that did not run:\n%s", md)
	}
	cfg.gatehouseB = ""
	r.cfg = cfg
	if md := r.markdown(); strings.Contains(md, "A/B") {
		t.Errorf("an A/B section without -gatehouse-b:\n%s", md)
	}
}

// TestReportABPairsByRound: when one build's run failed in a round (a
// note, no result), the A/B table still compares each round's runs with
// each other, not A's next round with B's.
func TestReportABPairsByRound(t *testing.T) {
	cfg, err := parseFlags([]string{"-targets", "gatehouse,nginx", "-gatehouse-b", "/tmp/b", "-rounds", "3"})
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg, t.TempDir())
	p := &proc{}
	r.targets = []*target{{name: "gatehouse", proc: p}, {name: targetB, proc: p}, {name: "nginx", proc: p}}
	r.l7["gatehouse"] = []wrkResult{{round: 0, requests: 1000, rps: 100, cpu: 0.040}, {round: 1, requests: 1000, rps: 100, cpu: 0.080}, {round: 2, requests: 1000, rps: 100, cpu: 0.050}}
	// B's round 1 failed.
	r.l7[targetB] = []wrkResult{{round: 0, requests: 1000, rps: 90, cpu: 0.036}, {round: 2, requests: 1000, rps: 110, cpu: 0.055}}
	r.finish()
	md := r.markdown()
	if !strings.Contains(md, "| L7 (per request) | 1.00× | 0.90, 1.10 | 1 of 2 (p 1.00) | 1.00× |") {
		t.Errorf("A/B row for L7 does not pair round 0 with round 0 and round 2 with round 2:\n%s", md)
	}
}
