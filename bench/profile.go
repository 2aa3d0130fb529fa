package main

import (
	"context"
	"fmt"
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
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil { // perf attaching
		rec.stop(5 * time.Second)
		return "", err
	}
	_, werr := runWrk(ctx, o, t.http, nil)
	_ = syscall.Kill(rec.pid(), syscall.SIGINT) // perf writes its data on SIGINT
	select {
	case <-rec.done:
	case <-time.After(30 * time.Second):
		rec.stop(time.Second)
	}
	if werr != nil {
		return "", werr
	}
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
	return strings.Join(lines, "\n"), nil
}
