package discovery_test

import (
	"testing"
	"time"

	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A key rotated while the old run of a host still runs (blue/green): the
// new run, started first with the new key, is refused (key_mismatch);
// then the operator enrols the new key. The old run's claims fail the
// new enrolment, and the gateway asks the host id to announce again, so
// the new run, which announced once and was refused, is checked again and
// takes the traffic while the old run still heartbeats. Before, the app
// had no host until the old run stopped.
func TestKeyRotatedWhileTheOldRunRuns(t *testing.T) {
	t.Parallel()
	e := startOn(t, "")
	k1, pub1 := newKey(t)
	k2, pub2 := newKey(t)
	e.keys.enrol("web-1", pub1, "hello")
	oldAddr, _ := runHost(t, e.url, "web-1", k1, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") && e.info("web-1").Addr == oldAddr }, "old run not routable")

	newAddr, _ := runHost(t, e.url, "web-1", k2, []string{"hello"})
	tu.WaitFor(t, 5*time.Second, func() bool { return e.failures("key_mismatch") >= 1 }, "the new run's key was not refused")
	if hi := e.info("web-1"); hi.Addr != oldAddr || !e.routable("hello", "web-1") {
		t.Fatalf("after the refused announce: %+v, want the old run routed", hi)
	}

	e.keys.enrol("web-1", pub2, "hello")
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 10*hbEvery+5*time.Second, func() bool {
		return e.routable("hello", "web-1") && e.info("web-1").Addr == newAddr
	}, "the new run was never checked again")
}
