//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs owns every process the harness starts. stopAll signals each by
// its PID (SIGTERM, then SIGKILL after a grace period) and then its
// process group, which each child leads, so an nginx whose master died
// cannot leave workers behind. Safe for concurrent use.
type procs struct {
	mu   sync.Mutex
	list []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done closes
}

// start runs path args in its own process group, output to dir/name.log.
func (ps *procs) start(dir, name, path string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSignal(name)}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// deathSignal is what the kernel sends a child when the harness dies
// without stopping it (SIGKILL, a crash): SIGKILL, but SIGTERM for nginx,
// whose master is the only child with children of its own. Killed
// outright, the master leaves its workers serving and holding their
// ports; on SIGTERM it stops them (and SIGKILLs any that linger) and then
// exits.
func deathSignal(name string) syscall.Signal {
	if name == "nginx" {
		return syscall.SIGTERM
	}
	return syscall.SIGKILL
}

// dieWithHarness is for the load generators (wrk, h2load), which run in
// the harness's group and are stopped by their context: a harness killed
// outright ends no context, and they would load the machine for the rest
// of their run (up to -duration, 5 min).
func dieWithHarness() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// find returns the newest process started under name, or nil.
func (ps *procs) find(name string) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i := len(ps.list) - 1; i >= 0; i-- {
		if ps.list[i].name == name {
			return ps.list[i]
		}
	}
	return nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}

// stop ends one process: SIGTERM, up to grace for it to exit, then
// SIGKILL; then SIGKILL to its group for any child it left.
func (p *proc) stop(grace time.Duration) {
	pid := p.pid()
	if ok, _ := p.exited(); !ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
			}
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // the group it led; ESRCH if empty
}

// stopAll stops every process, newest first.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop(5 * time.Second)
	}
}

// clkTck is the kernel's USER_HZ, the unit of /proc/PID/stat times; 100 on
// every Linux architecture Go supports.
const clkTck = 100

// tree returns pid and its direct children (nginx's workers).
func tree(pid int) []int {
	out := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		if f, ok := statFields(c); ok && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// statFields returns /proc/PID/stat's fields after the command name,
// starting with state (field 3), so f[1] is ppid and f[11], f[12] are
// utime and stime.
func statFields(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// cpuMeter starts counting p's CPU seconds; the func it returns reads the
// count so far (always 0 for a nil p).
func cpuMeter(p *proc) func() float64 {
	if p == nil {
		return func() float64 { return 0 }
	}
	before := cpuSeconds(p.pid())
	return func() float64 { return cpuSeconds(p.pid()) - before }
}

// cpuSeconds is user+system CPU time of pid and its children.
func cpuSeconds(pid int) float64 {
	var ticks int64
	for _, p := range tree(pid) {
		f, ok := statFields(p)
		if !ok || len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return float64(ticks) / clkTck
}

// rssBytes is VmRSS of pid and its children.
func rssBytes(pid int) int64 {
	var total int64
	for _, p := range tree(pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest) // "1234 kB"
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					total += kb << 10
				}
			}
		}
	}
	return total
}

// raiseNoFile lifts RLIMIT_NOFILE so the harness can hold want sockets;
// children inherit the new limits. It returns the soft limit in force.
func raiseNoFile(want uint64) (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Max < want && os.Geteuid() == 0 {
		// Root may raise the hard limit too, unless a container took
		// CAP_SYS_RESOURCE away; then the hard limit it has must do.
		up := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			r = up
		}
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return r.Cur, nil
}

// permanent marks a check error that no amount of waiting will fix.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// waitFor polls check every 100 ms until it returns nil or a permanent
// error, the timeout passes or ctx ends, and returns check's last error.
func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
