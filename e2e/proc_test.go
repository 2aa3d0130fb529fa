package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// bin is the gatehouse binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

// buildAndRun builds ./cmd/gatehouse into a temporary directory (with
// -race when the tests themselves run with it), runs the tests and removes
// the directory.
func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gatehouse-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "gatehouse")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/gatehouse")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = ".." // the module root; tests run in e2e/
	began := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	// Shown with -v or on failure only, like any test output.
	fmt.Printf("e2e: go %s: %s\n", strings.Join(args[3:], " "), time.Since(began).Round(time.Millisecond))
	code := m.Run()
	if code == 0 {
		// Every process, load worker, upstream and client the tests
		// started must be gone.
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutines left behind:", err)
			return 1
		}
	}
	return code
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// proc is one running gatehouse process. It runs in its own process group
// and is killed (SIGKILL to the group) when the test ends, failed or not;
// its combined stdout and stderr go to the test log if the test failed.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result; read after done
}

// start runs `gatehouse args...` until the test ends.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, name, childEnv(), args...)
}

// startEnv is start with env as the process's whole environment.
func startEnv(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: newTailBuffer(1 << 20), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("%s (pid %d) still running 10s after SIGKILL", name, p.cmd.Process.Pid)
			}
		}
		if p.out.raced.Load() {
			t.Errorf("%s (built with -race) reported a data race", name)
		}
		if t.Failed() {
			t.Logf("---- %s output (last 150 lines but access log lines) ----\n%s", name, p.out.lastLines(150))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// sigterm sends SIGTERM to the process itself.
func (p *proc) sigterm(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
}

// wait waits up to timeout for the process to exit and returns its exit
// code, or fails the test.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

// gatehouse runs a short-lived gatehouse command and returns its stdout,
// failing the test (with stderr) on a non-zero exit.
func gatehouse(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := runOnce(t, args...)
	if code != 0 {
		t.Fatalf("gatehouse %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
	}
	return stdout
}

// runOnce runs a gatehouse command to completion (at most 30 s).
func runOnce(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		code = ee.ExitCode()
	default:
		t.Fatalf("gatehouse %s: %v\n%s", strings.Join(args, " "), err, e.String())
	}
	return o.String(), e.String(), code
}

// childEnv is the environment of every gatehouse child: ours, minus any
// GATEHOUSE_* variable (the tests say everything with flags), with the
// race runtime told not to sleep a second at exit (its default), which
// would add a second to every keygen and ctl and to every drain measured.
func childEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "GATEHOUSE_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GORACE="+gorace)
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago (held together, then released, so they differ from each other).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// tailBuffer keeps the last max bytes written to it and notes a race
// detector report; safe for concurrent use.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	b     []byte
	raced atomic.Bool
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("WARNING: DATA RACE")) {
		b.raced.Store(true)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if over := len(b.b) - b.max; over > 0 {
		b.b = append(b.b[:0], b.b[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

// lastLines returns the last n lines written, leaving out the gateway's
// access log lines (thousands under load), which it counts instead.
func (b *tailBuffer) lastLines(n int) string {
	var lines []string
	access := 0
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			access++
			continue
		}
		lines = append(lines, l)
	}
	if access > 0 {
		lines = append(lines, fmt.Sprintf("(%d access log lines left out)", access))
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
