package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		out, _ := exec.Command("ps", "-e", "-o", "pid=,pgid=").Output()
		var in []string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[1] == strconv.Itoa(pgid) {
				in = append(in, f[0])
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
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Fatalf("5 s after the harness died, nginx's group still holds %v", workers())
}
