package e2e

import (
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A second SIGTERM while the gateway drains ends it then, killed by the
// signal, instead of after the requests in flight: the first one drains
// (DESIGN §3), and serve restores the default action after it, so an
// operator (or a service manager's stop timeout) can cut a drain short.
func TestGatewaySecondSignalEndsDrain(t *testing.T) {
	s, slow := startOneSlow(t)

	sig := time.Now()
	s.gw.sigterm(t)
	testutil.WaitFor(t, 2*time.Second, func() bool {
		return get(t, "http://"+s.gw.mgmt+"/readyz") == http.StatusServiceUnavailable
	}, "/readyz did not turn 503 after the first SIGTERM")
	// The drain is held open by the slow request (5 s). The handler of
	// the first signal restores the default action as it returns; a
	// signal sent just before that is absorbed, so send until one ends it.
	testutil.WaitFor(t, 2*time.Second, func() bool {
		if s.gw.exited() {
			return true
		}
		_ = s.gw.cmd.Process.Signal(syscall.SIGTERM)
		return false
	}, "the gateway still drains after a second SIGTERM")
	t.Logf("exited %s after the first SIGTERM", time.Since(sig).Round(time.Millisecond))
	var ee *exec.ExitError
	if !errors.As(s.gw.err, &ee) {
		t.Fatalf("gateway exit: %v, want killed by SIGTERM", s.gw.err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("gateway exit: %v, want killed by SIGTERM", s.gw.err)
	}
	// The request in flight was cut with the process, not answered.
	if r := collect(t, slow, 1, 10*time.Second)[0]; r.outcome != failed {
		t.Errorf("slow request: %+v, want cut", r)
	}
}

// drain_timeout bounds the drain (docs/config.md): a request still in
// flight when it ends is cut and logged as 499, the drain says so in a
// warning naming cut_connections, and serve exits 0 then, not when the
// request would have finished.
func TestGatewayDrainTimeoutCutsAndExits(t *testing.T) {
	const drain = time.Second
	s, slow := startOneSlow(t, "-drain-timeout", drain.String())

	sig := time.Now()
	s.gw.sigterm(t)
	// Well before the slow request's 5 s.
	code := s.gw.wait(t, drain+2*time.Second)
	t.Logf("exited %d, %s after SIGTERM", code, time.Since(sig).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("gateway exited %d, want 0", code)
	}
	if r := collect(t, slow, 1, 10*time.Second)[0]; r.outcome != failed {
		t.Errorf("slow request: %+v, want cut", r)
	}
	out := s.gw.out.String()
	if !strings.Contains(out, "drain_timeout cut the connections still open") || !strings.Contains(out, `"cut_connections":1`) {
		t.Errorf("no drain warning naming cut_connections 1 in the gateway's log:\n%s", s.gw.out.lastLines(40))
	}
	if !strings.Contains(out, `"path":"/slow","status":499`) {
		t.Error("the cut request is not in the access log as 499")
	}
}

// startOneSlow starts the system with the gateway's extra flags and one
// request of 5 s in flight at an upstream, for a signal to meet.
func startOneSlow(t *testing.T, gatewayFlags ...string) (*system, <-chan result) {
	t.Helper()
	s := startSystem(t, gatewayFlags...)
	waitRouted(t, s)
	slow := slowRequests(s, 1, 5000)
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return s.ups["a"].slowIn.Load()+s.ups["b"].slowIn.Load() == 1
	}, "the slow request did not reach an upstream")
	return s, slow
}
