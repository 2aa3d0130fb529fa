//go:build linux

// Command bench is gatehouse's side-by-side load harness (issue 6): it
// starts a fixed backend, gatehouse, nginx and HAProxy on loopback with
// equivalent configurations and measures them in interleaved rounds with
// wrk and its own TLS clients. See bench/README.md.
//
//	go run ./bench [-rounds 3] [-duration 10s] [-conns 64] [-targets direct,gatehouse,nginx,haproxy]
//
// Every process it starts is stopped by PID when it returns, fails or is
// interrupted. All traffic stays on 127.0.0.1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		if err := runFloor(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "backend" {
		if err := runBackend(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run(os.Args[1:]))
}

type config struct {
	rounds      int
	duration    time.Duration
	conns       int
	body        int // L7 response body size in bytes
	threads     int
	targets     []string
	idle        int
	tls         bool
	l7TLS       bool
	l7TLSNew    bool
	x25519      bool // new-connection clients offer only X25519
	h2          bool
	tlsDuration time.Duration
	tlsStreams  int
	tlsWorkers  int
	install     bool
	gatehouse   string // prebuilt binary; empty builds ./cmd/gatehouse
	gatehouseB  string // a second build, target gatehouse-b; empty: none
	out         string
	keep        bool
	perf        bool
	headers     string // the L7 clients' request fields: "host" or "browser"
	peerFields  bool   // nginx and HAProxy add the fields gatehouse adds (peerRateFields, and the context fields)
}

var allTargets = []string{"direct", "gatehouse", "nginx", "haproxy"}

// targetB is the second gatehouse build of an A/B run (-gatehouse-b).
const targetB = "gatehouse-b"

// floorTargets are the Go floors (bench/floor.go): accepted by -targets,
// never run unless named.
var floorTargets = []string{"floor-go", "floor-epoll", "floor-lane", "floor-bytes"}

func parseFlags(args []string) (config, error) {
	var c config
	var targets string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds over all targets (1-20)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "wrk run length per target per round (1s-5m)")
	fs.IntVar(&c.conns, "conns", 64, "wrk keep-alive connections")
	fs.IntVar(&c.body, "body", smallBody, "L7 response body size in bytes (1-16777216; the issue's figure is 1024)")
	fs.IntVar(&c.threads, "threads", 2, "wrk threads")
	fs.StringVar(&targets, "targets", strings.Join(allTargets, ","), "comma-separated targets: "+strings.Join(allTargets, ",")+" (and, only when named, the Go floors "+strings.Join(floorTargets, ",")+")")
	fs.IntVar(&c.idle, "idle", 10000, "idle keep-alive connections for the memory test (0 skips it)")
	fs.BoolVar(&c.tls, "tls", true, "run the L4 TLS passthrough tests")
	fs.BoolVar(&c.l7TLS, "l7-tls", true, "run the L7 rounds over TLS too (each proxy terminates TLS)")
	fs.BoolVar(&c.l7TLSNew, "l7-tls-new", true, "with -l7-tls, also measure a new TLS connection per request (handshake, one GET, close)")
	fs.BoolVar(&c.x25519, "x25519-only", false, "new-connection clients offer only X25519, the group nginx and HAProxy (OpenSSL 3.0) use, so every target does the same handshake")
	fs.BoolVar(&c.h2, "h2", true, "run the L7 rounds over HTTP/2 too (h2load; TLS, each proxy terminating it)")
	fs.DurationVar(&c.tlsDuration, "tls-duration", 5*time.Second, "length of each TLS download, handshake and new-connection run")
	fs.IntVar(&c.tlsStreams, "tls-streams", 4, "parallel TLS downloads")
	fs.IntVar(&c.tlsWorkers, "tls-workers", 16, "parallel TLS handshakers (and new-connection clients)")
	fs.BoolVar(&c.install, "install", true, "apt-get install missing nginx, haproxy, wrk (as root)")
	fs.StringVar(&c.gatehouse, "gatehouse", "", "gatehouse binary to test (default: go build ./cmd/gatehouse)")
	fs.StringVar(&c.gatehouseB, "gatehouse-b", "", "a second gatehouse binary, measured as target "+targetB+" in the same interleaved rounds as the first (an A/B of two builds; needs gatehouse among -targets)")
	fs.StringVar(&c.out, "out", "", "Markdown report path (default bench/results/latest.md in the module)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temp dir (configs, logs) for inspection")
	fs.StringVar(&c.headers, "headers", "host", "request fields the L7 clients (wrk, h2load) send: host (Host alone, wrk's own) or browser (the dozen a browser sends on a page load)")
	fs.BoolVar(&c.peerFields, "peer-fields", false, "nginx and HAProxy add the fields gatehouse must add (DESIGN §2): the five rate-limit fields with the values gatehouse sends, X-Request-Id and X-Gatehouse-Cluster on every L7 response, and X-Forwarded-Host, X-Request-Id and the four X-Gatehouse-* context fields to the host, so that every proxy sends the same fields both ways: a like-for-like reading of the proxies' own work")
	fs.BoolVar(&c.perf, "perf", false, "profile each proxy with perf during one more run of the L7 test (and, with -l7-tls and -tls, of the new-connection and handshake tests)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, t := range strings.Split(targets, ",") {
		t = strings.TrimSpace(t)
		if !slices.Contains(allTargets, t) && !slices.Contains(floorTargets, t) {
			return c, fmt.Errorf("-targets: unknown target %q (want %s)", t, strings.Join(append(allTargets, floorTargets...), ","))
		}
		if !slices.Contains(c.targets, t) {
			c.targets = append(c.targets, t)
		}
	}
	if c.gatehouseB != "" {
		i := slices.Index(c.targets, "gatehouse")
		if i < 0 {
			return c, errors.New("-gatehouse-b: gatehouse must be among -targets")
		}
		c.targets = slices.Insert(c.targets, i+1, targetB)
	}
	switch {
	case c.headers != "host" && c.headers != "browser":
		return c, fmt.Errorf("-headers %q: want host or browser", c.headers)
	case c.rounds < 1 || c.rounds > 20:
		return c, fmt.Errorf("-rounds %d: want 1-20", c.rounds)
	case c.duration < time.Second || c.duration > 5*time.Minute:
		return c, fmt.Errorf("-duration %s: want 1s-5m", c.duration)
	case c.body < 1 || c.body > maxBody:
		return c, fmt.Errorf("-body %d: want 1-%d", c.body, maxBody)
	case c.conns < 1 || c.conns > 10000:
		return c, fmt.Errorf("-conns %d: want 1-10000", c.conns)
	case c.threads < 1 || c.threads > c.conns:
		return c, fmt.Errorf("-threads %d: want 1-conns", c.threads)
	case c.idle < 0 || c.idle > 100000:
		return c, fmt.Errorf("-idle %d: want 0-100000", c.idle)
	case c.tlsDuration < time.Second || c.tlsDuration > 5*time.Minute:
		return c, fmt.Errorf("-tls-duration %s: want 1s-5m", c.tlsDuration)
	case c.tlsStreams < 1 || c.tlsStreams > 64 || c.tlsWorkers < 1 || c.tlsWorkers > 256:
		return c, errors.New("-tls-streams want 1-64, -tls-workers 1-256")
	}
	return c, nil
}

func run(args []string) int {
	cfg, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()
	ps := &procs{}
	defer ps.stopAll() // runs on success, error and signal alike
	if err := bench(ctx, cfg, ps); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// signalContext is done on SIGINT, SIGTERM or SIGHUP, and, when this
// program runs under `go run`, when the go command dies. The go command
// ignores SIGINT (a terminal sends that to the whole group) but does not
// pass SIGTERM on: a SIGTERM to `go run ./bench` kills it alone and would
// leave the harness, every proxy it started and its wrk running on. So
// the kernel is asked to send the harness SIGTERM when that parent dies
// (PR_SET_PDEATHSIG). Only under the go command: a harness built and
// started with nohup must outlive the shell that started it.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	ppid := os.Getppid()
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid)); err != nil || strings.TrimSpace(string(comm)) != "go" {
		return ctx, stop
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		logf("PR_SET_PDEATHSIG: %v: a SIGTERM to `go run` will not reach the harness", errno)
		return ctx, stop
	}
	if os.Getppid() != ppid { // the go command died before the kernel was asked
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
	return ctx, stop
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 32 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("not inside the gatehouse module (no go.mod above the working directory)")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func bench(ctx context.Context, cfg config, ps *procs) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(root, "bench", "results", "latest.md")
	}
	needs := []need{{"wrk", onPath("wrk")}}
	if cfg.h2 {
		needs = append(needs, need{"nghttp2-client", onPath("h2load")})
	}
	if slices.Contains(cfg.targets, "nginx") {
		needs = append(needs, need{"nginx", onPath("nginx")})
		if cfg.tls {
			needs = append(needs, need{"libnginx-mod-stream", fileExists(nginxStreamModule)})
		}
	}
	if slices.Contains(cfg.targets, "haproxy") {
		needs = append(needs, need{"haproxy", onPath("haproxy")})
	}
	if err := ensureTools(ctx, needs, cfg.install); err != nil {
		return err
	}
	limit, err := raiseNoFile(uint64(2*cfg.idle + 8192))
	if err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if cfg.idle > 0 && limit < uint64(cfg.idle+2048) {
		logf("RLIMIT_NOFILE is %d: idle test cut to %d connections", limit, int(limit)-2048)
		cfg.idle = max(0, int(limit)-2048)
	}

	dir, err := os.MkdirTemp("", "gatehouse-bench-")
	if err != nil {
		return err
	}
	if cfg.keep {
		logf("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // nginx workers run as nobody
		return err
	}
	rep := newReport(cfg, root)

	e := &env{dir: dir, ps: ps, cores: runtime.NumCPU(), maxConns: cfg.idle + cfg.conns + 1024, noFile: int(limit)}
	if cfg.peerFields {
		e.peerFields = peerRateFields
	}
	certFile, keyFile, roots, err := writeCert(dir)
	if err != nil {
		return err
	}
	e.roots = roots
	e.certFile, e.keyFile = certFile, keyFile

	// gatehouse first: the backend needs its bus to announce on (each
	// build's, in an A/B run).
	ghs := map[string]*target{}
	var buses []string
	for _, name := range []string{"gatehouse", targetB} {
		if !slices.Contains(cfg.targets, name) {
			continue
		}
		bin := cfg.gatehouse
		if name == targetB {
			bin = cfg.gatehouseB
		}
		t, setup := startGatehouseTarget(ctx, e, root, name, bin)
		ghs[name] = t
		if setup != nil {
			buses = append(buses, setup.bus)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The backend gets fresh ports when one was taken, as every target
	// does (withFreshPorts): without it there is no run.
	backend := withFreshPorts(ctx, func() *target {
		t := &target{name: "backend"}
		ba, err := e.addrs(2)
		if err != nil {
			t.err = err
			return t
		}
		e.backendHTTP, e.backendTLS = ba[0], ba[1]
		args := []string{"backend", "-http", e.backendHTTP, "-tls", e.backendTLS, "-cert", certFile, "-key", keyFile}
		if len(buses) > 0 {
			args = append(args, "-bus", strings.Join(buses, ","), "-cluster", benchCluster, "-host-key", e.hostKeyFile(), "-app", "app", "-tls-app", "tls")
		}
		if t.proc, t.err = ps.start(dir, "backend", self, args...); t.err != nil {
			return t
		}
		t.err = waitReady(ctx, t.proc, func() error {
			if err := checkHTTP(e.backendHTTP); err != nil {
				return err
			}
			return checkTLS(e.backendTLS, roots)
		})
		return t
	})
	if backend.err != nil {
		return fmt.Errorf("backend: %w", backend.err)
	}

	targets := map[string]*target{"direct": {name: "direct", http: e.backendHTTP, tls: e.backendTLS, https: e.backendTLS}}
	for name, gh := range ghs {
		if gh.err == nil {
			finishGatehouse(ctx, e, gh)
			if gh.err != nil {
				gh.err = fmt.Errorf("%s target unavailable: %w", name, gh.err)
			}
		}
		targets[name] = gh
	}
	if err := ctx.Err(); err != nil { // interrupted while the backend or gatehouse started
		return err
	}
	if slices.Contains(cfg.targets, "nginx") {
		targets["nginx"] = startNginx(ctx, e)
	}
	if slices.Contains(cfg.targets, "haproxy") {
		targets["haproxy"] = startHAProxy(ctx, e)
	}
	for _, name := range floorTargets {
		if slices.Contains(cfg.targets, name) && ctx.Err() == nil {
			targets[name] = startFloor(ctx, e, self, name)
		}
	}
	if err := ctx.Err(); err != nil { // a target's failure was the interrupt's
		return err
	}
	var order []*target
	for _, name := range cfg.targets {
		t := targets[name]
		if t.err != nil {
			logf("%s: L7 unavailable: %v", name, t.err)
		}
		if t.tlsErr != nil && cfg.tls {
			logf("%s: passthrough unavailable: %v", name, t.tlsErr)
		}
		order = append(order, t)
	}
	rep.targets = order

	if err := measureAll(ctx, cfg, e, order, rep); err != nil {
		return err
	}
	rep.finish()
	md := rep.markdown()
	fmt.Print(md)
	if err := os.MkdirAll(filepath.Dir(cfg.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.out, []byte(md), 0o644); err != nil {
		return err
	}
	logf("wrote %s", cfg.out)
	return nil
}

// startGatehouseTarget starts the gatehouse target name from bin (empty:
// built from the checkout at root).
func startGatehouseTarget(ctx context.Context, e *env, root, name, bin string) (*target, *gatehouseSetup) {
	if bin == "" {
		logf("building ./cmd/gatehouse")
		var err error
		if bin, err = buildGatehouse(ctx, root, e.dir); err != nil {
			return &target{name: name, err: fmt.Errorf("%s target unavailable: %w", name, err)}, nil
		}
	}
	// freeAddr releases each port before gatehouse binds it, and a busy
	// loopback can hand one to another socket in between: that failure
	// gets fresh ports, twice at most.
	for attempt := 1; ; attempt++ {
		t, setup, err := startGatehouse(ctx, e, name, bin)
		if err == nil {
			return t, setup
		}
		if t.proc != nil {
			t.proc.stop(5 * time.Second)
		}
		if attempt < 3 && ctx.Err() == nil && portTaken(err) {
			logf("%s: a port was taken before it bound it; again with fresh ports (%s)", name, oneLine(err))
			continue
		}
		t.err = fmt.Errorf("%s target unavailable: %w", name, err)
		t.http, t.tls = "", ""
		return t, nil
	}
}

// measureAll runs every phase; a phase's failure on one target is
// recorded in the report and the others go on.
func measureAll(ctx context.Context, cfg config, e *env, order []*target, rep *report) error {
	// An interrupt ends the run between steps: nothing more is started,
	// and no step's failure to run is noted as a measurement's.
	if err := ctx.Err(); err != nil {
		return err
	}
	if cfg.idle > 0 {
		for _, t := range order {
			if t.http == "" || t.floor {
				continue
			}
			if t.maxIdle > 0 && cfg.idle > t.maxIdle {
				rep.note("%s idle test skipped: it can hold %d connections with RLIMIT_NOFILE %d (2 FDs each)", t.name, t.maxIdle, e.noFile)
				continue
			}
			logf("idle: %d connections to %s", cfg.idle, t.name)
			p := t.proc
			if p == nil {
				p = e.ps.find("backend")
			}
			r, err := measureIdle(ctx, t.http, p, cfg.idle)
			if err != nil {
				rep.note("%s idle test: %v", t.name, err)
				continue
			}
			rep.idle[t.name] = r
			if err := ctx.Err(); err != nil {
				return err
			}
			// Let the closed connections drain before the next target.
			if err := sleepCtx(ctx, 2*time.Second); err != nil {
				return err
			}
		}
	}
	path := bodyPath(cfg.body)
	fields := requestFields(cfg.headers)
	wo := wrkOpts{conns: cfg.conns, threads: cfg.threads, duration: cfg.duration, backend: e.ps.find("backend"), path: path, fields: fields}
	for _, t := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.http == "" {
			continue
		}
		if err := checkBody(t.http, false, path, cfg.body); err != nil {
			rep.note("%s: %v", t.name, err)
		}
		logf("warm-up: %s", t.name)
		if _, err := runWrk(ctx, wrkOpts{conns: cfg.conns, threads: cfg.threads, duration: 2 * time.Second, path: path, fields: fields}, t.http, t.proc); err != nil {
			rep.note("%s warm-up: %v", t.name, err)
		}
	}
	plain := having(order, func(t *target) bool { return t.http != "" })
	if err := inRounds(ctx, cfg.rounds, plain, func(round int, t *target) {
		logf("L7 round %d/%d: %s", round+1, cfg.rounds, t.name)
		r, err := runWrk(ctx, wo, t.http, t.proc)
		if err != nil {
			rep.note("%s L7 round %d: %v", t.name, round+1, err)
			return
		}
		r.round = round
		rep.l7[t.name] = append(rep.l7[t.name], r)
	}); err != nil {
		return err
	}
	if cfg.l7TLS {
		two := wrkOpts{conns: cfg.conns, threads: cfg.threads, duration: 2 * time.Second, tls: true, path: path, fields: fields}
		for _, t := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			if t.https == "" {
				continue
			}
			if err := checkBody(t.https, true, path, cfg.body); err != nil {
				rep.note("%s over TLS: %v", t.name, err)
			}
			logf("warm-up over TLS: %s", t.name)
			if _, err := runWrk(ctx, two, t.https, t.proc); err != nil {
				rep.note("%s TLS warm-up: %v", t.name, err)
			}
		}
		wt := wo
		wt.tls = true
		overTLS := having(order, func(t *target) bool { return t.https != "" })
		if err := inRounds(ctx, cfg.rounds, overTLS, func(round int, t *target) {
			logf("L7 over TLS round %d/%d: %s", round+1, cfg.rounds, t.name)
			r, err := runWrk(ctx, wt, t.https, t.proc)
			if err != nil {
				rep.note("%s L7 over TLS round %d: %v", t.name, round+1, err)
				return
			}
			r.round = round
			rep.l7tls[t.name] = append(rep.l7tls[t.name], r)
		}); err != nil {
			return err
		}
		if cfg.l7TLSNew {
			if err := inRounds(ctx, cfg.rounds, overTLS, func(round int, t *target) {
				logf("L7 over TLS, new connections, round %d/%d: %s", round+1, cfg.rounds, t.name)
				r := runNewConnections(ctx, t.https, path, cfg.body, cfg.tlsWorkers, cfg.tlsDuration, cfg.x25519, t.proc)
				if r.errors > 0 {
					rep.note("%s L7 over TLS, new connections, round %d: %d errors, first: %s", t.name, round+1, r.errors, r.firstErr)
				}
				r.round = round
				rep.l7new[t.name] = append(rep.l7new[t.name], r)
			}); err != nil {
				return err
			}
			if cfg.perf {
				profileEach(ctx, e, rep, profileNewConn, "connection", overTLS, func(t *target) (int64, error) {
					r := runNewConnections(ctx, t.https, path, cfg.body, cfg.tlsWorkers, cfg.tlsDuration, cfg.x25519, nil)
					return r.handshakes, r.failed()
				})
			}
		}
	}
	if cfg.h2 {
		if err := measureH2(ctx, cfg, order, rep); err != nil {
			return err
		}
		if cfg.perf {
			profileEach(ctx, e, rep, profileH2, "request", having(order, func(t *target) bool { return t.https != "" }), func(t *target) (int64, error) {
				r, err := runH2load(ctx, cfg.conns, cfg.threads, cfg.duration, t.https, path, requestFields(cfg.headers), nil)
				return r.requests, err
			})
		}
	}
	if cfg.perf {
		profileEach(ctx, e, rep, profileL7, "request", having(order, func(t *target) bool { return t.http != "" }), func(t *target) (int64, error) {
			wr, err := runWrk(ctx, wo, t.http, nil)
			return wr.requests, err
		})
	}
	if !cfg.tls {
		return nil
	}
	passthrough := having(order, func(t *target) bool { return t.tls != "" })
	if err := inRounds(ctx, cfg.rounds, passthrough, func(round int, t *target) {
		logf("TLS round %d/%d: %s", round+1, cfg.rounds, t.name)
		dl := runDownload(ctx, t.tls, e.roots, cfg.tlsStreams, cfg.tlsDuration, t.proc)
		hs := runHandshakes(ctx, t.tls, e.roots, cfg.tlsWorkers, cfg.tlsDuration, t.proc)
		for _, x := range []struct {
			what string
			r    tlsResult
		}{{"download", dl}, {"handshakes", hs}} {
			if x.r.errors > 0 {
				rep.note("%s TLS %s round %d: %d errors, first: %s", t.name, x.what, round+1, x.r.errors, x.r.firstErr)
			}
		}
		dl.round, hs.round = round, round
		rep.dl[t.name] = append(rep.dl[t.name], dl)
		rep.hs[t.name] = append(rep.hs[t.name], hs)
	}); err != nil {
		return err
	}
	if cfg.perf {
		// A proxy's cost per new connection (accept, peek, dial, the
		// pipe's set-up and close) is a different profile from its cost
		// per request, so the handshake run gets its own.
		profileEach(ctx, e, rep, profileHandshakes, "connection", passthrough, func(t *target) (int64, error) {
			r := runHandshakes(ctx, t.tls, e.roots, cfg.tlsWorkers, cfg.tlsDuration, nil)
			return r.handshakes, r.failed()
		})
	}
	return ctx.Err()
}

// having returns the targets of ts for which ok holds, in order.
func having(ts []*target, ok func(*target) bool) []*target {
	var out []*target
	for _, t := range ts {
		if ok(t) {
			out = append(out, t)
		}
	}
	return out
}

// inRounds runs f on each target of ts in n rounds, the order rotated each
// round so that no target always goes first and machine drift hits all
// alike. It stops when ctx ends.
func inRounds(ctx context.Context, n int, ts []*target, f func(round int, t *target)) error {
	for round := range n {
		for i := range ts {
			if err := ctx.Err(); err != nil {
				return err
			}
			f(round, ts[(i+round)%len(ts)])
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// measureH2 runs the HTTP/2 rounds: h2load over TLS to each proxy's L7
// TLS listener, one warm-up each, then the rounds interleaved. The direct
// backend speaks HTTP/1.1 only (as the passthrough tests need), so it has
// no row.
func measureH2(ctx context.Context, cfg config, order []*target, rep *report) error {
	h2 := having(order, func(t *target) bool { return t.https != "" && t.proc != nil })
	path := bodyPath(cfg.body)
	for _, t := range h2 {
		if err := ctx.Err(); err != nil {
			return err
		}
		logf("warm-up over HTTP/2: %s", t.name)
		if _, err := runH2load(ctx, cfg.conns, cfg.threads, 2*time.Second, t.https, path, requestFields(cfg.headers), t.proc); err != nil {
			rep.note("%s HTTP/2 warm-up: %v", t.name, err)
		}
	}
	return inRounds(ctx, cfg.rounds, h2, func(round int, t *target) {
		logf("L7 over HTTP/2 round %d/%d: %s", round+1, cfg.rounds, t.name)
		r, err := runH2load(ctx, cfg.conns, cfg.threads, cfg.duration, t.https, path, requestFields(cfg.headers), t.proc)
		if err != nil {
			rep.note("%s L7 over HTTP/2 round %d: %v", t.name, round+1, err)
			return
		}
		r.round = round
		rep.h2[t.name] = append(rep.h2[t.name], r)
	})
}
