package host

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultHeartbeatInterval is DESIGN §4's heartbeat_interval.
const DefaultHeartbeatInterval = 5 * time.Second

// minHeartbeatInterval is the shortest HeartbeatInterval New takes. The
// gateways' own is at least 1 s; this floor only catches a unit mistake,
// and leaves tests room to run fast.
const minHeartbeatInterval = 10 * time.Millisecond

// challengeReadTimeout bounds how long the challenge handler waits for a
// challenge's body: a gateway sends it at once and gives up on the answer
// after 5 s (DESIGN §4), so a body still arriving later is nobody's.
const challengeReadTimeout = 5 * time.Second

// leaveFlushTimeout bounds how long Run waits for the leave message to
// reach the bus when it returns.
const leaveFlushTimeout = 2 * time.Second

// Options configure a [Host]. Conn, Cluster, HostID, Key, Apps and Addr are
// required.
type Options struct {
	// Conn is the bus connection. The caller owns it: Host neither
	// connects nor closes it. Connect it with reconnects on (for example
	// nats.MaxReconnects(-1)); Host announces again after each reconnect.
	// With nats.RetryOnFailedConnect(true) as well, the host may start
	// before its bus is up: it announces once the bus is reached. With
	// nats.PingInterval(2*time.Second) and nats.MaxPingsOutstanding(2), a
	// bus node gone silent without a close is left within ~6 s (nats.go's
	// defaults take ~6 min, while gateways drop a host after 3 missed
	// heartbeats); `gatehouse host` connects so. Close it only after Run
	// returns, or the leave is not sent.
	Conn *nats.Conn
	// Cluster is the cluster id (a DNS label).
	Cluster string
	// HostID is the id this host is enrolled under.
	HostID string
	// Key is the private half of the enrolled key. New keeps a copy.
	Key ed25519.PrivateKey
	// Apps are the apps this host serves; the enrolment must allow each.
	Apps []string
	// Addr is host:port where gateways reach this host, announced and
	// signed into every challenge answer. It must name one machine: not
	// ":8080", not "0.0.0.0:8080".
	Addr string
	// Scheme is how gateways talk to Addr: http, h2c, https or tls.
	// Empty means http.
	Scheme string
	// HeartbeatInterval is how often Run sends a heartbeat. Zero means 5 s;
	// negative or under 10 ms (a bare 5 is 5 ns) is an error. It must
	// match the gateways' setting, which is at least 1 s.
	HeartbeatInterval time.Duration
	// Inflight reports requests in progress, sent with each heartbeat.
	// Nil reports 0. Called from Run's goroutine.
	Inflight func() int64
	// Logger receives protocol events. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for message timestamps. Nil means time.Now.
	Now func() time.Time
}

// Host runs the host side of discovery for one host id. ChallengeHandler
// and Wrap may be used before, during and after Run, from any goroutine.
type Host struct {
	opts    Options
	pub     string
	running atomic.Bool
	// leaving is set once Run has decided to leave, before the leave is
	// published. Announces are unsigned, so anyone may republish ours
	// after we leave; a challenge answer is what would bring us back
	// into rotation, and a leaving host must never give one again.
	leaving atomic.Bool
	// challenged is set by the first challenge answered: a gateway has
	// found this host, and Run stops warning that none has.
	challenged atomic.Bool
	// challengeReadTimeout bounds the read of a challenge's body; tests
	// shorten it.
	challengeReadTimeout time.Duration
}

// A host nobody challenges serves nothing, and only the gateway's log
// says why. So Run warns, after warnQuietAfter heartbeat intervals without
// a challenge and then every warnQuietEvery, with what to check.
const (
	warnQuietAfter = 3
	warnQuietEvery = 60
)

// New validates opts and returns a Host. It starts nothing.
func New(opts Options) (*Host, error) {
	if opts.Scheme == "" {
		opts.Scheme = SchemeHTTP
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Inflight == nil {
		opts.Inflight = func() int64 { return 0 }
	}
	// Our own copies: the key announced must stay the key signed with,
	// whatever the caller does with its slices later.
	opts.Apps = slices.Clone(opts.Apps)
	opts.Key = slices.Clone(opts.Key)
	if err := opts.validate(); err != nil {
		return nil, err
	}
	pub := opts.Key.Public().(ed25519.PublicKey)
	return &Host{opts: opts, pub: PublicKeyString(pub), challengeReadTimeout: challengeReadTimeout}, nil
}

func (o *Options) validate() error {
	switch {
	case o.Conn == nil:
		return errors.New("host: Conn is required")
	case !ValidCluster(o.Cluster):
		return fmt.Errorf("host: Cluster %q is not a DNS label", o.Cluster)
	case !ValidHostID(o.HostID):
		return fmt.Errorf("host: HostID %q invalid (1-128 of A-Z a-z 0-9 . _ -)", o.HostID)
	case len(o.Key) != ed25519.PrivateKeySize:
		return errors.New("host: Key must be an ed25519 private key")
	case !ed25519.NewKeyFromSeed(o.Key.Seed()).Equal(o.Key):
		// Sign uses the public half as given: a key whose halves come
		// from two keys announces one it cannot sign for.
		return errors.New("host: Key's public half is not its seed's: not one ed25519 private key")
	case o.HeartbeatInterval < 0:
		return fmt.Errorf("host: HeartbeatInterval %s is negative", o.HeartbeatInterval)
	case o.HeartbeatInterval < minHeartbeatInterval:
		// Most likely a bare number meant as seconds: Run would
		// heartbeat as fast as it can publish, to every gateway.
		return fmt.Errorf("host: HeartbeatInterval %s is under %s: a time.Duration is nanoseconds (write 5 * time.Second, not 5)", o.HeartbeatInterval, minHeartbeatInterval)
	case !ValidScheme(o.Scheme):
		return fmt.Errorf("host: Scheme %q invalid (http, h2c, https or tls)", o.Scheme)
	}
	if err := CheckAddr(o.Addr); err != nil {
		return fmt.Errorf("host: Addr: %v", err)
	}
	a := o.announce(time.Unix(1, 0), "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	if err := a.Validate(); err != nil {
		return fmt.Errorf("host: %v", err)
	}
	return nil
}

func (o *Options) announce(now time.Time, pub string) Announce {
	return Announce{HostID: o.HostID, Apps: o.Apps, Addr: o.Addr, Scheme: o.Scheme, PublicKey: pub, TS: now.Unix()}
}

// PublicKey is the host's public key in enrolment form.
func (h *Host) PublicKey() string { return h.pub }

// Run announces the host, heartbeats every HeartbeatInterval while the
// bus is connected (none is buffered during an outage), announces
// again after every reconnect (and when a gateway that does not know the
// host, or failed to verify it, answers a heartbeat), and sends leave when
// ctx ends. It returns nil once leave is sent (or could not be flushed,
// which is logged), or an error as soon as the connection is closed under
// it: by its owner, or by nats.go giving up (a refused credential), whose
// reason the error then carries. Run may be called once.
func (h *Host) Run(ctx context.Context) error {
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("host: Run called twice")
	}
	nc := h.opts.Conn
	status := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(status)
	replies := make(chan *nats.Msg, 16)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return fmt.Errorf("host: subscribe: %w", err)
	}
	defer sub.Unsubscribe()

	t := time.NewTicker(h.opts.HeartbeatInterval)
	defer t.Stop()
	last := h.announce("start")
	ticks, asked := 0, false
	for {
		select {
		case <-ctx.Done():
			h.leaving.Store(true)
			h.leave()
			return nil
		case st := <-status:
			if st == nats.CLOSED {
				return closedError(nc)
			}
			last = h.announce("reconnect")
		case m := <-replies:
			// Only a gateway's "announce" asks. NATS itself answers a
			// heartbeat that nothing subscribes to (a cluster id no
			// gateway serves) with an empty "no responders" status
			// here; taken as a gateway's ask, it would send the
			// warning to the enrolment instead of the cluster id.
			if string(m.Data) != KindAnnounce {
				continue
			}
			asked = true
			// Every gateway that lacks us answers; one announce per
			// interval serves them all.
			if h.opts.Now().Sub(last) >= h.opts.HeartbeatInterval {
				last = h.announce("gateway asked")
			}
		case <-t.C:
			if nc.IsClosed() {
				return closedError(nc)
			}
			// A heartbeat published while the bus is out of reach would
			// wait in the reconnect buffer and reach the gateways late,
			// with every other one of the outage at once; the announce
			// on reconnect says we are back.
			if nc.IsConnected() {
				h.heartbeat(inbox)
			}
			ticks++
			if !h.challenged.Load() && ticks >= warnQuietAfter && (ticks-warnQuietAfter)%warnQuietEvery == 0 {
				h.warnQuiet(asked, time.Duration(ticks)*h.opts.HeartbeatInterval)
			}
		}
	}
}

// closedError is Run's error for a bus connection that closed under it,
// with the reason nats.go gave up (a refused credential, say) if it had
// one: the caller closing it early has none.
func closedError(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil {
		return fmt.Errorf("host: bus connection closed: %w", err)
	}
	return errors.New("host: bus connection closed")
}

// warnQuiet says that no gateway has challenged this host in waited, and
// what to check: asked is whether a gateway has answered a heartbeat (it
// does when it does not know the host or failed to verify it).
func (h *Host) warnQuiet(asked bool, waited time.Duration) {
	if !asked {
		h.opts.Logger.Warn("host: no gateway has challenged this host or answered its heartbeats, so none routes to it; check that the cluster is the gateway's (gatehouse serve -cluster) and that the bus is the gateway's",
			"host_id", h.opts.HostID, "cluster", h.opts.Cluster, "waited", waited.String())
		return
	}
	h.opts.Logger.Warn("host: a gateway answers that it does not know this host or could not verify it, and none has challenged it, so none routes to it; check its enrolment (gatehouse ctl keys get HOST_ID must show this public_key and every app in apps), that the gateway reaches addr, and the gateway's log",
		"host_id", h.opts.HostID, "public_key", h.pub, "apps", h.opts.Apps, "addr", h.opts.Addr, "waited", waited.String())
}

func (h *Host) announce(why string) time.Time {
	now := h.opts.Now()
	h.publish(&nats.Msg{Subject: AnnounceSubject(h.opts.Cluster)}, h.opts.announce(now, h.pub))
	h.opts.Logger.Debug("host: announced", "host_id", h.opts.HostID, "addr", h.opts.Addr, "why", why)
	return now
}

func (h *Host) heartbeat(inbox string) {
	hb := Heartbeat{HostID: h.opts.HostID, TS: h.opts.Now().Unix(), Inflight: max(h.opts.Inflight(), 0)}
	h.publish(&nats.Msg{Subject: HeartbeatSubject(h.opts.Cluster), Reply: inbox}, hb)
}

func (h *Host) leave() {
	ts := h.opts.Now().Unix()
	l := Leave{HostID: h.opts.HostID, TS: ts, Sig: SignLeave(h.opts.Key, h.opts.HostID, ts)}
	h.publish(&nats.Msg{Subject: LeaveSubject(h.opts.Cluster)}, l)
	if err := h.opts.Conn.FlushTimeout(leaveFlushTimeout); err != nil {
		h.opts.Logger.Warn("host: leave may not have reached the bus", "host_id", h.opts.HostID, "err", err)
		return
	}
	h.opts.Logger.Info("host: left", "host_id", h.opts.HostID)
}

func (h *Host) publish(m *nats.Msg, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		panic(err) // our own fixed types always marshal
	}
	m.Data = b
	if err := h.opts.Conn.PublishMsg(m); err != nil {
		h.opts.Logger.Warn("host: publish failed", "host_id", h.opts.HostID, "subject", m.Subject, "err", err)
	}
}

// SignChallenge signs the challenge message for hostID at addr and returns
// the signature in its wire form (std base64).
func SignChallenge(key ed25519.PrivateKey, hostID, addr, nonce, gateway string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, ChallengeMessage(hostID, addr, nonce, gateway)))
}

// SignLeave signs the leave message for hostID at ts and returns the
// signature in its wire form (std base64), the [Leave] Sig field.
func SignLeave(key ed25519.PrivateKey, hostID string, ts int64) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, LeaveMessage(hostID, ts)))
}

// ChallengeHandler answers POST [ChallengePath]: a valid challenge for this
// host id gets 200 and a [ChallengeResponse] signed for the configured
// Addr. It answers 405 for other methods, 413 for a body over
// [MaxChallengeSize], 408 for a body not all in within 5 s of the
// request's head, or the server's ReadTimeout if shorter (a gateway has
// given up by then; on a ResponseWriter that can set a read deadline),
// 400 for a body it cannot read or a malformed challenge, 404 for one
// meant for another host id and, once Run has begun to leave, 503 for
// every challenge. It does not look at the request path.
func (h *Host) ChallengeHandler() http.Handler { return http.HandlerFunc(h.serveChallenge) }

func (h *Host) serveChallenge(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "host: challenge takes POST", http.StatusMethodNotAllowed)
		return
	}
	bound := h.boundChallengeRead(w, r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxChallengeSize))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		http.Error(w, fmt.Sprintf("host: challenge body over %d bytes", MaxChallengeSize), http.StatusRequestEntityTooLarge)
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		http.Error(w, fmt.Sprintf("host: challenge body not in within %s", bound), http.StatusRequestTimeout)
		return
	}
	if err != nil {
		http.Error(w, "host: challenge body unreadable: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req ChallengeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		// Name what is wrong: a well-formed body with a field of the
		// wrong type is JSON too, and "not JSON" would mislead.
		http.Error(w, "host: challenge: bad json: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := req.Validate(); err != nil {
		http.Error(w, "host: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.HostID != h.opts.HostID {
		http.Error(w, "host: no such host id here", http.StatusNotFound)
		return
	}
	if h.leaving.Load() {
		// The gateways drain us on our leave; an answer now would let a
		// copy of our announce put us back while we shut down.
		http.Error(w, "host: host is leaving", http.StatusServiceUnavailable)
		return
	}
	sig := SignChallenge(h.opts.Key, h.opts.HostID, h.opts.Addr, req.Nonce, req.Gateway)
	if !h.challenged.Swap(true) {
		h.opts.Logger.Info("host: answered a gateway's first challenge", "host_id", h.opts.HostID, "gateway", req.Gateway)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(ChallengeResponse{Signature: sig})
}

// boundChallengeRead bounds the read of r's body and returns the bound.
// Whatever the server's own timeouts (a sidecar's has none for bodies,
// which it streams to its app), a body dribbled slower than any gateway
// waits would hold the handler, and a drain, for as long as its sender
// likes. A server's ReadTimeout at least as short is left to do it, as
// a deadline set here would loosen it. net/http resets the deadline for
// the next request on the connection; a ResponseWriter that cannot set
// one (an httptest.ResponseRecorder) reads unbounded.
func (h *Host) boundChallengeRead(w http.ResponseWriter, r *http.Request) time.Duration {
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok &&
		srv.ReadTimeout > 0 && srv.ReadTimeout <= h.challengeReadTimeout {
		return srv.ReadTimeout
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.challengeReadTimeout))
	return h.challengeReadTimeout
}

// Wrap returns a handler that answers [ChallengePath] itself and passes
// every other request to next.
func (h *Host) Wrap(next http.Handler) http.Handler {
	ch := h.ChallengeHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ChallengePath {
			ch.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
