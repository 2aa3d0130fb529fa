package main

import (
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

// profileRun records where a proxy spends its CPU during one extra wrk
// run, with perf sampling the process tree (cpu-clock, so it works in a
// VM without hardware counters), and returns the hottest symbols with
// their inclusive share (children counted), so a Go call path shows up.
func profileRun(ctx context.Context, e *env, o wrkOpts, t *target) (string, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return "", fmt.Errorf("perf not installed (Debian package linux-perf)")
	}
	var pids []string
	for _, p := range tree(t.proc.pid()) {
		pids = append(pids, strconv.Itoa(p))
	}
	data := filepath.Join(e.dir, "perf-"+t.name+".data")
	rec, err := e.ps.start(e.dir, "perf-"+t.name, perf, "record", "-e", "cpu-clock", "-F", "999", "-g",
		"-p", strings.Join(pids, ","), "-o", data)
	if err != nil {
		return "", err
	}
	// A second perf counts system calls and context switches over the same
	// run: a proxy's CPU per request is mostly kernel work, so how many
	// times it enters the kernel per request is the first thing to compare.
	stat := filepath.Join(e.dir, "perf-stat-"+t.name+".csv")
	st, err := e.ps.start(e.dir, "perf-stat-"+t.name, perf, "stat", "-x", ",", "-o", stat,
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
	wr, werr := runWrk(ctx, o, t.http, nil)
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
	counts := perRequest(stat, wr.requests)
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
}

// perRequest reads perf stat's CSV and returns one line: each event's
// count divided by the requests wrk made while perf counted.
func perRequest(path string, requests int64) string {
	b, err := os.ReadFile(path)
	if err != nil || requests <= 0 {
		return fmt.Sprintf("per request: no counts (%v)", err)
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
		parts = append(parts, fmt.Sprintf("%s %.2f", name, n/float64(requests)))
	}
	return "per request: " + strings.Join(parts, ", ")
}
