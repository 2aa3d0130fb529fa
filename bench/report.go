//go:build linux

package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report collects every measurement and renders the Markdown table.
type report struct {
	cfg       config
	root      string
	start     time.Time
	end       time.Time
	loadStart string
	loadEnd   string
	commitID  string // the work tree measured, read when the run starts
	targets   []*target
	l7, l7tls map[string][]wrkResult
	h2        map[string][]h2Result
	idle      map[string]idleResult
	dl, hs    map[string][]tlsResult
	l7new     map[string][]tlsResult // L7 over TLS, a new connection per request
	// profiles are perf's findings by phase (profileL7, ...) and target.
	profiles map[string]map[string]string
	notes    []string
}

func newReport(cfg config, root string) *report {
	r := &report{cfg: cfg, root: root, start: time.Now(), loadStart: loadAvg(),
		l7: map[string][]wrkResult{}, l7tls: map[string][]wrkResult{}, h2: map[string][]h2Result{}, idle: map[string]idleResult{}, dl: map[string][]tlsResult{}, hs: map[string][]tlsResult{}, l7new: map[string][]tlsResult{}, profiles: map[string]map[string]string{}}
	r.commitID = r.commit()
	return r
}

func (r *report) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	logf("%s", msg)
	r.notes = append(r.notes, msg)
}

func (r *report) finish() { r.end, r.loadEnd = time.Now(), loadAvg() }

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		v = append(v, f(x))
	}
	return median(v)
}

// ratio formats a/b as "0.62×", or "—" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func cmdLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if line == "" {
		return "not installed"
	}
	return line
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func (r *report) commit() string {
	c := exec.Command("git", "rev-parse", "--short", "HEAD")
	c.Dir = r.root
	out, err := c.Output()
	if err != nil {
		return "unknown"
	}
	s := strings.TrimSpace(string(out))
	c = exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	c.Dir = r.root
	if out, _ := c.Output(); len(strings.TrimSpace(string(out))) > 0 {
		s += " (+ uncommitted changes)"
	}
	return s
}

// runFlags is every flag that shapes what a run measures, so the report's
// command repeats the run: -targets as given (parseFlags adds gatehouse-b
// itself and refuses it by name), the prebuilt binaries when there were
// any. -out, -keep and -install change nothing measured.
func runFlags(c config) string {
	targets := slices.DeleteFunc(slices.Clone(c.targets), func(t string) bool { return t == targetB })
	s := fmt.Sprintf("-rounds %d -duration %s -conns %d -body %d -threads %d -targets %s -idle %d -tls=%v -l7-tls=%v -l7-tls-new=%v -x25519-only=%v -h2=%v -headers %s -peer-fields=%v -tls-duration %s -tls-streams %d -tls-workers %d -perf=%v",
		c.rounds, c.duration, c.conns, c.body, c.threads, strings.Join(targets, ","), c.idle, c.tls, c.l7TLS, c.l7TLSNew, c.x25519, c.h2, c.headers, c.peerFields,
		c.tlsDuration, c.tlsStreams, c.tlsWorkers, c.perf)
	if c.gatehouse != "" {
		s += " -gatehouse " + c.gatehouse
	}
	if c.gatehouseB != "" {
		s += " -gatehouse-b " + c.gatehouseB
	}
	return s
}

func ms(v float64) string { return fmt.Sprintf("%.2f ms", v/1e6) }

// markdown renders the whole report.
func (r *report) markdown() string {
	var b strings.Builder
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "# gatehouse load harness — %s\n\n", r.start.UTC().Format("2006-01-02 15:04 MST"))
	if r.cfg.gatehouse == "" {
		fmt.Fprintf(&b, "- commit: %s (gatehouse built from this work tree when the run started)\n", r.commitID)
	} else {
		fmt.Fprintf(&b, "- commit: %s (the work tree's; gatehouse itself is the prebuilt %s)\n", r.commitID, r.cfg.gatehouse)
	}
	fmt.Fprintf(&b, "- machine: %d cores, %s, Linux %s\n", runtime.NumCPU(), cpuModel(), strings.TrimSpace(string(kernel)))
	fmt.Fprintf(&b, "- load average: %s at start, %s at end (cores shared with the load generator and backend)\n", r.loadStart, r.loadEnd)
	fmt.Fprintf(&b, "- versions: %s; %s; %s; %s", runtime.Version(), cmdLine("nginx", "-v"), cmdLine("haproxy", "-v"), cmdLine("wrk", "-v"))
	if r.cfg.h2 {
		fmt.Fprintf(&b, "; %s", cmdLine("h2load", "--version"))
	}
	fmt.Fprintln(&b)
	if r.cfg.gatehouseB != "" {
		a := r.cfg.gatehouse
		if a == "" {
			a = "built from the work tree"
		}
		fmt.Fprintf(&b, "- A/B: gatehouse is %s, %s is %s\n", a, targetB, r.cfg.gatehouseB)
	}
	fmt.Fprintf(&b, "- run: `go run ./bench %s`, %s in all\n", runFlags(r.cfg), r.end.Sub(r.start).Round(time.Second))
	if r.cfg.peerFields {
		b.WriteString("- peer fields: nginx and HAProxy add the fields gatehouse adds, both ways (the five rate-limit fields, X-Request-Id and X-Gatehouse-Cluster on responses; X-Forwarded-Host, X-Request-Id and the four X-Gatehouse-* fields to the host)\n")
	}
	b.WriteString("\n")

	r.abTable(&b)
	r.l7Table(&b, fmt.Sprintf("L7: %s responses, %d keep-alive connections", sizeName(r.cfg.body), r.cfg.conns), r.l7, r.targets)
	if r.cfg.l7TLS {
		r.l7Table(&b, fmt.Sprintf("L7 over TLS: the same, each proxy terminating TLS (HTTP/1.1, ECDSA P-256 certificate, %d connections, handshakes in the warm-up)", r.cfg.conns), r.l7tls, r.proxies())
		if r.cfg.l7TLSNew {
			r.newConnTable(&b)
		}
	}
	if r.cfg.h2 {
		r.h2Table(&b)
	}
	r.idleTable(&b)
	if r.cfg.tls {
		r.tlsTable(&b)
	}
	const cols = "perf, cpu-clock, inclusive, symbols ≥ 3%, columns: with children, self"
	r.profileSection(&b, fmt.Sprintf("Where the proxies spend CPU (one extra %s wrk run; %s)", r.cfg.duration, cols), r.profiles[profileL7])
	r.profileSection(&b, fmt.Sprintf("Where the proxies spend CPU over HTTP/2 (one extra %s h2load run; %s)", r.cfg.duration, cols), r.profiles[profileH2])
	r.profileSection(&b, fmt.Sprintf("Where the proxies spend CPU per new L7 TLS connection (one extra %s new-connection run; %s)", r.cfg.tlsDuration, cols), r.profiles[profileNewConn])
	r.profileSection(&b, fmt.Sprintf("Where the proxies spend CPU per new passthrough connection (one extra %s handshake run; %s)", r.cfg.tlsDuration, cols), r.profiles[profileHandshakes])
	var missing []string
	for _, t := range r.targets {
		if t.err != nil {
			missing = append(missing, fmt.Sprintf("- %s: %v", t.name, oneLine(t.err)))
		} else if r.cfg.tls && t.tlsErr != nil {
			missing = append(missing, fmt.Sprintf("- %s passthrough: %v", t.name, oneLine(t.tlsErr)))
		}
		if t.err == nil && r.cfg.l7TLS && t.httpsErr != nil {
			missing = append(missing, fmt.Sprintf("- %s L7 over TLS: %v", t.name, oneLine(t.httpsErr)))
		}
	}
	for _, n := range r.notes {
		missing = append(missing, "- "+oneLine(fmt.Errorf("%s", n)))
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "## Not measured / problems\n\n%s\n", strings.Join(missing, "\n"))
	}
	return b.String()
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// proxies is r.targets without the Go floors, which take part in the
// plaintext L7 rounds only: the other tables have no row for them.
func (r *report) proxies() []*target {
	var out []*target
	for _, t := range r.targets {
		if !t.floor {
			out = append(out, t)
		}
	}
	return out
}

func (r *report) l7Table(b *strings.Builder, title string, results map[string][]wrkResult, targets []*target) {
	fmt.Fprintf(b, "## %s (wrk, median of %d × %s)\n\n", title, r.cfg.rounds, r.cfg.duration)
	fmt.Fprintln(b, "| target | req/s | × direct | × nginx | p50 | p99 | proxy CPU s / 100k req | proxy CPU × nginx | backend CPU µs/req | errors | rounds |")
	fmt.Fprintln(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	rps := func(name string) float64 { return medianOf(results[name], func(w wrkResult) float64 { return w.rps }) }
	cpu := func(name string) float64 {
		return medianOf(results[name], func(w wrkResult) float64 { return w.cpu / float64(max(w.requests, 1)) * 1e5 })
	}
	for _, t := range targets {
		runs := results[t.name]
		if len(runs) == 0 {
			fmt.Fprintf(b, "| %s | not measured | | | | | | | | | 0 |\n", t.name)
			continue
		}
		var errs int64
		for _, w := range runs {
			errs += w.errors
		}
		p50 := medianOf(runs, func(w wrkResult) float64 { return float64(w.p50) })
		p99 := medianOf(runs, func(w wrkResult) float64 { return float64(w.p99) })
		cpuCell, cpuRatio := "— (no proxy)", "—"
		if t.proc != nil {
			cpuCell = fmt.Sprintf("%.2f (%.1f µs/req)", cpu(t.name), cpu(t.name)*10)
			cpuRatio = ratio(cpu(t.name), cpu("nginx"))
		}
		be := medianOf(runs, func(w wrkResult) float64 { return w.backend / float64(max(w.requests, 1)) * 1e6 })
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %.1f | %d | %d |\n", t.name, rps(t.name),
			ratio(rps(t.name), rps("direct")), ratio(rps(t.name), rps("nginx")), ms(p50), ms(p99), cpuCell, cpuRatio, be, errs, len(runs))
	}
	fmt.Fprintln(b)
}

func (r *report) idleTable(b *strings.Builder) {
	if r.cfg.idle == 0 {
		return
	}
	fmt.Fprintf(b, "## Memory per idle keep-alive connection (%d connections, one request each, RSS of the process tree)\n\n", r.cfg.idle)
	fmt.Fprintln(b, "| target | RSS before | RSS with connections open | bytes / connection | × nginx |")
	fmt.Fprintln(b, "|---|---:|---:|---:|---:|")
	for _, t := range r.proxies() {
		x, ok := r.idle[t.name]
		if !ok {
			fmt.Fprintf(b, "| %s | not measured | | | |\n", t.name)
			continue
		}
		name := t.name
		if t.proc == nil {
			name += " (backend process)"
		}
		fmt.Fprintf(b, "| %s | %.1f MiB | %.1f MiB | %.0f | %s |\n", name, float64(x.before)/(1<<20), float64(x.after)/(1<<20),
			x.perConn, ratio(x.perConn, r.idle["nginx"].perConn))
	}
	fmt.Fprintln(b)
}

func (r *report) tlsTable(b *strings.Builder) {
	fmt.Fprintf(b, "## L4 TLS passthrough by SNI (the backend terminates TLS; median of %d × %s each)\n\n", r.cfg.rounds, r.cfg.tlsDuration)
	fmt.Fprintf(b, "Downloads: %d parallel keep-alive HTTPS streams of 1 GiB bodies. Handshakes: %d workers, a fresh full TLS handshake per connection.\n\n", r.cfg.tlsStreams, r.cfg.tlsWorkers)
	fmt.Fprintln(b, "| target | download MB/s | × direct | × nginx | proxy CPU s / GB | handshakes/s | × direct | × nginx | proxy CPU ms / 1k handshakes | errors |")
	fmt.Fprintln(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	mbps := func(n string) float64 { return medianOf(r.dl[n], tlsResult.mbps) }
	hps := func(n string) float64 { return medianOf(r.hs[n], tlsResult.hps) }
	for _, t := range r.proxies() {
		if len(r.dl[t.name]) == 0 {
			fmt.Fprintf(b, "| %s | not measured | | | | | | | | |\n", t.name)
			continue
		}
		var errs int64
		for _, x := range append(slices.Clone(r.dl[t.name]), r.hs[t.name]...) {
			errs += x.errors
		}
		cpuGB, cpuHS := "— (no proxy)", "— (no proxy)"
		if t.proc != nil {
			cpuGB = fmt.Sprintf("%.2f", medianOf(r.dl[t.name], func(x tlsResult) float64 { return x.cpu / (float64(max(x.bytes, 1)) / 1e9) }))
			cpuHS = fmt.Sprintf("%.1f", medianOf(r.hs[t.name], func(x tlsResult) float64 { return x.cpu * 1e3 / (float64(max(x.handshakes, 1)) / 1e3) }))
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %.0f | %s | %s | %s | %d |\n", t.name, mbps(t.name),
			ratio(mbps(t.name), mbps("direct")), ratio(mbps(t.name), mbps("nginx")), cpuGB,
			hps(t.name), ratio(hps(t.name), hps("direct")), ratio(hps(t.name), hps("nginx")), cpuHS, errs)
	}
	fmt.Fprintln(b)
}

func (r *report) newConnTable(b *strings.Builder) {
	fmt.Fprintf(b, "## L7 over TLS, a new connection per request (median of %d × %s each)\n\n", r.cfg.rounds, r.cfg.tlsDuration)
	fmt.Fprintf(b, "%d clients, each connection a full TLS handshake (no resumption, ECDSA P-256; the TLS column is the version and key exchange each target chose: Go's crypto/tls prefers the post-quantum hybrid X25519MLKEM768, which OpenSSL 3.0 lacks), one GET of %s, `Connection: close`; the proxy keeps its connections to the backend.\n\n", r.cfg.tlsWorkers, sizeName(r.cfg.body))
	fmt.Fprintln(b, "| target | TLS | connections/s | × direct | × nginx | proxy CPU ms / 1k connections | proxy CPU × nginx | errors | rounds |")
	fmt.Fprintln(b, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	cps := func(n string) float64 { return medianOf(r.l7new[n], tlsResult.hps) }
	cpu := func(n string) float64 {
		return medianOf(r.l7new[n], func(x tlsResult) float64 { return x.cpu * 1e3 / (float64(max(x.handshakes, 1)) / 1e3) })
	}
	for _, t := range r.proxies() {
		runs := r.l7new[t.name]
		if len(runs) == 0 {
			fmt.Fprintf(b, "| %s | | not measured | | | | | | 0 |\n", t.name)
			continue
		}
		var errs int64
		version := "?"
		for _, x := range runs {
			errs += x.errors
			if x.version != "" {
				version = x.version
			}
		}
		cpuCell, cpuRatio := "— (no proxy)", "—"
		if t.proc != nil {
			cpuCell, cpuRatio = fmt.Sprintf("%.1f", cpu(t.name)), ratio(cpu(t.name), cpu("nginx"))
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %s | %s | %d | %d |\n", t.name, version, cps(t.name),
			ratio(cps(t.name), cps("direct")), ratio(cps(t.name), cps("nginx")), cpuCell, cpuRatio, errs, len(runs))
	}
	fmt.Fprintln(b)
}

func (r *report) h2Table(b *strings.Builder) {
	fmt.Fprintf(b, "## L7 over HTTP/2: the same, over TLS with ALPN h2, %d connections with one stream in flight each (h2load, median of %d × %s)\n\n", r.cfg.conns, r.cfg.rounds, r.cfg.duration)
	fmt.Fprintln(b, "h2load reports no percentiles: mean and max request time. The direct backend speaks HTTP/1.1 only.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| target | req/s | × nginx | mean | max | proxy CPU s / 100k req | proxy CPU × nginx | errors | rounds |")
	fmt.Fprintln(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	rps := func(name string) float64 { return medianOf(r.h2[name], func(x h2Result) float64 { return x.rps }) }
	cpu := func(name string) float64 {
		return medianOf(r.h2[name], func(x h2Result) float64 { return x.cpu / float64(max(x.requests, 1)) * 1e5 })
	}
	for _, t := range r.proxies() {
		if t.proc == nil {
			continue
		}
		runs := r.h2[t.name]
		if len(runs) == 0 {
			fmt.Fprintf(b, "| %s | not measured | | | | | | | 0 |\n", t.name)
			continue
		}
		var errs int64
		for _, x := range runs {
			errs += x.errors
		}
		mean := medianOf(runs, func(x h2Result) float64 { return float64(x.mean) })
		mx := medianOf(runs, func(x h2Result) float64 { return float64(x.max) })
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %.2f (%.1f µs/req) | %s | %d | %d |\n", t.name, rps(t.name), ratio(rps(t.name), rps("nginx")),
			ms(mean), ms(mx), cpu(t.name), cpu(t.name)*10, ratio(cpu(t.name), cpu("nginx")), errs, len(runs))
	}
	fmt.Fprintln(b)
}

// sizeName writes a byte count as the report's headings do: "1 KiB",
// "64 KiB", "1 MiB", else bytes.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// profileSection writes one section of perf profiles, one per target that
// has one, in the targets' order; nothing when there are none.
func (r *report) profileSection(b *strings.Builder, title string, profiles map[string]string) {
	if len(profiles) == 0 {
		return
	}
	fmt.Fprintf(b, "## %s\n\n", title)
	for _, t := range r.targets {
		if p, ok := profiles[t.name]; ok {
			fmt.Fprintf(b, "%s:\n\n```\n%s\n```\n\n", t.name, p)
		}
	}
}

// abTable compares the two builds of an A/B run (-gatehouse-b) phase by
// phase: B's CPU per unit of work over A's, round by round (the two ran
// in the same round, next to each other), and the median of those.
func (r *report) abTable(b *strings.Builder) {
	if r.cfg.gatehouseB == "" {
		return
	}
	type phase struct {
		name, unit string
		runs       func(target string) []abRun
	}
	wrk := func(m map[string][]wrkResult) func(string) []abRun {
		return func(t string) []abRun {
			var out []abRun
			for _, w := range m[t] {
				out = append(out, abRun{round: w.round, cpu: w.cpu / float64(max(w.requests, 1)), rate: w.rps})
			}
			return out
		}
	}
	tlsRuns := func(m map[string][]tlsResult, perByte bool) func(string) []abRun {
		return func(t string) []abRun {
			var out []abRun
			for _, x := range m[t] {
				if perByte {
					out = append(out, abRun{round: x.round, cpu: x.cpu / float64(max(x.bytes, 1)), rate: x.mbps()})
				} else {
					out = append(out, abRun{round: x.round, cpu: x.cpu / float64(max(x.handshakes, 1)), rate: x.hps()})
				}
			}
			return out
		}
	}
	phases := []phase{
		{"L7", "request", wrk(r.l7)},
		{"L7 over TLS", "request", wrk(r.l7tls)},
		{"L7 over TLS, new connections", "connection", tlsRuns(r.l7new, false)},
		{"L7 over HTTP/2", "request", func(t string) []abRun {
			var out []abRun
			for _, h := range r.h2[t] {
				out = append(out, abRun{round: h.round, cpu: h.cpu / float64(max(h.requests, 1)), rate: h.rps})
			}
			return out
		}},
		{"passthrough downloads", "byte", tlsRuns(r.dl, true)},
		{"passthrough handshakes", "handshake", tlsRuns(r.hs, false)},
	}
	fmt.Fprintf(b, "## A/B: %s against gatehouse, in the same rounds\n\n", targetB)
	fmt.Fprintln(b, "Each round ran both builds next to each other; a ratio below 1 means the B build spent less CPU per unit of work (or, for throughput, did less). "+
		"Rounds lower: in how many rounds B spent less CPU than A, and the two-sided sign test's p for that count if the builds cost the same (a small p: the difference is not the rounds' noise).")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| phase | CPU per unit, B ÷ A (median) | each round | rounds lower (sign test) | throughput, B ÷ A (median) |")
	fmt.Fprintln(b, "|---|---:|---|---|---:|")
	for _, ph := range phases {
		// A round in which either build's run failed has no pair: it is
		// left out, and the other rounds stay paired with their own.
		a := map[int]abRun{}
		for _, x := range ph.runs("gatehouse") {
			a[x.round] = x
		}
		var cpu, rate []float64
		var each []string
		lower, higher := 0, 0
		for _, bx := range ph.runs(targetB) {
			ax, ok := a[bx.round]
			if !ok {
				continue
			}
			if ax.cpu > 0 && bx.cpu > 0 {
				cpu = append(cpu, bx.cpu/ax.cpu)
				each = append(each, fmt.Sprintf("%.2f", bx.cpu/ax.cpu))
				switch {
				case bx.cpu < ax.cpu:
					lower++
				case bx.cpu > ax.cpu:
					higher++
				}
			}
			if ax.rate > 0 {
				rate = append(rate, bx.rate/ax.rate)
			}
		}
		if len(cpu) == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s (per %s) | %.2f× | %s | %d of %d (p %.2f) | %.2f× |\n", ph.name, ph.unit, median(cpu), strings.Join(each, ", "),
			lower, len(cpu), signTest(lower, higher), median(rate))
	}
	fmt.Fprintln(b)
}

// signTest is the two-sided sign test's p-value for k rounds one way and
// m the other (ties left out): the chance, were each round a fair coin,
// of a split at least this uneven. An A/B's per-round ratios move ±5 %
// here, so a median alone cannot tell a 2 % change from noise; the
// count of rounds that went B's way can, given enough rounds.
func signTest(k, m int) float64 {
	n := k + m
	if n == 0 {
		return 1
	}
	// P(X <= min(k, m)) for X ~ Binomial(n, 1/2), doubled.
	lo := min(k, m)
	c, sum := 1.0, 0.0 // C(n, i), the sum of C(n, 0..lo)
	for i := 0; i <= lo; i++ {
		if i > 0 {
			c = c * float64(n-i+1) / float64(i)
		}
		sum += c
	}
	return min(1, 2*sum/math.Pow(2, float64(n)))
}

// abRun is one round of one build in an A/B comparison: the round, CPU
// seconds per unit of work and the rate of work.
type abRun struct {
	round     int
	cpu, rate float64
}
