package gatehouse

import (
	"context"
	"crypto/ed25519"
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

// DNS rebinding, end to end: a host announces a name, passes its
// challenge at the address the name resolves to, then points the name at
// another address (an internal service on 127.0.0.2 here). The app's
// traffic keeps going to the address that passed, over new connections
// too; the next check challenges the new address, which fails, and takes
// the host out. The internal service never gets a request but that
// challenge. GET /api/v3/hosts shows the announced name throughout.
func TestRebindingNeverMovesAppTraffic(t *testing.T) {
	const name = "web.rebind.test"
	res := testutil.StartResolver(t, map[string]string{name + ".": "127.0.0.1"})
	r := startWith(t, testConfig(t), func(g *Gatehouse) { g.hostResolver = res.NetResolver() })
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}

	lnReal, lnInternal, port := testutil.ListenTwin(t)
	var internal atomic.Int32 // requests other than challenges
	var internalChallenges atomic.Int32
	isrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == host.ChallengePath {
			internalChallenges.Add(1)
			http.NotFound(w, r)
			return
		}
		internal.Add(1)
		io.WriteString(w, "internal")
	})}
	go isrv.Serve(lnInternal)
	t.Cleanup(func() { isrv.Close() })

	addr := net.JoinHostPort(name, port)
	key, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	enrol := fmt.Sprintf(`{"public_key":%q,"apps":["hello"]}`, host.PublicKeyString(key.Public().(ed25519.PublicKey)))
	if code, body := r.control(t, "PUT", "/api/v3/hosts/keys/web-1", enrol); code != 200 {
		t.Fatalf("enrol: %d %s", code, body)
	}
	nc := testutil.Connect(t, "nats://"+r.g.Addrs().Bus)
	hh, err := host.New(host.Options{Conn: nc, Cluster: "one", HostID: "web-1", Key: key, Apps: []string{"hello"}, Addr: addr, HeartbeatInterval: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Every answer closes its connection: each request is a new dial.
	hsrv := &http.Server{Handler: hh.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "real")
	}))}
	go hsrv.Serve(lnReal)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hh.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; hsrv.Close() })

	testutil.WaitFor(t, 10*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 1 }, "host announcing a name not routable")
	send := func() (int, string) {
		t.Helper()
		resp, body := r.get(t, "hello.test.local", "/", nil)
		return resp.StatusCode, body
	}
	if code, body := send(); code != 200 || body != "real" {
		t.Fatalf("before: %d %q", code, body)
	}

	res.Set(name+".", "127.0.0.2")
	for i := range 10 {
		if code, body := send(); code != 200 || body != "real" {
			t.Fatalf("request %d after the name moved: %d %q, want the host that passed its challenge", i, code, body)
		}
	}
	if n := internal.Load(); n != 0 {
		t.Fatalf("the address the name was pointed at got %d requests", n)
	}
	code, body := r.control(t, "GET", "/api/v3/hosts", "")
	var list struct {
		Hosts []struct{ Addr string }
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Hosts) != 1 || list.Hosts[0].Addr != addr {
		t.Fatalf("GET /api/v3/hosts: %d %s, want addr %s", code, body, addr)
	}

	// Enrolling the key again checks the host at once: the challenge goes
	// to where the name points now, fails, and the host is out.
	if code, body := r.control(t, "PUT", "/api/v3/hosts/keys/web-1", enrol); code != 200 {
		t.Fatalf("enrol again: %d %s", code, body)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return len(r.g.Live().Load().Pool("hello")) == 0 }, "host still routable after failing its challenge at the new address")
	if internalChallenges.Load() == 0 {
		t.Fatal("the check did not challenge the address the name points at now")
	}
	if code, body := send(); code < 500 || strings.Contains(body, "internal") {
		t.Fatalf("app with its host out: %d %q", code, body)
	}
	if n := internal.Load(); n != 0 {
		t.Fatalf("the address the name was pointed at got %d requests", n)
	}
}
