package gatehouse

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A tenant who holds the keys of two hosts of one app announces the
// second at a name that resolves to the gateway itself, and has the first
// sign that host's challenges: relayed through the gateway to the first,
// the challenge would pass, and once the first left, every request to the
// app would go from the gateway to the gateway (588 nested requests for
// one in a review, and thousands of nested connections in passthrough).
// The gateway refuses to relay a challenge (508): the second host never
// verifies, and the first never sees its challenge.
func TestHostAtTheGatewayNeverVerifies(t *testing.T) {
	const name = "hello.test.local"
	res := testutil.StartResolver(t, map[string]string{name + ".": "127.0.0.1"})
	r := startWith(t, testConfig(t), func(g *Gatehouse) { g.hostResolver = res.NetResolver() })
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	_, gwPort, _ := net.SplitHostPort(r.g.Addrs().HTTP)
	loopAddr := net.JoinHostPort(name, gwPort)

	keys := map[string]ed25519.PrivateKey{}
	for _, id := range []string{"web-1", "web-2"} {
		key, err := host.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[id] = key
		enrol := fmt.Sprintf(`{"public_key":%q,"apps":["hello"]}`, host.PublicKeyString(key.Public().(ed25519.PublicKey)))
		if code, body := r.control(t, "PUT", "/api/v3/hosts/keys/"+id, enrol); code != 200 {
			t.Fatalf("enrol %s: %d %s", id, code, body)
		}
	}
	// web-1 is a real host at its own address whose server also signs
	// web-2's challenges.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var relayed atomic.Int32
	web1 := runLoopHost(t, r, "web-1", keys["web-1"], ln.Addr().String())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == host.ChallengePath {
			b, _ := io.ReadAll(req.Body)
			var cr host.ChallengeRequest
			if json.Unmarshal(b, &cr) == nil && cr.HostID == "web-2" {
				relayed.Add(1)
				sig := ed25519.Sign(keys["web-2"], host.ChallengeMessage("web-2", loopAddr, cr.Nonce, cr.Gateway))
				json.NewEncoder(w).Encode(host.ChallengeResponse{Signature: base64.StdEncoding.EncodeToString(sig)})
				return
			}
			req.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		web1.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "web-1") })).ServeHTTP(w, req)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "web-1 not routable")

	// web-2 announces the gateway's own listener, by name.
	runLoopHost(t, r, "web-2", keys["web-2"], loopAddr)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		h, ok := r.hostInfo(t, "web-2")
		return ok && strings.Contains(h.LastError, "508")
	}, "web-2's challenge did not fail with 508")
	if n := len(r.g.Live().Load().Pool("hello")); n != 1 {
		t.Fatalf("pool of %d hosts: web-2, announced at the gateway, is routed", n)
	}
	if n := relayed.Load(); n != 0 {
		t.Fatalf("web-1 was handed %d of web-2's challenges through the gateway", n)
	}
	// A client's request for the challenge path gets the same answer.
	req, _ := http.NewRequest("POST", "http://"+r.g.Addrs().HTTP+host.ChallengePath, strings.NewReader(`{}`))
	req.Host = name
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusLoopDetected || relayed.Load() != 0 {
		t.Fatalf("client POST of the challenge path: %d, relayed %d", resp.StatusCode, relayed.Load())
	}
	if resp, body := r.get(t, name, "/", nil); resp.StatusCode != 200 || body != "web-1" {
		t.Fatalf("app: %d %q", resp.StatusCode, body)
	}
}

// runLoopHost runs host id with key on r's bus, announcing addr, until
// the test ends; the caller serves its address, if anything does.
func runLoopHost(t *testing.T, r *running, id string, key ed25519.PrivateKey, addr string) *host.Host {
	t.Helper()
	nc := testutil.Connect(t, "nats://"+r.g.Addrs().Bus)
	hh, err := host.New(host.Options{Conn: nc, Cluster: "one", HostID: id, Key: key, Apps: []string{"hello"}, Addr: addr, HeartbeatInterval: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hh.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return hh
}
