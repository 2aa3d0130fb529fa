package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// childArgsEnv carries a child's command line, its words split by 0x1f
// (an environment value holds no NUL). Not GATEHOUSE_*: serve refuses a
// variable of that prefix it does not know.
const childArgsEnv = "CHILD_ARGS"

// logPipeChild is this test binary run again, as a child process, to run
// one gatehouse command whose stderr is a pipe the test reads until it
// closes its end: SIGPIPE kills a whole process, so it cannot be tested
// in this one.
type logPipeChild struct {
	cmd  *exec.Cmd
	r    *os.File
	logs testutil.SyncBuffer
	done chan struct{}
	err  error // Wait's, once done is closed
}

// startLogPipeChild runs args (a gatehouse command line) in a child that
// reruns t's test, its stdout to stdout (nil: discarded). The test must
// call runIfChild first. Cleanup kills the child.
func startLogPipeChild(t *testing.T, stdout io.Writer, args ...string) *logPipeChild {
	t.Helper()
	c := &logPipeChild{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$")
	c.cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(args, "\x1f"))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.r = r
	c.cmd.Stdout, c.cmd.Stderr = stdout, w
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	go func() { _, _ = io.Copy(&c.logs, r) }() // the log's reader, until closeLog
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// runIfChild runs the command a startLogPipeChild parent passed, and
// exits with its code; in the parent it does nothing.
func runIfChild() {
	args := os.Getenv(childArgsEnv)
	if args == "" {
		return
	}
	ctx, stop := stopContext() // main's: a second signal kills
	err := run(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// closeLog closes the test's end of the child's log pipe: the reader is gone.
func (c *logPipeChild) closeLog() { c.r.Close() }

// exited reports whether the child has ended within d, and how.
func (c *logPipeChild) exited(d time.Duration) (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	case <-time.After(d):
		return false, nil
	}
}

// TestServeSurvivesAClosedLogPipe: serve whose log goes to a pipe (`serve
// 2>&1 | logger`, a container runtime's shim) goes on serving when the
// pipe's reader goes away. Go's runtime kills a process that writes to a
// broken pipe on fd 2 with SIGPIPE unless it is ignored: the next log
// line ended the gateway at once, with no drain, every connection cut.
// nginx ignores SIGPIPE for the same reason.
func TestServeSurvivesAClosedLogPipe(t *testing.T) {
	runIfChild()
	mgmt := testutil.FreeAddr(t)
	c := startLogPipeChild(t, nil, "serve", "-data", t.TempDir(), "-http=", "-https=", "-dns=",
		"-management", mgmt, "-bus-listen", "127.0.0.1:0")
	answers := func(path string) bool {
		res, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + mgmt + path)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	}
	testutil.WaitFor(t, 30*time.Second, func() bool {
		if gone, err := c.exited(0); gone {
			t.Fatalf("serve ended: %v\n%s", err, c.logs.String())
		}
		return answers("/readyz")
	}, "serve never became ready")
	c.closeLog()
	// A log line now: serve logs each SIGHUP.
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if gone, err := c.exited(time.Second); gone {
		t.Fatalf("serve died writing its log to a closed pipe: %v", err)
	}
	if !answers("/healthz") {
		t.Fatal("serve stopped answering after its log pipe closed")
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gone, err := c.exited(40 * time.Second)
	if !gone {
		t.Fatal("serve did not exit after SIGTERM")
	}
	if err != nil {
		t.Fatalf("serve after SIGTERM, its log pipe closed: %v, want exit 0", err)
	}
}

// TestHostSurvivesAClosedLogPipe: the host sidecar, whose log goes to a
// pipe as serve's may, goes on serving its app when the pipe's reader
// goes away and it next logs (here: its bus stops). Before, the runtime's
// SIGPIPE ended it at that line, and every request to the app through it
// with it.
func TestHostSurvivesAClosedLogPipe(t *testing.T) {
	runIfChild()
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
	var stdout testutil.SyncBuffer
	c := startLogPipeChild(t, &stdout, "host", "-bus", ns.ClientURL(), "-cluster", "c1", "-id", "side-1", "-key", keyFile,
		"-app", "hello", "-addr", addr, "-upstream", upstream.URL)
	testutil.WaitFor(t, 30*time.Second, func() bool {
		return strings.Contains(stdout.String(), "gatehouse host side-1: serving") && ns.NumClients() > 0
	}, "the sidecar never served nor reached its bus")
	c.closeLog()
	ns.Shutdown() // a log line now: the bus unreachable
	if gone, err := c.exited(3 * time.Second); gone {
		t.Fatalf("the sidecar died writing its log to a closed pipe: %v", err)
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("the sidecar stopped listening after its log pipe closed: %v", err)
	}
	conn.Close()
}

// TestServeSecondSignalEndsDrainDelay: a second SIGTERM while the drain
// is delayed (drain_delay) ends serve at once, killed by that signal, as
// one during the drain does: an operator or an orchestrator that will not
// wait is not made to. The child runs main's signal wiring.
func TestServeSecondSignalEndsDrainDelay(t *testing.T) {
	runIfChild()
	mgmt := testutil.FreeAddr(t)
	c := startLogPipeChild(t, nil, "serve", "-data", t.TempDir(), "-http", "127.0.0.1:0", "-https=", "-dns=",
		"-management", mgmt, "-bus-listen", "127.0.0.1:0", "-drain-delay", "5m")
	readyz := func() int {
		res, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + mgmt + "/readyz")
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	testutil.WaitFor(t, 30*time.Second, func() bool {
		if gone, err := c.exited(0); gone {
			t.Fatalf("serve ended: %v\n%s", err, c.logs.String())
		}
		return readyz() == 200
	}, "serve never became ready")
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "edge: drain delayed:") && readyz() == 503
	}, "no delayed drain after the first SIGTERM")
	if gone, err := c.exited(0); gone {
		t.Fatalf("serve ended in its drain delay: %v", err)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gone, err := c.exited(10 * time.Second)
	if !gone {
		t.Fatal("serve still runs 10s after a second SIGTERM in a 5m drain delay")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("serve after a second SIGTERM: %v, want killed by SIGTERM", err)
	}
}
