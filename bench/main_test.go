//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// signalHelperEnv makes the test binary, re-executed, the harness's signal
// handling alone (TestHelperSignalContext): it writes "ready" into the
// file the variable names, and then "stopped" when signalContext ends, or
// "timeout" after 5 s.
const signalHelperEnv = "BENCH_TEST_SIGNAL_HELPER"

func TestHelperSignalContext(t *testing.T) {
	out := os.Getenv(signalHelperEnv)
	if out == "" {
		t.Skip("helper process for TestStopsWhenGoRunDies")
	}
	ctx, stop := signalContext()
	defer stop()
	if err := os.WriteFile(out, []byte("ready"), 0o644); err != nil {
		os.Exit(2)
	}
	select {
	case <-ctx.Done():
		os.WriteFile(out, []byte("stopped"), 0o644)
	case <-time.After(5 * time.Second):
		os.WriteFile(out, []byte("timeout"), 0o644)
	}
	os.Exit(0)
}

// TestStopsWhenGoRunDies checks that the harness stops (and so stops what
// it started) when `go run ./bench`, its parent, is killed: the go command
// does not pass SIGTERM on to the program it runs, so a SIGTERM to it
// would otherwise leave the harness, its proxies and its wrk running with
// nobody to see them. The parent here is /bin/sh under the name "go".
func TestStopsWhenGoRunDies(t *testing.T) {
	if os.Getenv(signalHelperEnv) != "" {
		t.Skip("in the helper")
	}
	dir := t.TempDir()
	goCmd := filepath.Join(dir, "go")
	if err := os.Symlink("/bin/sh", goCmd); err != nil {
		t.Skip(err)
	}
	out := filepath.Join(dir, "state")
	pidFile := filepath.Join(dir, "pid")
	parent := exec.Command(goCmd, "-c", `"$1" -test.run='^TestHelperSignalContext$' & echo $! > "$2"; wait`, "sh", os.Args[0], pidFile)
	parent.Env = append(os.Environ(), signalHelperEnv+"="+out)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { // the helper ends on its own after 5 s; end it now if it is there
		if b, err := os.ReadFile(pidFile); err == nil {
			var pid int
			if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()
	state := func() string { b, _ := os.ReadFile(out); return string(b) }
	waitState := func(want string) string {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if s := state(); s == want || s == "timeout" {
				return s
			}
			time.Sleep(20 * time.Millisecond)
		}
		return state()
	}
	if s := waitState("ready"); s != "ready" {
		t.Fatalf("helper never ready: %q", s)
	}
	_ = parent.Process.Kill() // `go run` killed: SIGKILL, as after a SIGTERM it does not pass on
	_ = parent.Wait()
	if s := waitState("stopped"); s != "stopped" {
		t.Fatalf("after its parent, the go command, died the harness was %q, want stopped", s)
	}
}

// TestInterruptedRunMeasuresNothingMore checks that once the run is
// interrupted (its context done) no phase starts: no warm-up, no check,
// no round, and no note of a failure the interrupt itself caused.
func TestInterruptedRunMeasuresNothingMore(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(make([]byte, smallBody))
	}))
	defer backend.Close()
	cfg, err := parseFlags([]string{"-rounds", "1", "-duration", "1s", "-idle", "10", "-tls=false", "-l7-tls=false", "-h2=false", "-targets", "direct"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // SIGINT before the measuring began
	ps := &procs{}
	defer ps.stopAll()
	e := &env{dir: t.TempDir(), ps: ps}
	// The direct target's process is the backend's (its memory and CPU).
	if _, err := ps.start(e.dir, "backend", "/bin/sleep", "30"); err != nil {
		t.Fatal(err)
	}
	direct := &target{name: "direct", http: backend.Listener.Addr().String()}
	rep := newReport(cfg, t.TempDir())
	err = measureAll(ctx, cfg, e, []*target{direct}, rep)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("measureAll: %v, want context.Canceled", err)
	}
	if len(rep.notes) > 0 || hits.Load() > 0 {
		t.Errorf("after the interrupt: %d requests to the target, notes %q", hits.Load(), rep.notes)
	}
}
