package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestServeSurvivesAClosedLogPipe: serve whose log goes to a pipe (`serve
// 2>&1 | logger`, a container runtime's shim) goes on serving when the
// pipe's reader goes away. Go's runtime kills a process that writes to a
// broken pipe on fd 2 with SIGPIPE unless it is ignored: the next log
// line ended the gateway at once, with no drain, every connection cut.
// nginx ignores SIGPIPE for the same reason. It runs serve as a child
// process, as the signal kills the whole process.
func TestServeSurvivesAClosedLogPipe(t *testing.T) {
	if args := os.Getenv("SERVE_CHILD_ARGS"); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		err := run(ctx, strings.Split(args, "\x1f"), io.Discard, os.Stderr)
		os.Exit(exitCode(err, os.Stderr))
	}
	mgmt := testutil.FreeAddr(t)
	args := []string{"serve", "-data", t.TempDir(), "-http=", "-https=", "-dns=",
		"-management", mgmt, "-bus-listen", "127.0.0.1:0"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeSurvivesAClosedLogPipe$")
	cmd.Env = append(os.Environ(), "SERVE_CHILD_ARGS="+strings.Join(args, "\x1f"))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var logs testutil.SyncBuffer
	go func() { _, _ = io.Copy(&logs, r) }() // the log's reader, until closed below
	answers := func(path string) bool {
		res, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + mgmt + path)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	}
	testutil.WaitFor(t, 30*time.Second, func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve ended: %v\n%s", err, logs.String())
		default:
		}
		return answers("/readyz")
	}, "serve never became ready")
	r.Close() // the log's reader is gone
	// A log line now: serve logs each SIGHUP.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("serve died writing its log to a closed pipe: %v", err)
	case <-time.After(time.Second):
	}
	if !answers("/healthz") {
		t.Fatal("serve stopped answering after its log pipe closed")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatalf("serve after SIGTERM, its log pipe closed: %v, want exit 0", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
}

// TestHostSurvivesAClosedLogPipe: the host sidecar, whose log goes to a
// pipe as serve's may, goes on serving its app when the pipe's reader
// goes away and it next logs (here: its bus stops). Before, the runtime's
// SIGPIPE ended it at that line, and every request to the app through it
// with it. Run as a child process, as the signal kills the whole process.
func TestHostSurvivesAClosedLogPipe(t *testing.T) {
	if args := os.Getenv("HOST_CHILD_ARGS"); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		err := run(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		os.Exit(exitCode(err, os.Stderr))
	}
	ns := testutil.StartBus(t)
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.WriteKey(keyFile, k); err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer upstream.Close()
	addr := testutil.FreeAddr(t)
	args := []string{"host", "-bus", ns.ClientURL(), "-cluster", "c1", "-id", "side-1", "-key", keyFile,
		"-app", "hello", "-addr", addr, "-upstream", upstream.URL}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostSurvivesAClosedLogPipe$")
	cmd.Env = append(os.Environ(), "HOST_CHILD_ARGS="+strings.Join(args, "\x1f"))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var logs testutil.SyncBuffer
	go func() { _, _ = io.Copy(&logs, r) }() // the log's reader, until closed below
	testutil.WaitFor(t, 30*time.Second, func() bool {
		return strings.Contains(stdout.String(), "gatehouse host side-1: serving") && ns.NumClients() > 0
	}, "the sidecar never served nor reached its bus")
	r.Close()     // the log's reader is gone
	ns.Shutdown() // a log line now: the bus unreachable
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("the sidecar died writing its log to a closed pipe: %v", err)
	case <-time.After(3 * time.Second):
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("the sidecar stopped listening after its log pipe closed: %v", err)
	}
	c.Close()
}
