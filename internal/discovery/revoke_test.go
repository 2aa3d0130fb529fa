package discovery_test

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A verification that began before an enrolment was revoked must not
// undo the revocation when it completes: the revoking check (queued by
// the store's host-key watch through Reverify) is the one that counts.
func TestRevocationNotUndoneByInFlightCheck(t *testing.T) {
	t.Parallel()
	e := start(t, "", nil)
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")

	var (
		mu      sync.Mutex
		hold    chan struct{} // non-nil: the next challenge waits for it
		waiting = make(chan struct{}, 1)
	)
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		mu.Lock()
		h := hold
		hold = nil
		mu.Unlock()
		if h != nil {
			waiting <- struct{}{}
			<-h // a slow answer: the check is in flight meanwhile
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	defer srv.Close()
	addr = srv.Listener.Addr().String()

	e.publish(host.KindAnnounce, announce("web-1", addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

	// A check starts (the periodic one, or "check again") and hangs in
	// the challenge, having read the enrolment as it was.
	release := make(chan struct{})
	mu.Lock()
	hold = release
	mu.Unlock()
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("check did not reach the host")
	}

	// The operator revokes the key; the store's watch asks for a check.
	e.keys.revoke("web-1")
	if err := e.d.Reverify("web-1"); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 5*time.Second, func() bool { return !e.routable("hello", "web-1") }, "still routable after revocation")

	// The stale check now completes with a good signature.
	close(release)
	deadline := time.Now().Add(time.Second)
	tu.WaitFor(t, 2*time.Second, func() bool {
		if e.routable("hello", "web-1") {
			t.Fatalf("a check begun before the revocation made the host routable again: %+v", e.info("web-1"))
		}
		return time.Now().After(deadline)
	}, "")
}

// heldChallenger answers challenges as id at its own address, signing with
// k (nil: refuses), but holds the first one until release is called;
// held receives when it starts holding.
func heldChallenger(t *testing.T, id string, k ed25519.PrivateKey) (addr string, held <-chan struct{}, release func()) {
	t.Helper()
	h := make(chan struct{}, 1)
	gate := make(chan struct{})
	var once, first sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		first.Do(func() {
			h <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
			}
		})
		if k == nil {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, id, addr, req.Nonce, req.Gateway)})
	}))
	addr = srv.Listener.Addr().String()
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before Close, which waits for the held handler
	return addr, h, release
}

// A check that outlives its entry (removed after host_ttl while its
// challenge hung) must not land on the entry announced afresh under the
// same id: a new entry's claims were never challenged, whatever the old
// check proved.
func TestCheckOfRemovedEntryIgnored(t *testing.T) {
	t.Parallel()
	// One worker: the old check's result is handled before the next check
	// starts, so that start tells the test the result has landed.
	e := start(t, "", func(o *discovery.Options) {
		o.Workers, o.HostTTL, o.VerifyTimeout = 1, 500*time.Millisecond, 10*time.Second
	})
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	honest, honestHeld, release := heldChallenger(t, "web-1", k)
	e.publish(host.KindAnnounce, announce("web-1", honest, pub, "hello"))
	select {
	case <-honestHeld:
	case <-time.After(5 * time.Second):
		t.Fatal("check did not reach the host")
	}
	// No heartbeat: the entry is removed while its check hangs.
	tu.WaitFor(t, 5*time.Second, func() bool { _, ok := e.d.Host("web-1"); return !ok }, "not removed after host_ttl")

	// Announced afresh with the enrolled key at an address whose holder
	// has no key; its own check is held too, so it cannot overwrite what
	// the old one leaves.
	forged, forgedHeld, _ := heldChallenger(t, "web-1", nil)
	e.publish(host.KindAnnounce, announce("web-1", forged, pub, "hello"))
	release()
	select {
	case <-forgedHeld: // the old check's result has been handled
	case <-time.After(5 * time.Second):
		t.Fatal("the new claims were not checked")
	}
	if hi := e.info("web-1"); e.routable("hello", "web-1") || hi.State != route.HostProvisional || !hi.VerifiedAt.IsZero() {
		t.Fatalf("the old check verified the new claims: %+v", hi)
	}
}

// When new claims of a verified host fail their check, the host goes back
// to the claims it proved, but only if the enrolment that check read still
// allows them: an operator who revokes a host's key, or enrols another,
// must not see the host routed again by its old claims because someone
// (the host itself, say) announced other claims around that moment. Each
// announce of other claims would otherwise put it back until the next
// check of the old ones, and a stream of them would keep it in.
func TestEnrolmentChangeNotUndoneByFailedNewClaims(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(e *env, pub2 ed25519.PublicKey)
		newKey bool // the new claims carry the newly enrolled key
	}{
		{"key revoked", func(e *env, _ ed25519.PublicKey) { e.keys.revoke("web-1") }, false},
		{"another key enrolled", func(e *env, pub2 ed25519.PublicKey) { e.keys.enrol("web-1", pub2, "hello") }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			gk := &gatedKeys{held: make(chan struct{}, 1)}
			e := start(t, "", func(o *discovery.Options) {
				gk.keys = o.Keys.(*keys)
				o.Keys = gk
				o.MissedHeartbeats, o.HostTTL = 100, time.Minute
			})
			k, pub := newKey(t)
			_, pub2 := newKey(t)
			e.keys.enrol("web-1", pub, "hello")
			cs := newChallengeServer(t, "web-1", k)
			e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")

			// Other claims are announced; their check waits in the lookup.
			first := gk.hold()
			other := pub
			if c.newKey {
				other = pub2
			}
			e.publish(host.KindAnnounce, announce("web-1", tu.FreeAddr(t), other, "hello"))
			waitHeld(t, gk)
			// The operator changes the enrolment; the check then reads it.
			c.change(e, pub2)
			second := gk.hold()
			defer close(second)
			close(first)
			// The next lookup is the old claims' check, if they came back.
			select {
			case <-gk.held:
				if e.routable("hello", "web-1") {
					t.Fatalf("routed again by claims the enrolment no longer allows: %+v", e.info("web-1"))
				}
			case <-time.After(2 * time.Second):
			}
			tu.WaitFor(t, 5*time.Second, func() bool { return !e.routable("hello", "web-1") }, "still routable")
			if hi := e.info("web-1"); hi.State != route.HostProvisional || hi.LastError == "" {
				t.Fatalf("info %+v, want provisional with an error", hi)
			}
		})
	}
}

func waitHeld(t *testing.T, gk *gatedKeys) {
	t.Helper()
	select {
	case <-gk.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no enrolment lookup")
	}
}
