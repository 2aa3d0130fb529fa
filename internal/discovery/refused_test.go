package discovery_test

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A host's open pipes and WebSockets are cut (route.Host.Refused, which
// route.Conns acts on) only when
// its enrolment refuses the claims the host itself proved. Anyone on the
// bus may announce a host's id with another key, or with an app it does
// not serve; while the host is between checks (its last one failed, so
// no proven claims stand behind the announced ones) such an announce is
// refused by the enrolment too, but says nothing of the host: its
// connections must stay. A real revocation then cuts them, and the host
// enrolled again and passing its check is no longer cut.
func TestForgedClaimsDoNotCutAHost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, reason string
		forged       func(addr string, pub ed25519.PublicKey) host.Announce
	}{
		{"another key", "key_mismatch", func(addr string, _ ed25519.PublicKey) host.Announce {
			_, other := newKey(t)
			return announce("web-1", addr, other, "hello")
		}},
		{"an app not enrolled", "app_not_allowed", func(addr string, pub ed25519.PublicKey) host.Announce {
			return announce("web-1", addr, pub, "hello", "admin")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, "", quiet)
			k, pub := newKey(t)
			e.keys.enrol("web-1", pub, "hello")
			cs := newChallengeServer(t, "web-1", k)
			e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

			// The host's check fails for a reason of its own (its
			// challenge does not answer): out of rotation, its open
			// connections kept.
			cs.Close()
			if err := e.d.Reverify("web-1"); err != nil {
				t.Fatal(err)
			}
			tu.WaitFor(t, 5*time.Second, func() bool { return !e.routable("hello", "web-1") && e.info("web-1").LastError != "" }, "the failing check did not land")
			if refused(e, "web-1") {
				t.Fatal("a failed challenge cuts the host's connections")
			}

			// Someone else announces the id with claims the enrolment refuses.
			before := e.failures(c.reason)
			e.publish(host.KindAnnounce, c.forged(tu.RefusedAddr(t), pub))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.failures(c.reason) > before }, "the forged claims were not checked")
			if refused(e, "web-1") {
				t.Fatalf("forged claims cut the host's connections: %+v", e.info("web-1"))
			}

			// The operator revokes the key: now they are cut.
			e.keys.revoke("web-1")
			if err := e.d.Reverify("web-1"); err != nil {
				t.Fatal(err)
			}
			tu.WaitFor(t, 5*time.Second, func() bool { return refused(e, "web-1") }, "a revoked host's connections are not cut")

			// Enrolled again, the host announces and passes: not cut.
			e.keys.enrol("web-1", pub, "hello")
			cs2 := newChallengeServer(t, "web-1", k)
			e.publish(host.KindAnnounce, announce("web-1", cs2.addr, pub, "hello"))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable once enrolled again")
			if refused(e, "web-1") {
				t.Fatal("a host enrolled again and verified is still cut")
			}
			if le := e.info("web-1").LastError; strings.Contains(le, "enrol") {
				t.Fatalf("last error %q", le)
			}
		})
	}
}

// refused reports whether the table publishes host id as refused: the
// connections open to it are then closed (route.Conns).
func refused(e *env, id string) bool {
	for _, h := range e.live.Load().Hosts() {
		if h.ID == id {
			return h.Refused
		}
	}
	return false
}

// A host whose enrolment now names another key (rotated) stays refused
// whatever other claims are then checked in its name: the newly enrolled
// key is no secret, and claims with it that fail their challenge (at an
// address nobody answers) say nothing of the old run, whose connections
// are still to be closed. The new run passing its challenge clears it.
func TestRotatedHostStaysRefusedThroughFailedNewClaims(t *testing.T) {
	t.Parallel()
	e := start(t, "", quiet)
	k, pub := newKey(t)
	k2, pub2 := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	cs := newChallengeServer(t, "web-1", k)
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	e.keys.enrol("web-1", pub2, "hello")
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return refused(e, "web-1") }, "the old key's run is not refused")

	dead := newChallengeServer(t, "web-1", k2)
	dead.Close()
	e.publish(host.KindAnnounce, announce("web-1", dead.addr, pub2, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool {
		hi := e.info("web-1")
		return hi.Addr == dead.addr && hi.LastError != ""
	}, "the new-key claims were not checked")
	if !refused(e, "web-1") {
		t.Fatalf("claims that failed their challenge undid the refusal: %+v", e.info("web-1"))
	}

	cs2 := newChallengeServer(t, "web-1", k2)
	e.publish(host.KindAnnounce, announce("web-1", cs2.addr, pub2, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "the new run not routable")
	if refused(e, "web-1") {
		t.Fatal("the new run, verified, is still refused")
	}
}
