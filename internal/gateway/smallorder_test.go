package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestSmallOrderClusterKeyNeverVouches: an announcement on the shared bus
// whose public key is the Ed25519 identity point carries a signature no
// private key made (R the identity, S zero, which verifies under that key
// for every message). A cluster so announced would let anyone, not just
// the bus publisher, sign X-Gatehouse-Client marks in its name: a client
// could name any address and be charged, logged and reported to hosts as
// it (DESIGN §5.3). The announcement is dropped, and marks naming the id
// are stripped like any forgery.
func TestSmallOrderClusterKeyNeverVouches(t *testing.T) {
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	cs := startClusters(t, clusterSetup{ids: []string{"eu"}, bus: nc})
	cl := clClient(t)
	identity := make([]byte, 32)
	identity[0] = 1 // y = 1: the neutral point
	noSig := append(append([]byte{}, identity...), make([]byte, 32)...)
	announce := func() {
		b, _ := json.Marshal(cluster.Announcement{
			ID: "xx", URL: "http://127.0.0.1:1", TS: time.Now().Unix(),
			PublicKey: base64.StdEncoding.EncodeToString(identity),
			Sig:       base64.StdEncoding.EncodeToString(noSig),
		})
		if err := nc.Publish(cluster.Subject, b); err != nil {
			t.Fatal(err)
		}
	}
	// A good announcement after the forged one, from the same publisher,
	// is handled after it: once it shows, the forged one was handled too
	// (both are sent until the gateway's discovery listens).
	good := func(id string) {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(cluster.Announce(key, id, "http://127.0.0.1:2", time.Now()))
		if err := nc.Publish(cluster.Subject, b); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		announce()
		good("zz")
		_, ok := cs["eu"].peers.Set().Peer("zz")
		return ok
	}, "the good announcement never arrived")
	if p, ok := cs["eu"].peers.Set().Peer("xx"); ok {
		t.Errorf("a cluster whose key signs for anyone joined the set: %+v", p)
	}
	app := clApps[0]
	host := app + "." + testZone
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mark := "ip=198.51.100.7; ts=" + ts + "; sig=" + base64.StdEncoding.EncodeToString(noSig)
	res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/forged", http.Header{
		cluster.HeaderForwarded: {"xx"}, cluster.HeaderClient: {mark},
	})
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %q", host, res.StatusCode, body)
	}
	seen := cs["eu"].host.requests()
	if last := seen[len(seen)-1]; last.ClientIP != clientAddr {
		t.Fatalf("a mark nobody signed named the client: host saw %s, want %s", last.ClientIP, clientAddr)
	}
}
