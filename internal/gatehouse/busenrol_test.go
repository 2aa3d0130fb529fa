package gatehouse

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// gatewayBusURL is the URL another gateway shares r's embedded bus with:
// the gateway credential from r's data directory (docs/config.md, "Bus
// security").
func (r *running) gatewayBusURL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.g.cfg.DataDir, bus.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return "nats://" + bus.GatewayUser + ":" + strings.TrimSpace(string(b)) + "@" + r.g.Addrs().Bus
}

// hostInfo returns r's view of host id, or false.
func (r *running) hostInfo(t *testing.T, id string) (route.HostInfo, bool) {
	t.Helper()
	code, body := r.control(t, "GET", "/api/v3/hosts", "")
	var hl struct{ Hosts []route.HostInfo }
	if code != 200 || json.Unmarshal([]byte(body), &hl) != nil {
		t.Fatalf("hosts: %d %s", code, body)
	}
	for _, h := range hl.Hosts {
		if h.HostID == id {
			return h, true
		}
	}
	return route.HostInfo{}, false
}

// Hosts connect to the embedded bus (DESIGN §3). A process there must not
// be able to enrol its own key by writing the host-key bucket behind the
// control API, which accepts only the platform's credential (DESIGN §7),
// and so take an app's traffic.
func TestBusClientCannotEnrolItself(t *testing.T) {
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/victim", `{"mode":"http"}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	key, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := host.PublicKeyString(key.Public().(ed25519.PublicKey))

	// A host's own bus connection, as `gatehouse host` makes it. The
	// server answers a refused request with a permissions violation and
	// nothing else: the calls below wait for that report, not a fixed
	// time.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refused := make(chan struct{})
	var once sync.Once
	nc, err := nats.Connect("nats://"+r.g.Addrs().Bus, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				once.Do(func() { close(refused) })
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	go func() {
		select {
		case <-refused:
			cancel()
		case <-ctx.Done():
		}
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := js.KeyValue(ctx, "gatehouse_hostkeys"); err == nil {
		if _, err = kv.Put(ctx, "evil", fmt.Appendf(nil, `{"host_id":"evil","public_key":%q,"apps":["victim"]}`, pub)); err == nil {
			t.Error("a bus client without credentials wrote gatehouse_hostkeys")
		}
	}
	if code, _ := r.control(t, "GET", "/api/v3/hosts/keys/evil", ""); code != 404 {
		t.Fatalf("enrolment of evil: %d, want 404", code)
	}

	// The host runs anyway, and an honest host enrolled through the control
	// API joins the same app over an anonymous connection of its own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hh, err := host.New(host.Options{Conn: nc, Cluster: "one", HostID: "evil", Key: key, Apps: []string{"victim"}, Addr: ln.Addr().String(), HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: hh.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "evil") }))}
	go srv.Serve(ln)
	hctx, hcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hh.Run(hctx) }()
	t.Cleanup(func() { hcancel(); <-done; srv.Close() })

	startHost(t, r, "good", "victim", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "good") }))
	// evil is refused as unenrolled, and forgotten until it announces again.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		_, m := mgmtGet(t, r.g.Addrs().Management, "/metrics")
		return strings.Contains(m, `gatehouse_host_verification_failures_total{reason="unenrolled"}`) && len(r.g.Live().Load().Pool("victim")) == 1
	}, "the announces were not both handled")
	if e, ok := r.hostInfo(t, "evil"); ok && e.State == route.HostVerified {
		t.Fatalf("evil: state %s, last error %q: want refused", e.State, e.LastError)
	}
	for range 4 {
		if _, body := r.get(t, "victim.test.local", "/", nil); body != "good" {
			t.Fatalf("victim.test.local answers %q, want only the enrolled host", body)
		}
	}
}

// A host without credentials can still do everything the host protocol
// needs on the embedded bus (DESIGN §4): announce and be verified,
// heartbeat, be asked to announce again, and leave. A client with the
// gateway credential has full rights.
func TestBusAnonymousHostProtocol(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/hello", `{"mode":"http"}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	key, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := host.PublicKeyString(key.Public().(ed25519.PublicKey))
	if code, body := r.control(t, "PUT", "/api/v3/hosts/keys/h1", fmt.Sprintf(`{"public_key":%q,"apps":["hello"]}`, pub)); code != 200 {
		t.Fatalf("enrol: %d %s", code, body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nc := testutil.Connect(t, "nats://"+r.g.Addrs().Bus)
	hh, err := host.New(host.Options{Conn: nc, Cluster: "one", HostID: "h1", Key: key, Apps: []string{"hello"}, Addr: ln.Addr().String(), HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: hh.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "h1") }))}
	go srv.Serve(ln)
	defer srv.Close()
	hctx, hcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hh.Run(hctx) }()
	defer func() { hcancel(); <-done }()

	// Announce and challenge.
	testutil.WaitFor(t, 10*time.Second, func() bool { h, _ := r.hostInfo(t, "h1"); return h.State == route.HostVerified }, "h1 not verified")
	if _, body := r.get(t, "hello.test.local", "/", nil); body != "h1" {
		t.Fatalf("hello answers %q", body)
	}
	// Heartbeats.
	h, _ := r.hostInfo(t, "h1")
	testutil.WaitFor(t, 5*time.Second, func() bool { g, _ := r.hostInfo(t, "h1"); return g.LastHeartbeat.After(h.LastHeartbeat) }, "no heartbeat after verification")

	// A gateway that does not know a host answers its heartbeat on the
	// host's inbox.
	ghost := testutil.Connect(t, "nats://"+r.g.Addrs().Bus)
	inbox := ghost.NewInbox()
	replies, err := ghost.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := ghost.PublishMsg(&nats.Msg{Subject: host.HeartbeatSubject("one"), Reply: inbox, Data: []byte(`{"host_id":"ghost","ts":` + fmt.Sprint(time.Now().Unix()) + `,"inflight":0}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := replies.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no answer on the host's inbox to an unknown host's heartbeat: %v", err)
	}

	// A client with the gateway credential has full rights: it enrols a
	// key straight in the bucket, which the control API then shows.
	full := testutil.Connect(t, r.gatewayBusURL(t))
	js, err := jetstream.New(full)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "gatehouse_hostkeys")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "trusted", fmt.Appendf(nil, `{"host_id":"trusted","public_key":%q,"apps":["hello"]}`, pub)); err != nil {
		t.Fatalf("the gateway credential cannot write the bucket: %v", err)
	}
	if code, body := r.control(t, "GET", "/api/v3/hosts/keys/trusted", ""); code != 200 {
		t.Fatalf("enrolment written with the credential: %d %s", code, body)
	}

	// Leave.
	hcancel()
	<-done
	testutil.WaitFor(t, 5*time.Second, func() bool {
		h, ok := r.hostInfo(t, "h1")
		return !ok || h.State == route.HostDraining
	}, "h1 did not leave")
}

// A host may subscribe only to "_INBOX.>", but it picks the reply subject
// of its heartbeat, and a gateway that does not know the host answers
// there with its own full-rights connection. The answer must not land on
// a subject the host could not publish to itself: a KV key, a JetStream
// API subject, the store's republish or cluster announcements.
func TestBusHeartbeatReplyIsNotAConfusedDeputy(t *testing.T) {
	t.Parallel() // a gateway of its own; bounds no time, counts nothing process-wide
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/apps/victim", `{"mode":"http"}`); code != 200 {
		t.Fatalf("put app: %d %s", code, body)
	}
	key, err := host.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := host.PublicKeyString(key.Public().(ed25519.PublicKey))
	if code, body := r.control(t, "PUT", "/api/v3/hosts/keys/good", fmt.Sprintf(`{"public_key":%q,"apps":["victim"]}`, pub)); code != 200 {
		t.Fatalf("enrol: %d %s", code, body)
	}

	// What a full-rights client sees published on the targets.
	full := testutil.Connect(t, r.gatewayBusURL(t))
	targets := []string{"$KV.gatehouse_hostkeys.good", "$KV.gatehouse_apps.victim", "$JS.API.STREAM.INFO.KV_gatehouse_apps"}
	seen, err := full.SubscribeSync("$KV.>")
	if err != nil {
		t.Fatal(err)
	}
	seenAPI, err := full.SubscribeSync("$JS.API.STREAM.INFO.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := full.Flush(); err != nil {
		t.Fatal(err)
	}

	ghost := testutil.Connect(t, "nats://"+r.g.Addrs().Bus)
	hb := func(reply string) {
		t.Helper()
		if err := ghost.PublishMsg(&nats.Msg{Subject: host.HeartbeatSubject("one"), Reply: reply, Data: []byte(`{"host_id":"ghost","ts":` + fmt.Sprint(time.Now().Unix()) + `,"inflight":0}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range targets {
		hb(s)
	}
	// The honest request is answered after the others were handled.
	inbox := ghost.NewInbox()
	replies, err := ghost.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	hb(inbox)
	if _, err := replies.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no answer on the host's own inbox: %v", err)
	}
	// The gateway's own JetStream requests (its store's marker sweep
	// takes a lock, reads stream info) carry a reply subject for their
	// answer; an answer to a heartbeat carries none. One window for both
	// subscriptions: each keeps what arrives while the other is read.
	deadline := time.Now().Add(2 * time.Second)
	for _, sub := range []*nats.Subscription{seen, seenAPI} {
		for {
			m, err := sub.NextMsg(time.Until(deadline))
			if err != nil {
				break
			}
			if m.Reply == "" {
				t.Errorf("a host made the gateway publish %q on %s", m.Data, m.Subject)
			}
		}
	}
	if code, body := r.control(t, "GET", "/api/v3/hosts/keys/good", ""); code != 200 {
		t.Errorf("enrolment of good after the forged replies: %d %s", code, body)
	}
	if code, body := r.control(t, "GET", "/api/v3/apps/victim", ""); code != 200 {
		t.Errorf("app victim after the forged replies: %d %s", code, body)
	}
}
