package host

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

func newTestHost(t *testing.T, nc *nats.Conn, mod func(*Options)) (*Host, ed25519.PrivateKey) {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Conn: nc, Cluster: "c1", HostID: "web-1", Key: k, Apps: []string{"hello"},
		Addr: "127.0.0.1:9999", HeartbeatInterval: 50 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h, k
}

func TestNewValidates(t *testing.T) {
	nc := &nats.Conn{}
	k, _ := GenerateKey()
	good := Options{Conn: nc, Cluster: "c1", HostID: "web-1", Key: k, Apps: []string{"hello"}, Addr: "127.0.0.1:1"}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Options){
		"no conn":     func(o *Options) { o.Conn = nil },
		"bad cluster": func(o *Options) { o.Cluster = "C_1" },
		"bad host id": func(o *Options) { o.HostID = "a b" },
		"no key":      func(o *Options) { o.Key = nil },
		"no apps":     func(o *Options) { o.Apps = nil },
		"bad app":     func(o *Options) { o.Apps = []string{"UP"} },
		"port only":   func(o *Options) { o.Addr = ":8080" },
		"signed port": func(o *Options) { o.Addr = "127.0.0.1:+8080" },
		"bad scheme":  func(o *Options) { o.Scheme = "udp" },
		"negative hb": func(o *Options) { o.HeartbeatInterval = -time.Second },
	} {
		o := good
		mod(&o)
		if _, err := New(o); err == nil || !strings.HasPrefix(err.Error(), "host: ") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// A time.Duration is nanoseconds: HeartbeatInterval: 5, meant as 5 s, is
// 5 ns, and Run would heartbeat as fast as it can publish, every gateway
// handling each one. New refuses it and says why; 10 ms and up (tests
// run that fast) pass.
func TestNewRefusesAHeartbeatInNanoseconds(t *testing.T) {
	k, _ := GenerateKey()
	o := Options{Conn: &nats.Conn{}, Cluster: "c1", HostID: "web-1", Key: k, Apps: []string{"hello"}, Addr: "127.0.0.1:1"}
	for _, c := range []struct {
		every time.Duration
		ok    bool
	}{{5, false}, {5000, false}, {9 * time.Millisecond, false}, {10 * time.Millisecond, true}, {5 * time.Second, true}} {
		o.HeartbeatInterval = c.every
		_, err := New(o)
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "HeartbeatInterval "+c.every.String()+" is under 10ms")) {
			t.Errorf("HeartbeatInterval %s: err = %v", c.every, err)
		}
	}
}

// An ed25519.PrivateKey is the seed followed by its public key. One whose
// halves do not belong together (put together by hand, from two keys)
// announces a key it cannot sign for: no challenge would ever pass, and
// only the gateway's log would say why. New refuses it.
func TestNewRefusesKeyHalvesThatDisagree(t *testing.T) {
	a, _ := GenerateKey()
	b, _ := GenerateKey()
	mixed := append(append(ed25519.PrivateKey{}, a.Seed()...), b.Public().(ed25519.PublicKey)...)
	zeros := make(ed25519.PrivateKey, ed25519.PrivateKeySize)
	for name, k := range map[string]ed25519.PrivateKey{"two keys": mixed, "zeros": zeros} {
		_, err := New(Options{Conn: &nats.Conn{}, Cluster: "c1", HostID: "web-1", Key: k, Apps: []string{"hello"}, Addr: "127.0.0.1:1"})
		if err == nil || !strings.Contains(err.Error(), "host: Key") {
			t.Errorf("%s: err = %v, want one naming Key", name, err)
		}
	}
}

// New keeps its own copy of Key, as of Apps: the public key it announces
// is the one it signs with, whatever the caller does with its slice
// afterwards (wipes it once the host is set up, say).
func TestNewKeepsItsOwnKey(t *testing.T) {
	k, _ := GenerateKey()
	pub := k.Public().(ed25519.PublicKey)
	h, err := New(Options{Conn: &nats.Conn{}, Cluster: "c1", HostID: "web-1", Key: k, Apps: []string{"hello"}, Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	clear(k)
	nonce := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, NonceSize))
	w := httptest.NewRecorder()
	h.ChallengeHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, ChallengePath,
		strings.NewReader(`{"nonce":"`+nonce+`","gateway":"gw-1","host_id":"web-1","ts":1}`)))
	var cr ChallengeResponse
	if err := json.Unmarshal(w.Body.Bytes(), &cr); w.Code != 200 || err != nil {
		t.Fatalf("challenge: %d %s", w.Code, w.Body)
	}
	sig, _ := base64.StdEncoding.DecodeString(cr.Signature)
	if h.PublicKey() != PublicKeyString(pub) || !ed25519.Verify(pub, ChallengeMessage("web-1", "127.0.0.1:1", nonce, "gw-1"), sig) {
		t.Fatal("the answer does not verify under the key the host announces")
	}
}

func TestChallengeHandler(t *testing.T) {
	h, k := newTestHost(t, &nats.Conn{}, nil)
	srv := httptest.NewServer(h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "app")
	})))
	defer srv.Close()
	nonce := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, NonceSize))
	post := func(body string) (*http.Response, []byte) {
		resp, err := http.Post(srv.URL+ChallengePath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := post(`{"nonce":"` + nonce + `","gateway":"gw-1","host_id":"web-1","ts":1}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var cr ChallengeResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(cr.Signature)
	// Signed for the configured addr, not the one the request came to.
	if !ed25519.Verify(k.Public().(ed25519.PublicKey), ChallengeMessage("web-1", "127.0.0.1:9999", nonce, "gw-1"), sig) {
		t.Fatal("signature does not verify over the documented message")
	}

	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"not json", `{`, 400},
		{"short nonce", `{"nonce":"AAAA","gateway":"g","host_id":"web-1","ts":1}`, 400},
		{"nonce not base64", `{"nonce":"!!!!!!!!!!!!!!!!!!!!!!!!","gateway":"g","host_id":"web-1","ts":1}`, 400},
		// base64 decoders skip \r and \n; the signed text must not.
		{"newline in nonce", `{"nonce":"` + nonce[:8] + `\n` + nonce[8:] + `","gateway":"g","host_id":"web-1","ts":1}`, 400},
		{"trailing CRLF nonce", `{"nonce":"` + nonce + `\r\n","gateway":"g","host_id":"web-1","ts":1}`, 400},
		{"newline gateway", `{"nonce":"` + nonce + `","gateway":"g\nx","host_id":"web-1","ts":1}`, 400},
		{"no gateway", `{"nonce":"` + nonce + `","host_id":"web-1","ts":1}`, 400},
		{"other host", `{"nonce":"` + nonce + `","gateway":"g","host_id":"web-2","ts":1}`, 404},
		{"oversized", `{"nonce":"` + strings.Repeat("A", MaxChallengeSize) + `"}`, 413},
	} {
		if resp, b := post(tc.body); resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, resp.StatusCode, tc.status, b)
		}
	}
	resp2, err := http.Get(srv.URL + ChallengePath)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 405 || resp2.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d", resp2.StatusCode)
	}
	resp3, err := http.Get(srv.URL + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	b3, _ := io.ReadAll(resp3.Body)
	resp3.Body.Close()
	if string(b3) != "app" {
		t.Errorf("Wrap did not pass the app request through: %q", b3)
	}
}

// A body that cannot be read (broken chunked framing) is a bad request,
// not one too large: 413 would send whoever looks for the fault after the
// size of a body that was never too long.
func TestChallengeUnreadableBodyIs400(t *testing.T) {
	h, _ := newTestHost(t, &nats.Conn{}, nil)
	srv := httptest.NewServer(h.Wrap(http.NotFoundHandler()))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST "+ChallengePath+" HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d %q, want 400", resp.StatusCode, b)
	}
}

// A refused challenge says what is wrong with it, so whoever sent it can
// tell a field of the wrong type from a broken body.
func TestChallengeErrorsNameTheProblem(t *testing.T) {
	h, _ := newTestHost(t, &nats.Conn{}, nil)
	nonce := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, NonceSize))
	for _, tc := range []struct{ name, body, want string }{
		{"nonce a number", `{"nonce":5,"gateway":"g","host_id":"web-1","ts":1}`, "nonce"},
		{"ts a string", `{"nonce":"` + nonce + `","gateway":"g","host_id":"web-1","ts":"now"}`, "ts"},
		{"truncated", `{"nonce":`, "unexpected end of JSON"},
		{"short nonce", `{"nonce":"AAAA","gateway":"g","host_id":"web-1","ts":1}`, "nonce"},
	} {
		w := httptest.NewRecorder()
		h.ChallengeHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, ChallengePath, strings.NewReader(tc.body)))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s: %d %q, want 400 naming %q", tc.name, w.Code, w.Body.String(), tc.want)
		}
	}
}

// recorder collects what a host publishes on the bus.
type recorder struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func record(t *testing.T, nc *nats.Conn, cluster string) *recorder {
	r := &recorder{}
	sub, err := nc.Subscribe(WildcardSubject(cluster), func(m *nats.Msg) {
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *recorder) count(subject string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m.Subject == subject {
			n++
		}
	}
	return n
}

func (r *recorder) last(subject string) *nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.msgs) - 1; i >= 0; i-- {
		if r.msgs[i].Subject == subject {
			return r.msgs[i]
		}
	}
	return nil
}

func TestRunAnnouncesHeartbeatsLeaves(t *testing.T) {
	ns := testutil.StartBus(t)
	watch := testutil.Connect(t, ns.ClientURL())
	rec := record(t, watch, "c1")
	nc := testutil.Connect(t, ns.ClientURL())
	var inflight int64 = 3
	h, k := newTestHost(t, nc, func(o *Options) { o.Inflight = func() int64 { return inflight } })

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count(HeartbeatSubject("c1")) >= 2 }, "no heartbeats")
	a, err := ParseAnnounce(rec.last(AnnounceSubject("c1")).Data)
	if err != nil {
		t.Fatal(err)
	}
	if a.HostID != "web-1" || a.Addr != "127.0.0.1:9999" || a.Scheme != "http" || a.PublicKey != PublicKeyString(k.Public().(ed25519.PublicKey)) {
		t.Fatalf("announce %+v", a)
	}
	m := rec.last(HeartbeatSubject("c1"))
	hb, err := ParseHeartbeat(m.Data)
	if err != nil || hb.Inflight != 3 || m.Reply == "" {
		t.Fatalf("heartbeat %+v reply %q: %v", hb, m.Reply, err)
	}

	// A gateway that does not know us answers a heartbeat: we announce again.
	before := rec.count(AnnounceSubject("c1"))
	if err := watch.Publish(m.Reply, []byte("announce")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count(AnnounceSubject("c1")) > before }, "no announce after a gateway asked")

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count(LeaveSubject("c1")) == 1 }, "no leave")
	l, err := ParseLeave(rec.last(LeaveSubject("c1")).Data)
	if err != nil {
		t.Fatal(err)
	}
	// Gateways drain only on a leave signed by the key the host proved.
	sig, _ := base64.StdEncoding.DecodeString(l.Sig)
	if l.HostID != "web-1" || !ed25519.Verify(k.Public().(ed25519.PublicKey), LeaveMessage(l.HostID, l.TS), sig) {
		t.Fatalf("leave %+v is not signed by the host's key", l)
	}
	if err := h.Run(t.Context()); err == nil {
		t.Fatal("second Run accepted")
	}
}

// cutter is a TCP proxy in front of the bus whose connections the test
// can cut, to make a client reconnect for real.
type cutter struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, target string) *cutter {
	return newCutterAt(t, "127.0.0.1:0", target)
}

// newCutterAt is newCutter listening on addr, for a bus that comes up
// where a client has been trying to reach it.
func newCutterAt(t *testing.T, addr, target string) *cutter {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln}
	c.wg.Go(func() { c.accept(target) })
	t.Cleanup(func() { ln.Close(); c.cut(); c.wg.Wait() })
	return c
}

func (c *cutter) accept(target string) {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		c.wg.Go(func() { io.Copy(out, in); out.Close() })
		c.wg.Go(func() { io.Copy(in, out); in.Close() })
	}
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cn := range c.conns {
		cn.Close()
	}
	c.conns = nil
}

func TestRunReannouncesAfterReconnect(t *testing.T) {
	ns := testutil.StartBus(t)
	watch := testutil.Connect(t, ns.ClientURL())
	rec := record(t, watch, "c1")
	cut := newCutter(t, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	nc := testutil.Connect(t, "nats://"+cut.ln.Addr().String())
	h, _ := newTestHost(t, nc, func(o *Options) { o.HeartbeatInterval = time.Hour })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count(AnnounceSubject("c1")) == 1 }, "no first announce")
	cut.cut()
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count(AnnounceSubject("c1")) == 2 }, "no announce after reconnect")
	cancel()
	<-done
}

// A heartbeat says the host is alive now. One published while the bus is
// out of reach waits in the client's reconnect buffer, and all of them
// reach the gateways at once when it comes back (a gateway that restarted
// answers every one for a host it does not know): Run sends none while
// disconnected, and the announce on reconnect says the host is back.
func TestRunSendsNoHeartbeatsWhileDisconnected(t *testing.T) {
	ns := testutil.StartBus(t)
	watch := testutil.Connect(t, ns.ClientURL())
	rec := record(t, watch, "c1")
	busAddr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	nc, err := nats.Connect("nats://"+busAddr, nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var down atomic.Bool // heartbeats made while the bus is down say inflight 7
	down.Store(true)
	h, _ := newTestHost(t, nc, func(o *Options) {
		o.HeartbeatInterval = 20 * time.Millisecond
		o.Inflight = func() int64 {
			if down.Load() {
				return 7
			}
			return 0
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	time.Sleep(15 * 20 * time.Millisecond) // 15 intervals with the bus out of reach
	down.Store(false)
	newCutterAt(t, busAddr, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count(HeartbeatSubject("c1")) >= 3 }, "no heartbeats once the bus came up")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec.count(AnnounceSubject("c1")) == 0 {
		t.Error("no announce once the bus came up")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	stale := 0
	for _, m := range rec.msgs {
		if hb, err := ParseHeartbeat(m.Data); m.Subject == HeartbeatSubject("c1") && err == nil && hb.Inflight == 7 {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("%d heartbeats made while the bus was down reached it when it came back", stale)
	}
}

// Announces are unsigned, so anyone may republish a host's after it
// leaves; a leaving host must never answer a challenge again, or a
// gateway would put it back into rotation while it shuts down. The
// challenge is sent as soon as the leave is seen on the bus: by then the
// host already refuses.
func TestLeavingHostRefusesChallenges(t *testing.T) {
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	watch := testutil.Connect(t, ns.ClientURL())
	h, _ := newTestHost(t, nc, nil)
	srv := httptest.NewServer(h.Wrap(http.NotFoundHandler()))
	defer srv.Close()
	nonce := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, NonceSize))
	challenge := func() (int, string) {
		resp, err := http.Post(srv.URL+ChallengePath, "application/json",
			strings.NewReader(`{"nonce":"`+nonce+`","gateway":"gw-1","host_id":"web-1","ts":1}`))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	type answer struct {
		status int
		body   string
	}
	onLeave := make(chan answer, 1)
	sub, err := watch.Subscribe(LeaveSubject("c1"), func(*nats.Msg) {
		s, b := challenge()
		onLeave <- answer{s, b}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	if s, b := challenge(); s != http.StatusOK || !strings.Contains(b, `"signature"`) {
		t.Fatalf("running host: %d %q, want 200 with a signature", s, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var got []answer
	select {
	case a := <-onLeave:
		got = append(got, a)
	case <-time.After(5 * time.Second):
		t.Fatal("no leave")
	}
	s, b := challenge()
	got = append(got, answer{s, b})
	for i, a := range got {
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "host is leaving") || strings.Contains(a.body, "signature") {
			t.Errorf("challenge %d after leave: %d %q, want 503 \"host is leaving\" and no signature", i, a.status, a.body)
		}
	}
}

// A host no gateway challenges serves nothing, and would say nothing: Run
// warns after three heartbeat intervals, naming what to check: the cluster
// and bus when no gateway answers at all, the enrolment and the address
// when one answers that it does not know the host. Once a challenge is
// answered it stays quiet. A host of a cluster no gateway serves gets
// NATS's "no responders" status on its inbox for every heartbeat: that
// is no gateway answering, and the warning must send the operator to the
// cluster id, not to the enrolment.
func TestRunWarnsWhileNoGatewayChallenges(t *testing.T) {
	const nobody = `"msg":"host: no gateway has challenged this host or answered its heartbeats`
	for _, c := range []struct {
		name      string
		listen    bool // something subscribes to the heartbeat subject
		answer    bool // a gateway answers heartbeats "announce"
		challenge bool // a challenge is answered before the third interval
		want      string
	}{
		{"nobody there", true, false, false, nobody},
		{"no subscriber: another cluster", false, false, false, nobody},
		{"gateway does not know the host", true, true, false, `"msg":"host: a gateway answers that it does not know this host`},
		{"challenged", true, true, true, `"msg":"host: answered a gateway's first challenge"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := testutil.StartBus(t)
			gw := testutil.Connect(t, ns.ClientURL())
			beats := make(chan *nats.Msg, 64)
			if c.listen {
				if _, err := gw.ChanSubscribe(HeartbeatSubject("c1"), beats); err != nil {
					t.Fatal(err)
				}
			}
			var logs testutil.SyncBuffer
			h, _ := newTestHost(t, testutil.Connect(t, ns.ClientURL()), func(o *Options) {
				o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				o.HeartbeatInterval = 20 * time.Millisecond
			})
			if c.challenge {
				nonce := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, NonceSize))
				w := httptest.NewRecorder()
				h.ChallengeHandler().ServeHTTP(w, httptest.NewRequest("POST", ChallengePath,
					strings.NewReader(`{"nonce":"`+nonce+`","gateway":"gw-1","host_id":"web-1","ts":1}`)))
				if w.Code != 200 {
					t.Fatalf("challenge: %d %s", w.Code, w.Body)
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- h.Run(ctx) }()
			for n := 0; c.listen && n < 8; n++ { // past the third interval, with room
				select {
				case m := <-beats:
					if c.answer {
						_ = gw.Publish(m.Reply, []byte("announce"))
					}
				case <-time.After(5 * time.Second):
					t.Fatal("no heartbeat")
				}
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), c.want) }, "log lacks "+c.want+":\n"+logs.String())
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(logs.String(), `"level":"WARN","msg":"host: `)
			if warned == c.challenge {
				t.Errorf("warned %v, challenged %v:\n%s", warned, c.challenge, logs.String())
			}
		})
	}
}

// A gateway sends its whole challenge at once and waits 5 s for the
// answer (DESIGN §4). A body still coming after that is nobody's
// challenge: the host answers 408 rather than hold the request (and a
// sidecar's drain) for as long as its sender dribbles. The bound is the
// challenge's own: a request after it on the same connection, to the
// app, may take its time.
func TestChallengeBodyReadIsBounded(t *testing.T) {
	t.Parallel()
	h, _ := newTestHost(t, &nats.Conn{}, nil)
	h.challengeReadTimeout = 100 * time.Millisecond
	srv := httptest.NewServer(h.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})))
	t.Cleanup(srv.Close) // after the connections' cleanups: it waits for their handlers
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	read := func(br *bufio.Reader) (int, string) {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	c, br := dial()
	start := time.Now()
	io.WriteString(c, "POST "+ChallengePath+" HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n{")
	if s, b := read(br); s != http.StatusRequestTimeout || !strings.Contains(b, "host: challenge body") {
		t.Errorf("dribbled challenge: %d %q, want 408 naming the challenge body", s, b)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("dribbled challenge answered after %s", d)
	}

	c, br = dial()
	nonce := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, NonceSize))
	body := `{"nonce":"` + nonce + `","gateway":"gw-1","host_id":"web-1","ts":1}`
	io.WriteString(c, "POST "+ChallengePath+" HTTP/1.1\r\nHost: h\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	if s, b := read(br); s != http.StatusOK {
		t.Fatalf("challenge: %d %q", s, b)
	}
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nab")
	time.Sleep(3 * h.challengeReadTimeout) // slower than a challenge may be
	io.WriteString(c, "cd")
	if s, b := read(br); s != http.StatusOK || b != "abcd" {
		t.Errorf("app request after a challenge on the same connection: %d %q, want 200 \"abcd\"", s, b)
	}
}

// A connection nats.go gives up on (the bus refuses the host's
// credential, which it does not retry for ever) ends Run at once, with
// the reason: it waited for its next heartbeat tick and said only "bus
// connection closed", and the sidecar exited with that.
func TestRunSaysWhyTheBusClosed(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, Authorization: "right"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("bus not ready")
	}
	nc, err := nats.Connect("nats://wrong@"+ns.Addr().String(), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h, _ := newTestHost(t, nc, func(o *Options) { o.HeartbeatInterval = time.Hour })
	done := make(chan error, 1)
	go func() { done <- h.Run(t.Context()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("Run: %v, want the bus's refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still going 10s after its bus connection closed")
	}
}

// The challenge's read bound never loosens a stricter one of the server
// it runs on: an app whose http.Server has a ReadTimeout under 5 s keeps
// it on the challenge path too.
func TestChallengeKeepsTheServersShorterReadTimeout(t *testing.T) {
	t.Parallel()
	h, _ := newTestHost(t, &nats.Conn{}, nil)
	srv := httptest.NewUnstartedServer(h.Wrap(http.NotFoundHandler()))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "POST "+ChallengePath+" HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n{")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within 3s to a challenge dribbled past the server's 200ms ReadTimeout: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "within 200ms") {
		t.Errorf("%d %q, want 408 naming 200ms", resp.StatusCode, b)
	}
}
