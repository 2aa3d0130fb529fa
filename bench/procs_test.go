//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nginxHelperEnv makes the test binary, re-executed, a harness that starts
// nginx the way startNginx does and then waits to be killed
// (TestHelperStartNginx); the variable names its work dir.
const nginxHelperEnv = "BENCH_TEST_NGINX_HELPER"

func TestHelperStartNginx(t *testing.T) {
	dir := os.Getenv(nginxHelperEnv)
	if dir == "" {
		t.Skip("helper process for TestNginxWorkersDieWithTheHarness")
	}
	addr, err := freeAddr()
	if err != nil {
		os.Exit(2)
	}
	conf := filepath.Join(dir, "nginx.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`daemon off;
master_process on;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log error;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server { listen %[2]s; return 404; }
}
`, dir, addr)), 0o644)
	bin, _ := exec.LookPath("nginx")
	ps := &procs{}
	p, err := ps.start(dir, "nginx", bin, "-c", conf, "-p", dir)
	if err != nil {
		os.Exit(2)
	}
	os.WriteFile(filepath.Join(dir, "master"), []byte(strconv.Itoa(p.pid())), 0o644)
	time.Sleep(20 * time.Second) // killed long before
	ps.stopAll()
	os.Exit(0)
}

// TestNginxWorkersDieWithTheHarness kills a harness that started nginx
// (SIGKILL: no deferred stop runs) and wants no nginx process left: the
// kernel's signal on the harness's death reaches only nginx's master, and
// a master killed outright leaves its workers running, serving and
// holding their ports.
func TestNginxWorkersDieWithTheHarness(t *testing.T) {
	if os.Getenv(nginxHelperEnv) != "" {
		t.Skip("in the helper")
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx not installed")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // workers may run as nobody
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperStartNginx$")
	helper.Env = append(os.Environ(), nginxHelperEnv+"="+dir)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	// nginx's group is its master's PID (procs.start: Setpgid).
	var pgid int
	workers := func() []string {
		var in []string
		for _, p := range livePS() {
			if p.pgid == pgid {
				in = append(in, strconv.Itoa(p.pid))
			}
		}
		return in
	}
	deadline := time.Now().Add(10 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "master")); err == nil && pgid == 0 {
			pgid, _ = strconv.Atoi(string(b))
		}
		if pgid > 0 && len(workers()) >= 3 {
			break
		}
	}
	if pgid == 0 || len(workers()) < 3 {
		t.Fatalf("nginx master and two workers never ran (group %d: %v)", pgid, workers())
	}
	defer syscall.Kill(-pgid, syscall.SIGKILL) // whatever the harness left
	helper.Process.Kill()
	helper.Wait()
	for deadline = time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(workers()) == 0 {
			return
		}
	}
	t.Fatalf("5 s after the harness died, nginx's group still holds %v", workers())
}

// wrkHelperEnv makes the test binary, re-executed, a harness in a 20 s wrk
// run against a loopback listener (TestHelperRunWrk).
const wrkHelperEnv = "BENCH_TEST_WRK_HELPER"

func TestHelperRunWrk(t *testing.T) {
	if os.Getenv(wrkHelperEnv) == "" {
		t.Skip("helper process for TestWrkDiesWithTheHarness")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	runWrk(context.Background(), wrkOpts{conns: 1, threads: 1, duration: 20 * time.Second}, ln.Addr().String(), nil)
	os.Exit(0)
}

// TestWrkDiesWithTheHarness kills a harness in a wrk run (SIGKILL: no
// context ends the run) and wants wrk gone, not loading the machine for
// the rest of its -d.
func TestWrkDiesWithTheHarness(t *testing.T) {
	if os.Getenv(wrkHelperEnv) != "" {
		t.Skip("in the helper")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk not installed")
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperRunWrk$")
	helper.Env = append(os.Environ(), wrkHelperEnv+"=1")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	children := func() []int {
		var pids []int
		for _, p := range livePS() {
			if p.ppid == helper.Process.Pid && p.comm == "wrk" {
				pids = append(pids, p.pid)
			}
		}
		return pids
	}
	var wrk []int
	for deadline := time.Now().Add(10 * time.Second); len(wrk) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		wrk = children()
	}
	if len(wrk) == 0 {
		t.Fatal("wrk never ran")
	}
	defer func() {
		for _, pid := range wrk {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	helper.Process.Kill()
	helper.Wait()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !slices.ContainsFunc(livePS(), func(p psEntry) bool { return p.pid == wrk[0] }) {
			return
		}
	}
	t.Fatalf("3 s after the harness died, wrk (PID %d) still runs", wrk[0])
}

type psEntry struct {
	pid, ppid, pgid int
	comm            string
}

// livePS lists the machine's processes that have not exited: a zombie
// (killed, not yet reaped by whoever adopted it) is gone for these tests.
func livePS() []psEntry {
	out, _ := exec.Command("ps", "-e", "-o", "pid=,ppid=,pgid=,stat=,comm=").Output()
	var ps []psEntry
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || strings.HasPrefix(f[3], "Z") {
			continue
		}
		var e psEntry
		e.pid, _ = strconv.Atoi(f[0])
		e.ppid, _ = strconv.Atoi(f[1])
		e.pgid, _ = strconv.Atoi(f[2])
		e.comm = f[4]
		ps = append(ps, e)
	}
	return ps
}
