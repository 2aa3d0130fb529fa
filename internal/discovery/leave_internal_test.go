package discovery

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// oneKey enrols one host id.
type oneKey struct{ k *route.HostKey }

func (o oneKey) GetHostKey(_ context.Context, id string) (*route.HostKey, error) {
	if id != o.k.HostID {
		return nil, errors.New("not found")
	}
	return o.k, nil
}

// A leave's signature is checked without d.mu held, since anyone may send
// leaves at bus speed and the workers, the flusher and the API wait for
// d.mu; what the check relied on is looked at again afterwards, so a leave
// checked against a key the host no longer holds, or for an entry since
// removed, drains nothing.
func TestLeaveSignatureCheckedOutsideTheLock(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	k, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, pub2 := k.Public().(ed25519.PublicKey), k2.Public().(ed25519.PublicKey)
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req host.ChallengeRequest
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Validate() != nil {
			http.Error(w, "bad", 400)
			return
		}
		json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: host.SignChallenge(k, "web-1", addr, req.Nonce, req.Gateway)})
	}))
	defer srv.Close()
	addr = srv.Listener.Addr().String()

	cases := []struct {
		name    string
		during  func(d *Discovery) // while the sig is checked, taking d.mu itself
		drained bool
		reason  string // counted as dropped, if not drained
	}{
		{"nothing changes meanwhile", nil, true, ""},
		{"the host proves another key meanwhile", func(d *Discovery) {
			d.mu.Lock()
			e := d.hosts["web-1"]
			e.ann.PublicKey, e.pub, e.provenKey = host.PublicKeyString(pub2), pub2, pub2
			d.mu.Unlock()
		}, false, dropBadSignature},
		{"the host is removed meanwhile", func(d *Discovery) {
			d.mu.Lock()
			if e := d.hosts["web-1"]; e != nil {
				d.deleteLocked("web-1", e)
			}
			d.mu.Unlock()
		}, false, dropUnverifiedLeave}, // as a leave of an unknown host is
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := New(Options{
				Conn: nc, Cluster: "c1", GatewayID: "gw-1", Builder: route.NewBuilder(new(route.Live)),
				Keys:              oneKey{&route.HostKey{HostID: "web-1", PublicKey: host.PublicKeyString(pub), Apps: []string{"hello"}}},
				HeartbeatInterval: 100 * time.Millisecond, HostTTL: 10 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			var checks, locked int
			d.verifySig = func(p ed25519.PublicKey, msg, sig []byte) bool {
				checks++
				if !d.mu.TryLock() {
					locked++ // and c.during would deadlock
				} else {
					d.mu.Unlock()
					if c.during != nil {
						c.during(d)
					}
				}
				return ed25519.Verify(p, msg, sig)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			defer func() { cancel(); <-done }()

			a, _ := json.Marshal(host.Announce{HostID: "web-1", Apps: []string{"hello"}, Addr: addr, Scheme: "http", PublicKey: host.PublicKeyString(pub), TS: time.Now().Unix()})
			d.handleMsg(&nats.Msg{Subject: host.AnnounceSubject("c1"), Data: a}, nil)
			testutil.WaitFor(t, 5*time.Second, func() bool { hi, _ := d.Host("web-1"); return hi.State == route.HostVerified }, "host not verified")

			ts := time.Now().Unix()
			l, _ := json.Marshal(host.Leave{HostID: "web-1", TS: ts, Sig: host.SignLeave(k, "web-1", ts)})
			d.handleMsg(&nats.Msg{Subject: host.LeaveSubject("c1"), Data: l}, nil)
			if checks == 0 || locked > 0 {
				t.Fatalf("%d of %d signature checks ran with d.mu held", locked, checks)
			}
			hi, _ := d.Host("web-1")
			if drained := hi.State == route.HostDraining; drained != c.drained {
				t.Fatalf("drained %v, want %v (info %+v)", drained, c.drained, hi)
			}
			for _, r := range []string{dropBadSignature, dropStaleLeave, dropUnsignedLeave, dropUnverifiedLeave} {
				want := 0.0
				if r == c.reason {
					want = 1
				}
				if got := promtest.ToFloat64(d.m.dropped.WithLabelValues(r)); got != want {
					t.Errorf("dropped{%s} = %v, want %v", r, got, want)
				}
			}
		})
	}
}
