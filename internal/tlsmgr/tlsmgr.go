package tlsmgr

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// ACMETLS1 is the ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737).
const ACMETLS1 = "acme-tls/1"

// Errors the on-demand decision returns.
var (
	ErrCustomDomainsOff = errors.New("tlsmgr: custom domains are off")
	ErrNotAllowed       = errors.New("tlsmgr: name not allowed for on-demand certificates")
	ErrBackoff          = errors.New("tlsmgr: on-demand order failed lately; backing off")
	// ErrNoNewOrder, wrapped in what Options.Allow returns, keeps a custom
	// domain the certificate it has (cached, or stored by any gateway of
	// the cluster) while it is valid, and orders it none: no first order,
	// no renewal. Its handshakes get that certificate, or the bootstrap
	// certificate when there is none.
	ErrNoNewOrder = errors.New("tlsmgr: name keeps the certificate it has but gets no new one")
)

// Manager serves certificates. Create it with New; TLSConfig,
// GetCertificate, HTTPHandler, Manage and Unmanage are safe for concurrent
// use and may be called before, during and after Run.
type Manager struct {
	opts Options
	log  *slog.Logger
	zap  *zap.Logger // certmagic's logger: its warnings and errors, to log (zaplog.go)

	boot  atomic.Pointer[tls.Certificate]  // the current bootstrap certificate
	cm    atomic.Pointer[certmagic.Config] // managed names; set while ACME is on
	od    atomic.Pointer[certmagic.Config] // on-demand custom domains; nil when off
	iss   atomic.Pointer[certmagic.ACMEIssuer]
	cache atomic.Pointer[certmagic.Cache] // set while ACME is on

	failed   failures   // on-demand names whose last order failed (backoff.go)
	orders   orders     // on-demand orders running in the background (backoff.go)
	unloaded unloaded   // on-demand names an allowed handshake got no certificate for
	missed   heldMisses // names kept without orders that had no certificate lately (loadHeld)

	mu    sync.Mutex
	names map[string]bool               // managed names (lower case)
	stop  map[string]context.CancelFunc // ends each managed name's orders; set while Run runs
	ctxs  map[string]context.Context    // each managed name's context, beside stop
	// checkEvery is how often Run looks for a managed name whose stored
	// certificate did not load (1 minute; tests shorten it).
	checkEvery time.Duration
	// obtainWait is how long a handshake waits for its name's on-demand
	// order (handshakeObtainBudget; tests shorten it).
	obtainWait time.Duration
	running    context.Context // Run's context, nil before Run
	ran        bool
	// held counts the locks certmagic's orders hold in Options.Storage;
	// set by startACME, for Run to wait on at its end. nil with
	// StorageDir: the file system outlives Run.
	held *heldLocks
}

// New validates opts and self-issues the bootstrap certificate. It starts
// nothing: ACME begins with Run.
func New(opts Options) (*Manager, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, log: opts.Logger, names: map[string]bool{}, stop: map[string]context.CancelFunc{}, ctxs: map[string]context.Context{}, checkEvery: time.Minute, obtainWait: handshakeObtainBudget}
	if d := opts.HandshakeTimeout; d > 0 && d < m.obtainWait {
		m.obtainWait = d
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m.zap = zapLogger(m.log)
	for _, n := range opts.Names {
		m.names[strings.ToLower(n)] = true
	}
	cert, err := selfIssue(opts.Names, opts.now(), opts.bootstrapTTL())
	if err != nil {
		return nil, err
	}
	m.boot.Store(cert)
	return m, nil
}

// Curve preferences: hybrid post-quantum first (DESIGN §3).
var (
	curves       = []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256}
	curvesPQOnly = []tls.CurveID{tls.X25519MLKEM768}
)

// suites12 are the TLS 1.2 cipher suites, Mozilla's "intermediate" set
// (as Caddy's default): forward secret AEADs only. Go's default list
// also takes ECDHE with AES-CBC and HMAC-SHA1, which that set dropped
// (Lucky13-style padding oracles) and every client it supports (IE 11 on
// Windows 7, Android 4.4, Java 8u31, Safari 9 onwards) does without.
// TLS 1.3's suites are not configurable and all AEADs.
var suites12 = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLSConfig returns a new *tls.Config for the https listener: TLS 1.2+
// (1.3 only with PQOnly, X25519MLKEM768 being a TLS 1.3 group), the TLS
// 1.2 suites and curve preferences above, ALPN h2, http/1.1, http/1.0 and acme-tls/1, and
// GetCertificate. http/1.0 is there because the listener serves HTTP/1.0
// requests: crypto/tls refuses a client whose offer names no protocol of
// the list (no_application_protocol), and curl 7.88 to 8.4 offer only
// http/1.0 for --http1.0; nginx accepts it too. It comes after http/1.1,
// so a client that offers both gets http/1.1.
func (m *Manager) TLSConfig() *tls.Config {
	c := &tls.Config{
		MinVersion:       tls.VersionTLS12,
		CipherSuites:     slices.Clone(suites12),
		CurvePreferences: slices.Clone(curves),
		NextProtos:       []string{"h2", "http/1.1", "http/1.0", ACMETLS1},
		GetCertificate:   m.GetCertificate,
	}
	if m.opts.PQOnly {
		c.MinVersion = tls.VersionTLS13
		c.CurvePreferences = slices.Clone(curvesPQOnly)
	}
	return c
}

// GetCertificate picks the certificate for a handshake (hello must come
// from a real handshake: certmagic reads hello.Conn): an ACME
// TLS-ALPN-01 challenge certificate, else what certmagic holds or may
// obtain on demand for the name, else the bootstrap certificate (also for
// unknown names, which therefore see the gateway's default certificate,
// never a pipe). A hello without SNI gets defaultCert. A custom domain's
// on-demand certificate is served only while the decision still allows
// the name (kept without orders, see loadHeld). One not cached is
// loaded from storage, else ordered in the background (loadOrOrder), one
// order per name at a time, which the handshake waits for up to
// obtainWait: an order often takes longer, and goes on for the handshakes
// after it.
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cfg := m.cm.Load()
	od := m.od.Load()
	if od != nil && m.coveredByManaged(hello.ServerName) {
		// A managed certificate is renewed by its own maintenance. Through
		// od, certmagic would "renew" a due one on demand, for the name
		// in the hello, which the decision refuses; and a refused renewal
		// drops the certificate from the cache: the whole zone would get
		// the bootstrap certificate.
		od = nil
	}
	if od != nil {
		cfg = od // same cache: managed names hit it too
	}
	if cfg == nil {
		return m.boot.Load(), nil
	}
	if hello.ServerName == "" {
		return m.defaultCert(), nil
	}
	isChallenge := len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ACMETLS1
	if isChallenge && !m.challengeable(hello.Context(), hello.ServerName) {
		return nil, fmt.Errorf("tlsmgr: no challenge for %s", hello.ServerName)
	}
	if od != nil && !isChallenge {
		if due := m.dueOnDemand(hello.ServerName); due != nil {
			serve, renew := m.stillAllowed(hello, due.Leaf)
			if !serve {
				return m.boot.Load(), nil
			}
			if renew {
				m.renewDue(od, hello.ServerName)
			}
			return &due.Certificate, nil
		}
	}
	ctx := hello.Context()
	if od != nil {
		var cancel context.CancelFunc
		ctx, cancel = withHandshakeWait(ctx, m.obtainWait)
		defer cancel()
		if !isChallenge && !m.awaitExpiredRenewal(ctx, hello.ServerName) {
			return m.boot.Load(), nil
		}
	}
	cert, err := cfg.GetCertificateWithContext(ctx, hello)
	if isChallenge {
		return cert, err // never a fallback for a challenge
	}
	switch {
	case od == nil:
	case errors.Is(err, errLoadOnly):
		cert, err = m.loadHeld(ctx, od, hello.ServerName)
	case errors.Is(err, errOrderInBackground):
		cert, err = m.loadOrOrder(ctx, od, hello)
	}
	if err != nil && od != nil && !errors.Is(err, errOrderInBackground) {
		m.noteUnloaded(hello.Context(), hello.ServerName, err)
	}
	if err == nil && cert != nil && cert.Leaf != nil && cert.Leaf.VerifyHostname(hello.ServerName) == nil {
		if od == nil || !m.onDemand(cert.Leaf) {
			return cert, nil
		}
		if serve, _ := m.stillAllowed(hello, cert.Leaf); serve {
			return cert, nil
		}
		return m.boot.Load(), nil
	}
	boot := m.boot.Load()
	if err == nil && cert != nil && len(cert.Certificate) > 0 && boot.Leaf.VerifyHostname(hello.ServerName) != nil {
		return cert, nil // certmagic's default beats a bootstrap that does not cover the name either
	}
	return boot, nil
}

// defaultCert is the certificate of a hello without SNI: the ACME
// certificate of the first of Options.Names (gatehouse's *.{zone}) while
// the cache holds a valid one, as most gateways serve one default
// certificate; else the bootstrap certificate. A client that names no
// server is most often a load balancer's check or one dialling an IP
// literal, which may then verify the zone's name; the bootstrap
// certificate, self-signed, verifies for nobody. The name alone is
// looked up, never an order or the storage: no SNI costs a map lookup.
func (m *Manager) defaultCert() *tls.Certificate {
	cache := m.cache.Load()
	if cache == nil || len(m.opts.Names) == 0 {
		return m.boot.Load()
	}
	name := strings.ToLower(m.opts.Names[0])
	for _, c := range cache.AllMatchingCertificates(name) {
		if c.Leaf != nil && !c.Expired() && slices.ContainsFunc(c.Leaf.DNSNames, func(n string) bool { return strings.EqualFold(n, name) }) {
			return &c.Certificate
		}
	}
	return m.boot.Load()
}

// loadOrOrder gets the certificate of a custom domain that the decision
// allows and that is not cached: from storage, in the handshake, as
// certmagic would (a read, outside the orders' bound: after a restart
// every name's first handshake loads); else, or when the stored one is
// past its end (its renewal is an order), from an order in the
// background (orderOnDemand), which the handshake waits for up to ctx's
// budget. errOrderInBackground: no certificate yet, the order runs or
// could not start.
func (m *Manager) loadOrOrder(ctx context.Context, od *certmagic.Config, hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(hello.ServerName)
	if _, err := od.CacheManagedCertificate(ctx, name); err == nil {
		if due := m.dueOnDemand(name); due != nil {
			m.renewDue(od, name)
			return &due.Certificate, nil
		}
		// Loaded expired while an order renews it: GetCertificate's wait
		// came before it was cached, so this one keeps the bound.
		if !m.awaitExpiredRenewal(ctx, name) {
			return nil, errOrderInBackground
		}
		cert, err := od.GetCertificateWithContext(ctx, hello)
		if !errors.Is(err, errOrderInBackground) {
			return cert, err
		}
	}
	done := m.orders.start(name, func(run context.Context) { m.orderOnDemand(run, od, hello.ServerName) })
	if done == nil {
		return nil, errOrderInBackground
	}
	select {
	case <-done:
		if due := m.dueOnDemand(name); due != nil { // loaded by the order
			m.renewDue(od, name)
			return &due.Certificate, nil
		}
		return od.GetCertificateWithContext(ctx, hello)
	case <-ctx.Done():
		return nil, errOrderInBackground
	}
}

// loadHeld gets the certificate of a custom domain that the decision
// keeps without orders (ErrNoNewOrder) and that is not cached: from
// storage, in the handshake, as loadOrOrder would, but never an order.
// One expired is not served: its renewal would be an order.
// errLoadOnly: none to serve.
//
// A miss is remembered for heldMissWait (missed), in which the name's
// handshakes read nothing: nothing orders its certificate meanwhile, and
// any client could otherwise make each of its handshakes a read of the
// shared storage. An expired one leaves the cache again: cached, each
// handshake went to certmagic's renewal of it, which the decision
// refuses (two errors logged), and was loaded again: 7 reads of the
// storage a handshake.
func (m *Manager) loadHeld(ctx context.Context, od *certmagic.Config, name string) (*tls.Certificate, error) {
	name = strings.ToLower(name)
	if m.missed.recent(name, m.opts.now()) {
		return nil, errLoadOnly
	}
	c, err := od.CacheManagedCertificate(ctx, name)
	if err == nil && !c.Expired() {
		return &c.Certificate, nil
	}
	if cache := m.cache.Load(); err == nil && cache != nil {
		cache.Remove([]string{c.Hash()})
	}
	m.missed.miss(name, m.opts.now())
	return nil, errLoadOnly
}

// orderOnDemand loads from storage or orders name's certificate for
// GetCertificate, in the background under run (Run's context), bounded by
// onDemandOrderBudget: certmagic's whole on-demand path, with a hello of
// the name alone (the handshake that asked may be gone). Its context
// carries handshakeObtain, so a failed order opens the name's backoff
// window (onEvent). A certificate that does not load is noted as a
// handshake's would be.
//
// certmagic makes whoever asks for a name that another is loading wait
// for it and share its outcome: an order that reaches it while a
// handshake of the name is asking gets that handshake's
// errOrderInBackground, which is no answer for the order, so it asks
// again (each time after waiting for one such handshake, which is quick).
//
// A stored certificate due for renewal (one the handshake could not read)
// is only loaded, and renewed by the handshakes' renewDue once this order
// ends: certmagic, loading it, would renew it on a goroutine of its own,
// which Run's end does not reach.
func (m *Manager) orderOnDemand(run context.Context, od *certmagic.Config, name string) {
	ctx, cancel := withHandshakeObtain(run, onDemandOrderBudget)
	defer cancel()
	ctx, stored := withStoreFailure(ctx, cancel)
	if _, err := od.CacheManagedCertificate(ctx, name); err == nil && m.dueOnDemand(name) != nil {
		return
	}
	var err error
	for range maxSharedRefusals {
		_, err = od.GetCertificateWithContext(ctx, &tls.ClientHelloInfo{ServerName: name})
		if !errors.Is(err, errOrderInBackground) || ctx.Err() != nil {
			break
		}
	}
	if serr := stored.failed(); serr != nil && run.Err() == nil {
		// The store refused a write (the issued certificate, perhaps):
		// the order was ended there (kvStorage.Store), and the name backs
		// off as after the CA's failure, or its next handshake would
		// order, and the CA issue, again.
		if _, blocked := m.failed.blocked(strings.ToLower(name), m.opts.now()); !blocked {
			f := m.failed.fail(strings.ToLower(name), m.opts.now())
			m.log.Error("tlsmgr: on-demand certificate failed; the name gets the bootstrap certificate and no new order until the window ends",
				"identifier", name, "err", serr, "window", f.wait, "until", f.until)
		}
		return
	}
	if err != nil && !errors.Is(err, errOrderInBackground) {
		m.noteUnloaded(run, name, err)
	}
}

// dueOnDemand returns the cached certificate of custom domain name when
// it is due for renewal and not expired yet; nil otherwise. GetCertificate
// serves it as it is and renews it itself (renewDue) instead of handing
// the handshake to certmagic: certmagic would renew it on a goroutine of
// its own, with a context of its own (5 minutes) that Run's does not
// reach, so a stop during that renewal waited ordersStopWait for its
// storage lock and returned with the renewal still talking to the CA and
// writing to the store that Run's caller then closed.
func (m *Manager) dueOnDemand(name string) *certmagic.Certificate {
	cache, od := m.cache.Load(), m.od.Load()
	if cache == nil || od == nil {
		return nil
	}
	name = strings.ToLower(name)
	for _, c := range cache.AllMatchingCertificates(name) {
		if c.Leaf == nil || !m.onDemand(c.Leaf) || c.Leaf.VerifyHostname(name) != nil {
			continue
		}
		if c.Expired() || !c.NeedsRenewal(od) {
			return nil // not due, or expired: certmagic's path (an expired one is renewed in an order, loadOrOrder)
		}
		return &c
	}
	return nil
}

// awaitExpiredRenewal waits, at most until ctx ends, for the order that
// renews name's expired certificate, when one runs and the expired one
// is cached, and reports whether the handshake may go on to certmagic
// (false: ctx ended first). Handed to certmagic, the handshake would wait
// for that renewal in renewDynamicCertificate as long as it runs, up to 2
// minutes and deaf to ctx: past the handshake's bound, holding its
// goroutine, and answered by a closed connection.
func (m *Manager) awaitExpiredRenewal(ctx context.Context, name string) bool {
	name = strings.ToLower(name)
	done := m.orders.running(name)
	if done == nil {
		return true
	}
	expired := false
	if cache := m.cache.Load(); cache != nil {
		for _, c := range cache.AllMatchingCertificates(name) {
			if c.Leaf != nil && m.onDemand(c.Leaf) && c.Leaf.VerifyHostname(name) == nil && c.Expired() {
				expired = true
				break
			}
		}
	}
	if !expired {
		return true
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// renewDue starts renewOnDemand for name among the background orders,
// unless one runs for it already, they are all taken (the next handshake
// tries again), or the name's last attempt failed lately (its window).
func (m *Manager) renewDue(od *certmagic.Config, name string) {
	name = strings.ToLower(name)
	if _, blocked := m.failed.blocked(name, m.opts.now()); blocked {
		return
	}
	m.orders.start(name, func(run context.Context) { m.renewOnDemand(run, od, name) })
}

// renewOnDemand renews the certificate of custom domain name under run
// (Run's context), bounded by onDemandOrderBudget, and then swaps the
// renewed one into the cache. Its context carries handshakeObtain, so a
// failed renewal opens the name's window, as a failed order does (onEvent);
// the name keeps its certificate meanwhile (dueOnDemand).
func (m *Manager) renewOnDemand(run context.Context, od *certmagic.Config, name string) {
	ctx, cancel := withHandshakeObtain(run, onDemandOrderBudget)
	defer cancel()
	ctx, stored := withStoreFailure(ctx, cancel)
	ctx = context.WithValue(ctx, renewingDue{}, true)
	if err := od.RenewCertAsync(ctx, name, false); err != nil {
		m.renewalFailed(run, ctx, name, stored, err)
		return
	}
	// The renewed certificate is cached before the current one leaves:
	// one that does not load (the store unreachable) leaves the name its
	// current certificate, still valid: no handshake finds the name with
	// none cached.
	renewed, err := od.CacheManagedCertificate(ctx, name)
	if err != nil {
		if ctx.Err() == nil {
			m.noteUnloaded(run, name, err)
		}
		return
	}
	c := m.cache.Load()
	if c == nil {
		return
	}
	var old []string
	for _, cert := range c.AllMatchingCertificates(name) {
		if cert.Hash() != renewed.Hash() && cert.Leaf != nil && m.onDemand(cert.Leaf) && cert.Leaf.VerifyHostname(name) == nil {
			old = append(old, cert.Hash())
		}
	}
	c.Remove(old)
}

// renewalFailed opens name's window after its renewal ended with err,
// unless onEvent opened it already (the CA's failure), Run ended, or the
// name is no longer allowed (its mapping deleted meanwhile: onEvent ended
// the renewal). A renewal that failed for another reason (the store: its
// check, its lock, a write, stored) opened none: the next handshake
// started another at once, and certmagic's retries within one ordered
// again. The name keeps its certificate, due but valid, meanwhile.
func (m *Manager) renewalFailed(run, ctx context.Context, name string, stored *storeFailure, err error) {
	if run.Err() != nil {
		return
	}
	if _, blocked := m.failed.blocked(name, m.opts.now()); blocked || m.allowed(run, name) != nil {
		return
	}
	// What ended it, rather than certmagic's context.Canceled.
	if serr := stored.failed(); serr != nil {
		err = serr
	} else if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("tlsmgr: no renewal within %s: %w", onDemandOrderBudget, err)
	}
	f := m.failed.fail(name, m.opts.now())
	m.log.Error("tlsmgr: on-demand certificate renewal failed; the name keeps its certificate and gets no new attempt until the window ends",
		"identifier", name, "err", err, "window", f.wait, "until", f.until)
}

// renewingDue marks the context of renewOnDemand, for onEvent: a failure
// there leaves the name the certificate it has.
type renewingDue struct{}

// maxSharedRefusals bounds how many handshakes' errOrderInBackground an
// order takes from certmagic before it gives up (orderOnDemand): a name's
// handshakes ask one after the other, each for as long as the decision
// takes, and the order gets in between; past it, the next handshake
// starts an order again.
const maxSharedRefusals = 8

// noteUnloaded notes a custom domain whose handshake certmagic answered
// with err for checkUnloaded, unless err is the decision's refusal (an
// unknown name, a backoff window: what random SNI gets) or the name is
// refused now. Off the path of every handshake that gets a certificate.
func (m *Manager) noteUnloaded(ctx context.Context, name string, err error) {
	if errors.Is(err, ErrNotAllowed) || errors.Is(err, ErrBackoff) || errors.Is(err, ErrCustomDomainsOff) {
		return
	}
	name = strings.ToLower(name)
	if m.decide(ctx, name) == nil {
		m.unloaded.add(name)
	}
}

// coveredByManaged reports whether a managed name covers name: the name
// itself, or the wildcard one label up.
func (m *Manager) coveredByManaged(name string) bool {
	if m.Managed(name) {
		return true
	}
	_, parent, ok := strings.Cut(name, ".")
	return ok && m.Managed("*."+parent)
}

// onDemand reports whether leaf is a custom domain's on-demand
// certificate: one that covers none of the managed names. Those are
// issued for the one name a handshake asked for, never a wildcard, so a
// zone's *.{zone} (nearly every handshake) is told apart without a lock.
func (m *Manager) onDemand(leaf *x509.Certificate) bool {
	for _, n := range leaf.DNSNames {
		if strings.HasPrefix(n, "*.") || m.Managed(n) {
			return false
		}
	}
	return true
}

// stillAllowed asks the on-demand decision again for a cached on-demand
// certificate, and reports whether the handshake is served it and
// whether it may be renewed (not when the decision says ErrNoNewOrder).
// certmagic asks only before it loads or orders one, and
// then serves it from its cache until it is due for renewal (weeks): a
// deleted mapping would go on being served by every gateway that had
// handshaked it, while the others refuse it. Refused, the certificate
// leaves the cache (it stays in storage, where a later allowed handshake
// loads it again), and the handshake gets what any unknown name gets.
func (m *Manager) stillAllowed(hello *tls.ClientHelloInfo, leaf *x509.Certificate) (serve, renew bool) {
	err := m.allowed(hello.Context(), strings.ToLower(hello.ServerName))
	if err == nil || errors.Is(err, ErrNoNewOrder) {
		return true, err == nil
	}
	if c := m.cache.Load(); c != nil {
		gone := make([]certmagic.SubjectIssuer, len(leaf.DNSNames))
		for i, n := range leaf.DNSNames {
			gone[i] = certmagic.SubjectIssuer{Subject: n}
		}
		c.RemoveManaged(gone)
	}
	m.log.Info("tlsmgr: on-demand certificate no longer allowed; removed from the cache", "name", hello.ServerName, "err", err)
	return false, false
}

// HTTPHandler answers ACME HTTP-01 challenges (for this gateway or, through
// the shared storage, any gateway of the cluster) and passes every other
// request to next. The http listener puts it in front of everything.
func (m *Manager) HTTPHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if iss := m.iss.Load(); iss != nil && certmagic.LooksLikeHTTPChallenge(r) &&
			m.challengeable(r.Context(), hostOnly(r.Host)) && iss.HandleHTTPChallenge(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// challengeable reports whether name may be in an order of this cluster,
// so that a challenge for it may be under way: a managed name, or a
// custom domain the on-demand decision allows. Anyone can send a
// challenge hello or request for any name, and certmagic looks for one
// it did not begin in the shared storage: a name no gateway would order
// is refused first, at the cost of the decision, not of a store read.
func (m *Manager) challengeable(ctx context.Context, name string) bool {
	name = strings.ToLower(name)
	return m.Managed(name) || m.allow(ctx, name) == nil
}

// hostOnly is a Host header without its port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// Manage adds names to keep an ACME certificate for (a new zone's
// *.{zone}). Before Run they are remembered; while Run runs they are
// ordered in the background. Names already managed are skipped.
func (m *Manager) Manage(names ...string) error {
	m.mu.Lock()
	var fresh []string
	for _, n := range names {
		n = strings.ToLower(n)
		if n == "" || m.names[n] {
			continue
		}
		m.names[n] = true
		fresh = append(fresh, n)
	}
	ctxs := m.startLocked(fresh)
	m.mu.Unlock()
	return m.manageAsync(fresh, ctxs)
}

// startLocked gives each name its own context under Run's, so that
// Unmanage can end the name's orders (certmagic retries a failing one
// for up to 30 days); nil before Run. m.mu must be held.
func (m *Manager) startLocked(names []string) []context.Context {
	if m.running == nil {
		return nil
	}
	ctxs := make([]context.Context, len(names))
	for i, n := range names {
		ctxs[i], m.stop[n] = context.WithCancel(m.running)
		m.ctxs[n] = ctxs[i]
	}
	return ctxs
}

// manageAsync hands names to certmagic, each with its context from
// startLocked. Nothing happens before Run or without ACME.
func (m *Manager) manageAsync(names []string, ctxs []context.Context) error {
	cfg := m.cm.Load()
	if cfg == nil || ctxs == nil {
		return nil
	}
	for i, n := range names {
		if err := cfg.ManageAsync(ctxs[i], []string{n}); err != nil {
			return fmt.Errorf("tlsmgr: manage %s: %w", n, err)
		}
	}
	return nil
}

// Unmanage stops keeping a certificate for names (a deleted zone's
// *.{zone}): an order still running for one is ended, its certificate
// leaves the cache, so it is neither renewed nor served any more, and a
// handshake for a name under it gets what any unknown name gets. The
// certificate stays in the shared storage, where Manage finds it again.
// Names not managed are skipped; the bootstrap certificate keeps the
// names it was issued for.
func (m *Manager) Unmanage(names ...string) {
	var gone []certmagic.SubjectIssuer
	m.mu.Lock()
	for _, n := range names {
		n = strings.ToLower(n)
		if !m.names[n] {
			continue
		}
		delete(m.names, n)
		if stop := m.stop[n]; stop != nil {
			stop()
			delete(m.stop, n)
			delete(m.ctxs, n)
		}
		gone = append(gone, certmagic.SubjectIssuer{Subject: n})
	}
	m.mu.Unlock()
	// After the names left m.names and their orders were ended: a
	// certificate cached before this is removed here.
	if c := m.cache.Load(); c != nil && len(gone) > 0 {
		c.RemoveManaged(gone)
	}
}

// Managed reports whether name is one of the managed names.
func (m *Manager) Managed(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.names[strings.ToLower(name)]
}

// Run starts ACME (when a Directory is set), orders certificates for the
// managed names, keeps the bootstrap certificate fresh, and returns when ctx
// ends, after stopping certmagic's cache maintenance. Run may be called
// once. Start the http and https listeners before Run so challenges are
// answered from the first order.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.ran {
		m.mu.Unlock()
		return errors.New("tlsmgr: Run called twice")
	}
	m.ran = true
	m.mu.Unlock()
	if m.opts.Directory != "" {
		// Open before the on-demand config exists, so that a handshake
		// never finds it without them; closed (orders ended and waited
		// for) before the cache stops.
		m.orders.open(ctx)
		cache, err := m.startACME()
		if err != nil {
			m.orders.close()
			return err
		}
		defer m.awaitOrders()
		defer cache.Stop()
		defer m.orders.close()
		m.cache.Store(cache)
		m.mu.Lock()
		m.running = ctx
		names := make([]string, 0, len(m.names))
		for n := range m.names {
			names = append(names, n)
		}
		slices.Sort(names)
		ctxs := m.startLocked(names)
		m.mu.Unlock()
		if err := m.manageAsync(names, ctxs); err != nil {
			return err
		}
		done := make(chan struct{})
		defer func() { <-done }()
		go func() { defer close(done); m.checkStored(ctx) }()
	}
	m.renewBootstrap(ctx)
	return nil
}

// ordersStopWait bounds how long Run waits, once stopped, for the orders
// in flight to end (awaitOrders). An order ends soon after its context:
// what is left is removing its challenge record and its lock, a few
// writes to the store.
const ordersStopWait = 10 * time.Second

// awaitOrders waits, at most ordersStopWait, until certmagic's orders
// have released every lock in Options.Storage: an order stopped by Run's
// context ends on a goroutine of certmagic's, removing its DNS-01 record
// and unlocking afterwards. Run's caller closes the store when Run
// returns (the gateway its bus), so an order still running then would be
// left writing to a closed store, its record left behind.
func (m *Manager) awaitOrders() {
	if m.held == nil {
		return
	}
	select {
	case <-m.held.idle():
	case <-time.After(ordersStopWait):
		m.log.Warn("tlsmgr: stopped with a certificate order still ending; its challenge record is left to the next sweep", "waited", ordersStopWait)
	}
}

// checkStored looks, every checkEvery until ctx ends, for managed names
// that have a certificate in storage that did not load into the cache
// (bad PEM or metadata, written around gatehouse): certmagic's
// ManageAsync only logs that, to its own logger, and never orders a
// replacement while the stored one is there, so the name's clients got
// the bootstrap certificate with nothing said. ManageSync reads it again
// and returns why it fails; a certificate proven unusable is deleted and
// a new one ordered (deleteUnusable), and one that does not load for
// another reason (the store down) is logged. A name with nothing stored
// is left to certmagic's own retries (no extra orders).
func (m *Manager) checkStored(ctx context.Context) {
	t := time.NewTicker(m.checkEvery)
	defer t.Stop()
	// The digest of each name's stored items judged unusable at the last
	// check: deleted only if judged so again (deleteUnusable).
	unusableSeen := map[string][32]byte{}
	odSeen := map[string][32]byte{} // the same, of custom domains
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cache, cfg := m.cache.Load(), m.cm.Load()
		iss, ok := cfg.Issuers[0].(*certmagic.ACMEIssuer)
		if !ok {
			return
		}
		m.checkUnloaded(ctx, cache, cfg.Storage, iss.IssuerKey(), odSeen)
		type name struct {
			n   string
			ctx context.Context
		}
		var check []name
		m.mu.Lock()
		for n := range m.names {
			if c := m.ctxs[n]; c != nil && len(cache.AllMatchingCertificates(n)) == 0 {
				check = append(check, name{n, c})
			}
		}
		m.mu.Unlock()
		for _, c := range check {
			if !cfg.Storage.Exists(c.ctx, certmagic.StorageKeys.SiteCert(iss.IssuerKey(), c.n)) {
				continue
			}
			err := cfg.ManageSync(c.ctx, []string{c.n})
			if err == nil || c.ctx.Err() != nil {
				continue
			}
			v, derr := deleteUnusable(c.ctx, cfg.Storage, iss.IssuerKey(), c.n, unusableSeen[c.n])
			delete(unusableSeen, c.n)
			switch {
			case v.deleted:
				m.log.Warn("tlsmgr: the stored certificate of a managed name does not make a certificate; it is deleted and a new one ordered (its clients get the bootstrap certificate until then)",
					"name", c.n, "err", v.why)
				if err := cfg.ManageAsync(c.ctx, []string{c.n}); err != nil && c.ctx.Err() == nil {
					m.log.Error("tlsmgr: managing a name", "name", c.n, "err", err)
				}
			case c.ctx.Err() != nil:
			case derr != nil:
				m.log.Error("tlsmgr: the stored certificate of a managed name does not load; its clients get the bootstrap certificate until it loads or is replaced",
					"name", c.n, "err", err, "delete_err", derr)
			case v.why != nil:
				unusableSeen[c.n] = v.digest
				m.log.Error("tlsmgr: the stored certificate of a managed name does not make a certificate; if it still does not at the next check, it is deleted and a new one ordered",
					"name", c.n, "err", v.why, "next_check_in", m.checkEvery.String())
			default:
				// Not proven unusable (an item missing, or a reason
				// deleteUnusable does not check), so kept: said, as
				// before deleteUnusable, every checkEvery.
				m.log.Error("tlsmgr: the stored certificate of a managed name does not load; its clients get the bootstrap certificate until it loads or is replaced",
					"name", c.n, "err", err)
			}
		}
	}
}

// checkUnloaded judges the stored certificate of each custom domain that
// an allowed handshake got no certificate for since the last check. One
// that does not make a certificate (written around gatehouse) is never
// loaded, and certmagic's on-demand obtain does nothing while it is
// stored: the domain's clients got the bootstrap certificate for ever,
// with nothing said, and each handshake read the storage twice. Judged
// unusable at two checks, it is deleted as a managed name's is
// (deleteUnusable), and the domain's next handshake orders a new one; no
// order is placed here, without a client asking. seen is the digest of
// each name's items judged unusable at its last check.
func (m *Manager) checkUnloaded(ctx context.Context, cache *certmagic.Cache, st certmagic.Storage, issuerKey string, seen map[string][32]byte) {
	for _, n := range m.unloaded.take() {
		if ctx.Err() != nil {
			return
		}
		// Loaded since (the store answered again, an order finished):
		// nothing to judge.
		if len(cache.AllMatchingCertificates(n)) > 0 || !st.Exists(ctx, certmagic.StorageKeys.SiteCert(issuerKey, n)) {
			delete(seen, n)
			continue
		}
		v, err := deleteUnusable(ctx, st, issuerKey, n, seen[n])
		delete(seen, n)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			m.log.Error("tlsmgr: the stored certificate of a custom domain does not load; its clients get the bootstrap certificate until it loads or is replaced",
				"name", n, "err", err)
		case v.deleted:
			m.log.Warn("tlsmgr: the stored certificate of a custom domain does not make a certificate; it is deleted and a new one ordered at its next handshake (its clients get the bootstrap certificate until then)",
				"name", n, "err", v.why)
		case v.why != nil:
			if len(seen) < maxUnloaded {
				seen[n] = v.digest
			}
			m.log.Error("tlsmgr: the stored certificate of a custom domain does not make a certificate; if it still does not at a handshake after the next check, it is deleted and a new one ordered",
				"name", n, "err", v.why, "next_check_in", m.checkEvery.String())
		default:
			// Not proven unusable (an item missing, or a reason
			// deleteUnusable does not check): kept, and said.
			m.log.Error("tlsmgr: the stored certificate of a custom domain does not load; its clients get the bootstrap certificate until it loads or is replaced",
				"name", n)
		}
	}
}

// renewBootstrap re-issues the bootstrap certificate at each half-life
// until ctx ends.
func (m *Manager) renewBootstrap(ctx context.Context) {
	ttl := m.opts.bootstrapTTL()
	t := time.NewTimer(ttl / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cert, err := selfIssue(m.opts.Names, m.opts.now(), ttl)
			if err != nil {
				m.log.Error("tlsmgr: renew bootstrap certificate", "err", err)
			} else {
				m.boot.Store(cert)
			}
			t.Reset(ttl / 2)
		}
	}
}

// startACME builds the certmagic cache, config and issuer, owned by m.
func (m *Manager) startACME() (*certmagic.Cache, error) {
	roots, err := m.roots()
	if err != nil {
		return nil, err
	}
	var storage certmagic.Storage = &certmagic.FileStorage{Path: m.opts.StorageDir}
	if m.opts.Storage != nil {
		m.held = newHeldLocks()
		storage = kvStorage{m.opts.Storage, m.held}
	}
	zl := m.zap
	// Two configs on one cache: certmagic treats a config with OnDemand as
	// on-demand for every name, so managed names need their own.
	var managed, onDemand *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(c certmagic.Certificate) (*certmagic.Config, error) {
			if onDemand != nil && !slices.ContainsFunc(c.Names, m.Managed) {
				return onDemand, nil
			}
			return managed, nil
		},
		Logger: zl,
	})
	managed = m.newConfig(cache, storage, roots, nil, m.dns01())
	m.iss.Store(managed.Issuers[0].(*certmagic.ACMEIssuer))
	if m.opts.CustomDomains == CustomDomainsAuto {
		onDemand = m.newConfig(cache, storage, roots, &certmagic.OnDemandConfig{DecisionFunc: m.decide}, nil)
		m.od.Store(onDemand)
		m.iss.Store(onDemand.Issuers[0].(*certmagic.ACMEIssuer)) // serves HTTP-01 for both
	}
	m.cm.Store(managed)
	return cache, nil
}

// dns01 is the DNS-01 solver for managed names, or nil without a
// DNSProvider.
func (m *Manager) dns01() *certmagic.DNS01Solver {
	if m.opts.DNSProvider == nil {
		return nil
	}
	// With resolvers given (the gateway's own DNS server), certmagic asks
	// them for the challenge record until they answer it (0: its default
	// timeout, 2 minutes). Without, it would look up the zone's NS names
	// and probe those: we skip that and rely on the delay alone, as our
	// own authoritative servers answer from the shared store.
	timeout := time.Duration(-1)
	if len(m.opts.DNSResolvers) > 0 {
		timeout = 0
	}
	return &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{
		DNSProvider:        m.opts.DNSProvider,
		Resolvers:          m.opts.DNSResolvers,
		PropagationDelay:   m.opts.DNSPropagationDelay,
		PropagationTimeout: timeout,
		Logger:             m.zap,
	}}
}

// newConfig builds one certmagic config with its ACME issuer; with dns01,
// DNS-01 is its only challenge.
func (m *Manager) newConfig(cache *certmagic.Cache, storage certmagic.Storage, roots *x509.CertPool, od *certmagic.OnDemandConfig, dns01 *certmagic.DNS01Solver) *certmagic.Config {
	zl := m.zap
	cfg := certmagic.New(cache, certmagic.Config{Storage: storage, Logger: zl, OnEvent: m.onEvent, OnDemand: od})
	iss := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
		CA:                      m.opts.Directory,
		TestCA:                  m.opts.Directory, // never fall back to another CA
		Email:                   m.opts.Email,
		Agreed:                  true,
		TrustedRoots:            roots,
		AltHTTPPort:             m.opts.HTTPPort,
		AltTLSALPNPort:          m.opts.TLSPort,
		DisableHTTPChallenge:    m.opts.DisableHTTPChallenge,
		DisableTLSALPNChallenge: m.opts.DisableTLSALPNChallenge,
		Logger:                  zl,
	})
	if dns01 != nil {
		iss.DNS01Solver = dns01 // certmagic then uses DNS-01 only for this config
	}
	cfg.Issuers = []certmagic.Issuer{iss}
	return cfg
}

func (m *Manager) roots() (*x509.CertPool, error) {
	if m.opts.CARoot == "" {
		return nil, nil
	}
	return LoadRoots(m.opts.CARoot)
}

// LoadRoots returns the system roots plus the PEM certificates in file
// (Options.CARoot); a file without one is an error.
func LoadRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tlsmgr: acme ca_root: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsmgr: acme ca_root %s: no PEM certificate", file)
	}
	return pool, nil
}

// decide is certmagic's on-demand gate: only custom domains (not managed
// names, which have their own order), only with custom_domains auto, only
// when Allow says yes, and not while the name's last order failed lately
// (backoff.go). It runs before any ACME traffic and storage access, so a
// refused name costs a map lookup or two. Asked from a handshake
// (handshakeEnd), an allowed name is refused too, with
// errOrderInBackground: certmagic would load or order the certificate in
// the handshake's context, cut at the handshake's budget; and a name
// kept without orders (ErrNoNewOrder) with errLoadOnly, for
// GetCertificate to load what storage holds (loadHeld). Asked elsewhere
// (certmagic's renewal of a cached one), that name is refused.
func (m *Manager) decide(ctx context.Context, name string) error {
	if err := m.allowed(ctx, name); err != nil {
		if _, ok := ctx.Value(handshakeObtain{}).(handshakeEnd); ok && errors.Is(err, ErrNoNewOrder) {
			return errLoadOnly
		}
		return err
	}
	if until, ok := m.failed.blocked(name, m.opts.now()); ok {
		return fmt.Errorf("%w: %s: no new order before %s", ErrBackoff, name, until.UTC().Format(time.RFC3339))
	}
	if _, ok := ctx.Value(handshakeObtain{}).(handshakeEnd); ok {
		return errOrderInBackground // GetCertificate hands it to orderOnDemand
	}
	return nil
}

// allowed is decide without the backoff: whether name may have an
// on-demand certificate at all. A refused name's failures are forgotten.
func (m *Manager) allowed(ctx context.Context, name string) error {
	err := m.allow(ctx, name)
	if err != nil {
		m.failed.clear(name)
	}
	return err
}

// allow is the decision proper, which keeps no state.
func (m *Manager) allow(ctx context.Context, name string) error {
	if m.opts.CustomDomains != CustomDomainsAuto {
		return ErrCustomDomainsOff
	}
	if m.Managed(name) {
		return fmt.Errorf("%w: %s is managed, not on demand", ErrNotAllowed, name)
	}
	if m.opts.Allow == nil {
		return ErrNotAllowed
	}
	if err := m.opts.Allow(ctx, name); err != nil {
		// %w twice: ErrNoNewOrder in err must reach the callers.
		return fmt.Errorf("%w: %s: %w", ErrNotAllowed, name, err)
	}
	return nil
}

// stillOrdering asks the decision again when an on-demand order or
// renewal is about to ask the CA (certmagic's cert_obtaining, past its
// storage lock): the decision was asked when it began, and the name's
// mapping may have been deleted since (while it waited for the lock
// another gateway held, or for a retry). Refused, the order is ended and
// the CA asked nothing: it would have validated a name its gateways no
// longer answer the challenges of, or certified one nobody maps.
func (m *Manager) stillOrdering(ctx context.Context, data map[string]any) error {
	end := onDemandEnd(ctx)
	if end == nil {
		return nil // a managed name's
	}
	name, _ := data["identifier"].(string)
	err := m.allowed(ctx, strings.ToLower(name))
	if err == nil {
		return nil
	}
	// certmagic's cert_obtaining of an order has no "renewal" (a renewal's
	// says true): false, as the other certificate lines say it.
	renewal, _ := data["renewal"].(bool)
	m.log.Info("tlsmgr: on-demand certificate no longer allowed; its order is ended before the CA is asked", "identifier", name, "renewal", renewal, "err", err)
	end()
	// ErrNoRetry: certmagic's retry loop would otherwise log, as an
	// error, that it retries in a minute, which the ended context stops.
	return certmagic.ErrNoRetry{Err: err}
}

// onDemandEnd returns what ends the on-demand order or renewal ctx is
// of (handshakeObtain: orderOnDemand's and renewOnDemand's cancel, or a
// handshake's handshakeEnd); nil for a managed name's.
func onDemandEnd(ctx context.Context) context.CancelFunc {
	switch v := ctx.Value(handshakeObtain{}).(type) {
	case context.CancelFunc:
		return v
	case handshakeEnd:
		return context.CancelFunc(v)
	}
	return nil
}

// onEvent logs certmagic's certificate events, and keeps the on-demand
// backoff: an on-demand order (its context carries handshakeObtain: one
// of orderOnDemand, or rarely a handshake's, see handshakeEnd) that
// failed opens the name's window and ends that context, which stops
// certmagic's retries for it; it is logged once, with the window. A
// certificate obtained clears the name.
func (m *Manager) onEvent(ctx context.Context, event string, data map[string]any) error {
	switch event {
	case "cert_obtaining":
		return m.stillOrdering(ctx, data)
	case "cert_obtained", "cert_ocsp_revoked":
		if name, ok := data["identifier"].(string); ok && event == "cert_obtained" {
			m.failed.clear(strings.ToLower(name))
		}
		m.log.Info("tlsmgr: "+event, "identifier", data["identifier"], "renewal", data["renewal"])
	case "cert_failed":
		name, _ := data["identifier"].(string)
		end := onDemandEnd(ctx)
		handshake := end != nil
		// A renewal for a handshake (a stored certificate past its
		// end) backs off like a first order: left out, every handshake
		// renewed again, 4 orders each.
		if !handshake || name == "" {
			m.log.Error("tlsmgr: "+event, "identifier", data["identifier"], "err", data["error"], "renewal", data["renewal"])
			return nil
		}
		f := m.failed.fail(strings.ToLower(name), m.opts.now())
		// Told by the context, not by certmagic's data: renewing a due
		// certificate whose stored items are gone, certmagic orders a new
		// one and reports an obtain (no "remaining"), while the name
		// keeps the certificate it has all the same.
		if ctx.Value(renewingDue{}) != nil {
			args := []any{"identifier", name, "err", data["error"], "window", f.wait, "until", f.until}
			if left, ok := data["remaining"].(time.Duration); ok {
				args = append(args, "remaining", left)
			}
			m.log.Error("tlsmgr: on-demand certificate renewal failed; the name keeps its certificate and gets no new attempt until the window ends", args...)
			end()
			return nil
		}
		m.log.Error("tlsmgr: on-demand certificate failed; the name gets the bootstrap certificate and no new order until the window ends",
			"identifier", name, "err", data["error"], "window", f.wait, "until", f.until)
		end()
	}
	return nil
}
