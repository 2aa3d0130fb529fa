package discovery_test

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// slowChallenger answers challenges as id at its own address, signing with
// k, but holds each one until the test lets it go: held receives when a
// challenge arrives, and a send on answer answers it.
func slowChallenger(t *testing.T, id string, k ed25519.PrivateKey) (addr string, held <-chan struct{}, answer chan<- struct{}) {
	t.Helper()
	h, a := make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		h <- struct{}{}
		select {
		case <-a:
		case <-r.Context().Done():
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, id, addr, req.Nonce, req.Gateway)})
	}))
	addr = srv.Listener.Addr().String()
	t.Cleanup(srv.Close)
	return addr, h, a
}

// An announce repeated while its challenge is under way, by the host or
// by anyone copying it, does not throw that challenge away: the host is
// verified by the first challenge it answers, however often the same
// claims are announced meanwhile.
func TestRepeatedAnnounceDoesNotStarveVerification(t *testing.T) {
	e := start(t, "", nil)
	k, pub := newKey(t)
	e.keys.enrol("web-1", pub, "hello")
	addr, held, answer := slowChallenger(t, "web-1", k)
	a := announce("web-1", addr, pub, "hello")
	e.publish(host.KindAnnounce, a)

	challenges := 0
	tu.WaitFor(t, 10*time.Second, func() bool {
		select {
		case <-held:
			challenges++
			if challenges > 3 {
				t.Fatalf("%d challenges answered, the host still not verified: each copy of its announce discarded the one in flight", challenges-1)
			}
			// The same claims again (a later ts, as a host's own re-announce
			// has) while the challenge is in flight; the heartbeat behind
			// it on the same connection says both were handled.
			a.TS++
			e.publish(host.KindAnnounce, a)
			e.publish(host.KindHeartbeat, heartbeat("web-1", int64(challenges)))
			tu.WaitFor(t, 5*time.Second, func() bool { return e.info("web-1").Inflight == int64(challenges) }, "copy not handled")
			answer <- struct{}{}
		default:
		}
		return e.routable("hello", "web-1")
	}, "host not verified while its announce was repeated")
	if hi := e.info("web-1"); hi.State != route.HostVerified || hi.LastError != "" {
		t.Fatalf("info %+v", hi)
	}
	if challenges != 1 {
		t.Fatalf("%d challenges for one set of claims, want 1", challenges)
	}
}
