package peers

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
	"github.com/nats-io/nats.go"
)

// Options configures discovery. Zero values are the documented defaults.
type Options struct {
	// Self is this cluster: ID and URL are required; a nil PublicKey is
	// derived from Key (a non-nil one must match it).
	Self cluster.Peer
	// Key is the cluster's Ed25519 key (the same for every gateway of the
	// cluster); it signs announcements. Required.
	Key ed25519.PrivateKey
	// Static is the configured cluster list. Active is ignored. An entry
	// for Self's id is allowed (one list for every cluster) and must carry
	// Self's key.
	Static []cluster.Peer
	// StaticOnly drops announcements of ids the static list lacks.
	StaticOnly bool
	// Conn is the bus; nil means no announcements (static probes only).
	Conn *nats.Conn
	// NoAnnounce listens to the other clusters' announcements on Conn but
	// does not announce this one (it has no public URL to be reached at).
	NoAnnounce bool
	// ProbeInterval is the time between health probes of a peer (static
	// or announced); 0 means 5 s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe; 0 means ProbeInterval / 2.
	ProbeTimeout time.Duration
	// Misses is how many probe failures in a row, or announce intervals of
	// silence, make a cluster inactive; 0 means 3.
	Misses int
	// AnnounceInterval is the time between own announcements; 0 means 5 s.
	AnnounceInterval time.Duration
	// ForgetAfter is how long an announced (non-static) cluster is kept,
	// inactive, after its last announcement; 0 means 10 minutes.
	ForgetAfter time.Duration
	// MaxAnnounced bounds the number of announced (non-static) clusters
	// remembered; 0 means 256. Announcements of new ids beyond it are
	// dropped.
	MaxAnnounced int
	// HTTPClient makes the probes; nil means a client of its own with
	// ProbeTimeout that uses no proxy and follows no redirect, as forwards
	// do not.
	HTTPClient *http.Client
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Peers tracks the cluster set. Set and Discovery may be called
// concurrently with Run and each other.
type Peers struct {
	opts   Options
	self   cluster.Peer
	log    *slog.Logger
	now    func() time.Time
	client *http.Client
	window time.Duration // silence after which an announced cluster is inactive

	set     cluster.Holder
	running atomic.Bool

	mu      sync.Mutex
	members map[string]*member // every peer but self
	probes  *probeGroup        // while Run runs: where an announced member's probe loop starts
}

// probeGroup is Run's context and wait group, for the probe loops of
// clusters first announced while it runs.
type probeGroup struct {
	ctx context.Context
	wg  *sync.WaitGroup
}

// member is discovery's state for one peer. Guarded by Peers.mu.
type member struct {
	peer     cluster.Peer // Active unused here
	static   bool
	probeUp  bool
	fails    int       // consecutive probe failures
	lastSeen time.Time // last accepted announcement; zero: none
	stop     func()    // ends an announced member's probe loop; nil: none runs
	// wrongWarned is when a probe last logged that the peer answered as
	// another cluster; such a warning is repeated at most every
	// identityWarnEvery while it lasts.
	wrongWarned time.Time
	// downWarned: an inactive warning was logged since the member was
	// last active (logState), so a run of missed probes warns once.
	downWarned bool
}

// identityWarnEvery bounds the "answered as another cluster" warnings of
// one peer: a misconfigured URL fails every probe, every 5 s.
const identityWarnEvery = time.Minute

// errWrongCluster: the peer's /healthz answered, but as another cluster.
var errWrongCluster = errors.New("peers: peer answered as another cluster")

// New validates opts. It starts nothing.
func New(opts Options) (*Peers, error) {
	if len(opts.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("peers: Key is not an Ed25519 private key")
	}
	pub := opts.Key.Public().(ed25519.PublicKey)
	if opts.Self.PublicKey == nil {
		opts.Self.PublicKey = pub
	} else if !opts.Self.PublicKey.Equal(pub) {
		return nil, errors.New("peers: Self.PublicKey does not match Key")
	}
	if err := opts.Self.Validate(); err != nil {
		return nil, fmt.Errorf("peers: self: %w", err)
	}
	if opts.ProbeInterval < 0 || opts.ProbeTimeout < 0 || opts.AnnounceInterval < 0 || opts.ForgetAfter < 0 || opts.Misses < 0 || opts.MaxAnnounced < 0 {
		return nil, errors.New("peers: intervals, Misses and MaxAnnounced must not be negative")
	}
	client := opts.HTTPClient
	setDefaults(&opts)
	if client == nil {
		// Forwards never go through an environment proxy, so neither does
		// the probe that decides whether they may; a redirect is answered
		// by some other server than the peer's gateway, so it is a miss.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		client = &http.Client{
			Timeout:       opts.ProbeTimeout,
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	p := &Peers{opts: opts, log: opts.Logger, now: opts.Now, client: client, members: map[string]*member{}}
	p.self = cluster.Peer{ID: opts.Self.ID, URL: opts.Self.URL, PublicKey: opts.Self.PublicKey, Active: true}
	p.window = time.Duration(opts.Misses) * opts.AnnounceInterval
	for _, s := range opts.Static {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("peers: static: %w", err)
		}
		if s.ID == p.self.ID {
			if !s.PublicKey.Equal(p.self.PublicKey) {
				return nil, fmt.Errorf("peers: static cluster %q is self but its public key is not the cluster key's", s.ID)
			}
			continue
		}
		if _, dup := p.members[s.ID]; dup {
			return nil, fmt.Errorf("peers: static cluster %q listed twice", s.ID)
		}
		s.Active = false
		p.members[s.ID] = &member{peer: s, static: true}
	}
	p.publishLocked()
	return p, nil
}

func setDefaults(o *Options) {
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 5 * time.Second
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = o.ProbeInterval / 2
	}
	if o.Misses == 0 {
		o.Misses = 3
	}
	if o.AnnounceInterval == 0 {
		o.AnnounceInterval = 5 * time.Second
	}
	if o.ForgetAfter == 0 {
		o.ForgetAfter = 10 * time.Minute
	}
	if o.MaxAnnounced == 0 {
		o.MaxAnnounced = 256
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Set returns the current cluster set: self (always active) and every
// known peer. Cheap: one atomic load.
func (p *Peers) Set() cluster.Set { return p.set.Load() }

// Run probes, announces and listens until ctx ends, then returns nil
// after every goroutine it started has returned. It may be called once.
func (p *Peers) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("peers: Run called twice")
	}
	var wg sync.WaitGroup
	p.mu.Lock()
	p.probes = &probeGroup{ctx: ctx, wg: &wg}
	for id, m := range p.members {
		if m.static {
			wg.Go(func() { p.probeLoop(ctx, id) })
		}
	}
	p.mu.Unlock()
	if p.opts.Conn != nil {
		sub, err := p.opts.Conn.Subscribe(cluster.Subject, p.onAnnouncement)
		if err != nil {
			// The bus may come later; static probes keep working.
			p.log.Warn("peers: subscribe failed; announcements ignored", "subject", cluster.Subject, "err", err)
		} else {
			defer sub.Unsubscribe() //nolint:errcheck // best effort on shutdown
		}
		if !p.opts.NoAnnounce {
			wg.Go(func() { p.announceLoop(ctx) })
		}
	}
	wg.Go(func() { p.sweepLoop(ctx) })
	<-ctx.Done()
	// No probe loop starts after this: an announcement delivered late
	// finds no group.
	p.mu.Lock()
	p.probes = nil
	p.mu.Unlock()
	wg.Wait()
	if p.opts.HTTPClient == nil {
		p.client.CloseIdleConnections()
	}
	return nil
}

// probeLoop probes one member every ProbeInterval, the first time at
// once, at its URL of the moment (an announced one may move), until ctx
// ends or the member is forgotten.
func (p *Peers) probeLoop(ctx context.Context, id string) {
	t := time.NewTicker(p.opts.ProbeInterval)
	defer t.Stop()
	for {
		p.mu.Lock()
		m := p.members[id]
		var peer cluster.Peer
		if m != nil {
			peer = m.peer
		}
		p.mu.Unlock()
		if m == nil {
			return
		}
		err := p.probe(ctx, peer)
		if ctx.Err() != nil {
			return
		}
		p.recordProbe(id, peer.URL, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe GETs {url}/healthz; only a 200 that names the peer in
// X-Gatehouse-Cluster (which every gateway answer carries, DESIGN §5.2)
// is healthy. Without the name a `clusters:` entry whose URL reaches
// another cluster's gateway, or this one's, would count as up, and that
// gateway would take the peer's forwards.
func (p *Peers) probe(ctx context.Context, peer cluster.Peer) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(peer.URL, "/")+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return explainPeerTLS(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Values(cluster.HeaderCluster); len(got) != 1 || got[0] != peer.ID {
		return fmt.Errorf("%w: X-Gatehouse-Cluster %q, not %q", errWrongCluster, got, peer.ID)
	}
	return nil
}

// untrustedPeerCA is added to a probe's error when the peer's certificate
// chains to no root this gateway trusts: gatehouse has no setting for a
// private CA, Go's system roots (SSL_CERT_FILE, SSL_CERT_DIR on Linux)
// are where it goes (docs/config.md, "Private CA"). The same sentence as
// the forward's to that peer says (internal/gateway's untrustedPeerCA), a
// copy: peers may import internal/cluster and internal/problem alone
// (STYLE §6.1, internal/gatehouse's TestDeps), not the gateway.
const untrustedPeerCA = "the peer cluster's certificate is not signed by a CA this process trusts: for a private CA, start gatehouse with SSL_CERT_FILE set to the CA's PEM file, or SSL_CERT_DIR to a directory holding it"

// explainPeerTLS returns err with untrustedPeerCA when the peer's
// certificate's signer is unknown, and err as it is otherwise.
func explainPeerTLS(err error) error {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w (%s)", err, untrustedPeerCA)
	}
	return err
}

// recordProbe applies the outcome of a probe of id at url; a probe of a
// URL the member has since moved from counts for nothing.
func (p *Peers) recordProbe(id, url string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.members[id]
	if m == nil || m.peer.URL != url {
		return
	}
	now := p.now()
	if errors.Is(err, errWrongCluster) && now.Sub(m.wrongWarned) >= identityWarnEvery {
		m.wrongWarned = now
		p.log.Warn("peers: peer answered as another cluster; its URL does not reach its gateway (one line per peer a minute while it lasts)",
			"cluster", id, "url", url, "err", err)
	}
	// What the set says, not what the member's state gives at now: an
	// announced member whose silence ran out since the last sweep is
	// still active there, and the sweep would warn of its turn again.
	cur, _ := p.set.Load().Peer(id)
	was := cur.Active
	if err == nil {
		m.fails, m.probeUp = 0, true
	} else {
		m.fails++
		if m.fails >= p.opts.Misses {
			m.probeUp = false
		}
	}
	args := []any{"cluster", id, "source", "probe"}
	if err != nil {
		// Only a miss has one: a nil err logs as "err":null, which reads
		// as a failure to whoever searches the log for errors.
		args = append(args, "err", err)
	}
	switch is := p.activeLocked(m, now); {
	case is != was:
		p.logState(m, is, args...)
		p.publishLocked()
	case !is && m.fails == p.opts.Misses && !m.downWarned:
		// Down from the start (a wrong URL, a firewall), a static peer
		// never turns inactive, and would never be logged: every
		// request for its apps is served here without a word about why.
		// Its misses say so once, as a peer that goes down does.
		p.logState(m, false, args...)
	}
}

// announceLoop publishes this cluster's announcement every
// AnnounceInterval, the first time at once.
func (p *Peers) announceLoop(ctx context.Context) {
	t := time.NewTicker(p.opts.AnnounceInterval)
	defer t.Stop()
	for {
		a := cluster.Announce(p.opts.Key, p.self.ID, p.self.URL, p.now())
		b, _ := json.Marshal(a)
		if err := p.opts.Conn.Publish(cluster.Subject, b); err != nil {
			p.log.Debug("peers: announce failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweepLoop re-evaluates announced clusters twice per AnnounceInterval, so
// a silent one turns inactive at most half an interval late, and forgets
// long-silent ones.
func (p *Peers) sweepLoop(ctx context.Context) {
	t := time.NewTicker(p.opts.AnnounceInterval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.sweep()
		}
	}
}

func (p *Peers) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	changed := false
	for id, m := range p.members {
		if !m.static && now.Sub(m.lastSeen) > p.opts.ForgetAfter {
			if m.stop != nil {
				m.stop()
			}
			delete(p.members, id)
			p.log.Info("peers: cluster forgotten", "cluster", id)
			changed = true
		}
	}
	cur := p.set.Load()
	for _, old := range cur.Peers() {
		if m := p.members[old.ID]; m != nil && p.activeLocked(m, now) != old.Active {
			p.logState(m, !old.Active, "cluster", old.ID, "source", "announcements")
			changed = true
		}
	}
	if changed {
		p.publishLocked()
	}
}

// onAnnouncement applies one message of gatehouse.clusters; it runs on
// the bus's delivery goroutine.
func (p *Peers) onAnnouncement(msg *nats.Msg) {
	now := p.now()
	peer, err := cluster.ParseAnnouncement(msg.Data, now)
	if err != nil {
		p.log.Warn("peers: announcement dropped", "err", err)
		return
	}
	if err := p.accept(peer, now); err != nil {
		p.log.Warn("peers: announcement dropped", "cluster", peer.ID, "err", err)
	}
}

// accept applies a verified announcement under the trust model of the
// package doc.
func (p *Peers) accept(peer cluster.Peer, now time.Time) error {
	if peer.ID == p.self.ID {
		if peer.PublicKey.Equal(p.self.PublicKey) {
			return nil // our own, or a sibling gateway's
		}
		return errors.New("peers: announces this cluster's id with another key")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.members[peer.ID]
	switch {
	case m == nil && p.opts.StaticOnly:
		return errors.New("peers: not on the static list")
	case m == nil && p.announcedLocked() >= p.opts.MaxAnnounced:
		return fmt.Errorf("peers: already %d announced clusters", p.opts.MaxAnnounced)
	case m == nil:
		m = &member{peer: peer}
		p.members[peer.ID] = m
	case !m.peer.PublicKey.Equal(peer.PublicKey):
		return errors.New("peers: key differs from the one known for this id")
	case !m.static && m.peer.URL != peer.URL:
		// The key holder may move its URL; the new one has not been
		// probed yet, and the old one's misses are not its own.
		m.peer.URL = peer.URL
		m.fails, m.probeUp = 0, false
	}
	if !m.static && m.stop == nil && p.probes != nil {
		// An announcement proves its sender holds the key, not that its
		// URL reaches a gateway that answers: that is probed as for a
		// static member.
		ctx, cancel := context.WithCancel(p.probes.ctx)
		m.stop = cancel
		id := peer.ID
		p.probes.wg.Go(func() { defer cancel(); p.probeLoop(ctx, id) })
	}
	m.lastSeen = now
	cur, _ := p.set.Load().Peer(peer.ID)
	is := p.activeLocked(m, now)
	if is && !cur.Active {
		p.logState(m, true, "cluster", peer.ID, "source", "announcements")
	}
	if is != cur.Active || cur.URL != m.peer.URL {
		p.publishLocked()
	}
	return nil
}

func (p *Peers) announcedLocked() int {
	n := 0
	for _, m := range p.members {
		if !m.static {
			n++
		}
	}
	return n
}

// activeLocked: the member's probes have not missed Misses times in a
// row, and it is known live: a static member by a probe that answered or
// a recent announcement, an announced one by a recent announcement only.
// Three misses make it inactive whatever it announces: a gateway that
// hangs (accepts connections, never answers) still announces on a shared
// bus, and every forward to it would wait out cluster.deadline.
func (p *Peers) activeLocked(m *member, now time.Time) bool {
	if m.fails >= p.opts.Misses {
		return false
	}
	announced := !m.lastSeen.IsZero() && now.Sub(m.lastSeen) < p.window
	if m.static {
		return m.probeUp || announced
	}
	return announced
}

// publishLocked builds and stores a new set from the members.
func (p *Peers) publishLocked() {
	now := p.now()
	all := make([]cluster.Peer, 0, len(p.members)+1)
	all = append(all, p.self)
	for _, m := range p.members {
		c := m.peer
		c.Active = p.activeLocked(m, now)
		all = append(all, c)
	}
	p.set.Store(cluster.NewSet(p.self.ID, all))
}

// logState logs member m turning active (info) or inactive: a warning,
// as its apps are served without their owner from then on. Called with
// p.mu held.
func (p *Peers) logState(m *member, active bool, args ...any) {
	m.downWarned = !active
	if active {
		p.log.Info("peers: cluster active", args...)
		return
	}
	p.log.Warn("peers: cluster inactive; its apps are served by the other clusters until it is back", args...)
}
