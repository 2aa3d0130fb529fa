package discovery_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A verification that began before an enrolment was revoked must not
// undo the revocation when it completes: the revoking check (queued by
// the store's host-key watch through Reverify) is the one that counts.
func TestRevocationNotUndoneByInFlightCheck(t *testing.T) {
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
