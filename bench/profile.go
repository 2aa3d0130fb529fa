//go:build linux

package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The profiled phases, each a section of the report.
const (
	profileL7         = ""           // one more L7 keep-alive wrk run
	profileNewConn    = "newconn"    // one more L7-over-TLS new-connection run
	profileHandshakes = "handshakes" // one more passthrough handshake run
	profileH2         = "h2"         // one more L7-over-HTTP/2 h2load run
)

// profileEach profiles each target of ts that has a process during one
// more run of load, into rep under phase; a failure is a note.
func profileEach(ctx context.Context, e *env, rep *report, phase, unit string, ts []*target, load func(*target) (int64, error)) {
	for _, t := range ts {
		if t.proc == nil || ctx.Err() != nil {
			continue
		}
		logf("perf %s: %s", cmp.Or(phase, "l7"), t.name)
		prof, err := profileRun(ctx, e, t, phase, unit, func() (int64, error) { return load(t) })
		if err != nil {
			rep.note("%s %s profile: %v", t.name, cmp.Or(phase, "L7"), err)
			continue
		}
		if rep.profiles[phase] == nil {
			rep.profiles[phase] = map[string]string{}
		}
		rep.profiles[phase][t.name] = prof
	}
}

// profileRun records where a proxy spends its CPU during one extra run of
// load, with perf sampling the process tree (cpu-clock, so it works in a
// VM without hardware counters), and returns the kernel entries per unit
// of work (load returns how many units it did: requests, connections)
// and the hottest symbols with their inclusive share (children counted),
// so a Go call path shows up. phase names the data files ("" for the L7
// run, whose files keep their old names).
func profileRun(ctx context.Context, e *env, t *target, phase, unit string, load func() (int64, error)) (string, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return "", fmt.Errorf("perf not installed (Debian package linux-perf)")
	}
	var pids []string
	for _, p := range tree(t.proc.pid()) {
		pids = append(pids, strconv.Itoa(p))
	}
	name := t.name
	if phase != "" {
		name += "-" + phase
	}
	data := filepath.Join(e.dir, "perf-"+name+".data")
	rec, err := e.ps.start(e.dir, "perf-"+name, perf, "record", "-e", "cpu-clock", "-F", "999", "-g",
		"-p", strings.Join(pids, ","), "-o", data)
	if err != nil {
		return "", err
	}
	// A second perf counts system calls and context switches over the same
	// run: a proxy's CPU per request is mostly kernel work, so how many
	// times it enters the kernel per request is the first thing to compare.
	stat := filepath.Join(e.dir, "perf-stat-"+name+".csv")
	st, err := e.ps.start(e.dir, "perf-stat-"+name, perf, "stat", "-x", ",", "-o", stat,
		"-e", strings.Join(statEvents, ","), "-p", strings.Join(pids, ","))
	if err != nil {
		rec.stop(5 * time.Second)
		return "", err
	}
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil { // perf attaching
		rec.stop(5 * time.Second)
		st.stop(5 * time.Second)
		return "", err
	}
	units, werr := load()
	for _, p := range []*proc{rec, st} {
		_ = syscall.Kill(p.pid(), syscall.SIGINT) // perf writes its data on SIGINT
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.stop(time.Second)
		}
	}
	if werr != nil {
		return "", werr
	}
	counts := perUnit(stat, unit, units)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(rctx, perf, "report", "-i", data, "--stdio", "--children",
		"--sort", "dso,symbol", "-g", "none", "--percent-limit", "3").Output()
	if err != nil {
		return "", fmt.Errorf("perf report: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && strings.Contains(l, "%") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		if len(lines) == 40 {
			break
		}
	}
	return counts + "\n\n" + strings.Join(lines, "\n"), nil
}

// statEvents are the kernel entries counted per request. The syscall
// tracepoints need tracefs; where it is missing perf prints "<not
// supported>" and the line says so.
var statEvents = []string{
	"raw_syscalls:sys_enter", "context-switches",
	"syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom",
	"syscalls:sys_enter_write", "syscalls:sys_enter_writev", "syscalls:sys_enter_sendto",
	"syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait", "syscalls:sys_enter_epoll_ctl",
	"syscalls:sys_enter_futex", "syscalls:sys_enter_nanosleep",
	// What a new connection costs besides its reads and writes.
	"syscalls:sys_enter_accept4", "syscalls:sys_enter_connect", "syscalls:sys_enter_setsockopt",
	"syscalls:sys_enter_getsockopt", "syscalls:sys_enter_splice", "syscalls:sys_enter_pipe2",
	"syscalls:sys_enter_close", "syscalls:sys_enter_shutdown",
}

// perUnit reads perf stat's CSV and returns one line: each event's count
// divided by the units of work (requests, connections) done while perf
// counted.
func perUnit(path, unit string, units int64) string {
	b, err := os.ReadFile(path)
	if err != nil || units <= 0 {
		return fmt.Sprintf("per %s: no counts (%v)", unit, err)
	}
	var parts []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ",")
		if len(f) < 3 || strings.HasPrefix(l, "#") {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(f[2], "syscalls:sys_enter_"), "raw_syscalls:sys_enter")
		if name == "" {
			name = "all syscalls"
		}
		n, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			parts = append(parts, name+" "+f[0])
			continue
		}
		if n == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", name, n/float64(units)))
	}
	return "per " + unit + ": " + strings.Join(parts, ", ")
}
