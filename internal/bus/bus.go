package bus

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds how long Start waits for the embedded server to
// accept clients.
const readyTimeout = 10 * time.Second

// closeDrainTimeout bounds how long Close waits for the connection to
// drain before closing it outright.
const closeDrainTimeout = 2 * time.Second

// Bus is a started connection to NATS, with the embedded server it runs
// if any. Start must be called once before Conn, JetStream or ClientURL.
// Close may be called any number of times, but not concurrently with
// Start; after Close, Start fails. Conn, JetStream and ClientURL may be
// called concurrently once Start has returned.
type Bus struct {
	opts   Options
	urls   []string // external mode
	host   string   // embedded mode
	port   int
	log    *slog.Logger
	srvLog *serverLog // the embedded server's own lines

	ns     *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	closed chan struct{} // closed by the connection's ClosedHandler

	cluster string // the external server's cluster name at Start; "" if none
	fails   reconnectFails
	async   asyncErrs
	// up is whether the started connection is connected now, for
	// Connected (a metric reads it at any time, Start included).
	up atomic.Bool
	// waitLogEvery is how often a Start still waiting for an external
	// server says so (10 s; tests shorten it).
	waitLogEvery time.Duration
	// cutOff bounds LeaveCutOff (defaultCutOffTimes; tests shorten them).
	cutOff cutOffTimes

	// downAt is when the started connection was last lost (UnixNano;
	// 0 while connected), for watch.
	downAt    atomic.Int64
	watchStop chan struct{} // closed by Close to stop watch
	watchDone chan struct{} // closed by watch as it returns

	// unlockDir releases the embedded server's lock on its data
	// directory (lockDir); nil until a start succeeded.
	unlockDir func()

	closeOnce sync.Once
	stopped   bool // Close was called
}

// ErrDataDirInUse is returned, wrapped, by Start when another embedded
// bus holds the data directory.
var ErrDataDirInUse = errors.New("in use")

// errDirLocked is lockDir's word for a lock held elsewhere, errNoDirLock
// for a file system that takes none.
var (
	errDirLocked = errors.New("directory locked")
	errNoDirLock = errors.New("the file system takes no lock")
)

// New validates opts and returns a Bus that is not started.
func New(opts Options) (*Bus, error) {
	urls, host, port, err := opts.validate()
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "gatehouse"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The server's own lines carry a component of their own: one logger
	// With both would write the key twice, which strict JSON parsers
	// refuse.
	srvBase := log.With("component", "nats-server")
	log = log.With("component", "bus")
	return &Bus{opts: opts, urls: urls, host: host, port: port, log: log, srvLog: &serverLog{log: srvBase, now: time.Now}, fails: reconnectFails{log: log, urls: redactList(urls)}, async: asyncErrs{log: log, every: asyncLogEvery}, waitLogEvery: 10 * time.Second, cutOff: defaultCutOffTimes}, nil
}

// Embedded reports whether b runs its own server.
func (b *Bus) Embedded() bool { return b.urls == nil }

// Start starts the embedded server and waits until it accepts clients, or
// connects to the external URLs and waits until connected, bounded by ctx.
// The external connection then reconnects forever.
func (b *Bus) Start(ctx context.Context) error {
	if b.nc != nil || b.stopped {
		return errors.New("bus: already started or closed")
	}
	var err error
	if b.Embedded() {
		err = b.startEmbedded(ctx)
	} else {
		err = b.connectExternal(ctx)
	}
	if err != nil {
		return err
	}
	b.js, err = jetstream.New(b.nc)
	if err != nil {
		b.Close()
		return fmt.Errorf("bus: jetstream: %w", err)
	}
	b.up.Store(b.nc.IsConnected())
	if !b.Embedded() {
		b.watchStop, b.watchDone = make(chan struct{}), make(chan struct{})
		go b.watch(b.watchStop, b.watchDone)
	}
	return nil
}

// Connected reports whether the bus is connected now: false before Start
// returns, while a started connection is down, and after Close.
func (b *Bus) Connected() bool { return b.up.Load() }

// noHandshake is why a connection is down when nothing said why: no dial
// failed (a failed one is reported, reconnectFails) and nats.go holds no
// error, as for an address that accepts and closes at once.
const noHandshake = "no NATS handshake completed (an address that accepts and closes: a load balancer with no server behind it?)"

// pingInterval and maxPingsOut bound how long a connection to a silent
// server looks up: (maxPingsOut+1) × pingInterval, well within the 3
// missed heartbeats (15 s by default) that take a host out of rotation.
// A PING every 2 s is nothing to a server.
const (
	pingInterval = 2 * time.Second
	maxPingsOut  = 2
)

// dialEvery bounds how long apart nats.go's dials are while down: its
// 2 s dial timeout, then 250 ms (ReconnectWait) plus jitter.
const dialEvery = 2500 * time.Millisecond

// whyDown is the best word on why nc is not connected at now, a line
// every d: an attempt that failed since the last line or just before it
// (nc.LastError is nil for those), else nc's last error, else
// noHandshake. An older failed attempt is not the word any more: the
// address may accept and close since, which reports nothing.
func (b *Bus) whyDown(nc *nats.Conn, now time.Time, d time.Duration) string {
	if err := b.lastFailure(nc, now, d); err != nil {
		return explainTLS(err).Error()
	}
	return noHandshake
}

// lastFailure is whyDown's word as an error, nil where whyDown guesses.
func (b *Bus) lastFailure(nc *nats.Conn, now time.Time, d time.Duration) error {
	if err := b.fails.lastWithin(now, d+dialEvery); err != nil && attemptErr(err) {
		return err
	}
	return nc.LastError()
}

// watch says every waitLogEvery that a started connection to an external
// bus is still down, and why. nats.go reports a reconnect's failed dial
// or TLS handshake (reconnectFails), but nothing for an address that
// accepts and then closes, nor an INFO failure: a gateway that lost its
// bus that way would retry in silence, readiness at 503, with no word of
// the cause.
func (b *Bus) watch(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(b.waitLogEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			down := b.downAt.Load()
			// Down for less than a period is "nats disconnected", just
			// logged, not still; its reconnect has not dialled yet.
			if down == 0 || now.Sub(time.Unix(0, down)) < b.waitLogEvery || b.nc.IsConnected() || b.nc.IsClosed() || b.fails.loggedWithin(now, b.waitLogEvery) {
				continue
			}
			b.log.Warn("the bus is still disconnected", "url", redactList(b.urls),
				"for", now.Sub(time.Unix(0, down)).Round(time.Second), "last_error", b.whyDown(b.nc, now, b.waitLogEvery))
		}
	}
}

func (b *Bus) startEmbedded(ctx context.Context) (err error) {
	// A start that fails leaves the data directory as it found it: a
	// fresh credential or an empty JetStream store left behind would be
	// taken for the bus's own by the next start or an operator.
	dirNew, jsNew := !exists(b.opts.DataDir), !exists(filepath.Join(b.opts.DataDir, server.JetStreamStoreDir))
	var created bool // the credential
	release := func() {}
	defer func() {
		if err != nil {
			b.undoStart(created, dirNew, jsNew)
			release() // after the undo: nobody else meddles with the directory meanwhile
		}
	}()
	// NATS takes no lock on its store: a second embedded server on this
	// directory (another gateway given the same data_dir and other ports)
	// would open the same JetStream files, write over the first one's and
	// serve state of its own. The lock is held until Close.
	if err = os.MkdirAll(b.opts.DataDir, 0o700); err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	if release, err = lockDir(b.opts.DataDir); errors.Is(err, errNoDirLock) {
		b.log.Warn("cannot lock the data dir; a second gateway started on it would not be caught", "dir", b.opts.DataDir, "err", err)
		err = nil
	} else if err != nil {
		release = func() {}
		if errors.Is(err, errDirLocked) {
			return fmt.Errorf("bus: data dir %s: %w by another embedded bus (another gatehouse started with the same data_dir?): give each gateway its own data_dir, or let the others share this one's bus with bus.url", b.opts.DataDir, ErrDataDirInUse)
		}
		return fmt.Errorf("bus: lock data dir %s: %w", b.opts.DataDir, err)
	}
	var secret string
	secret, created, err = loadOrCreateSecret(b.opts.DataDir)
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(b.opts.DataDir, TokenFile)
	if created {
		b.log.Info("generated the embedded bus's gateway credential", "file", tokenPath)
	}
	opts := &server.Options{
		ServerName: b.opts.Name,
		Host:       b.host,
		Port:       b.port,
		NoSigs:     true, // gatehouse owns SIGINT/SIGTERM: no os.Exit behind our drain
		JetStream:  true,
		StoreDir:   b.opts.DataDir,
		// Every write is on disk before JetStream acknowledges it, so a
		// control call answered 200 survives the machine losing power,
		// not only the process dying: the embedded server is the routing
		// state's one copy (R1), and its writes are control calls and
		// certificates, a few a minute, never a request's. NATS's own
		// default syncs every two minutes.
		SyncAlways: true,
		Users:      users(secret),
		NoAuthUser: hostUser, // a client without credentials is a host
		MaxSubs:    MaxSubscriptions,
	}
	if b.port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("bus: embedded server: %w", err)
	}
	ns.SetLoggerV2(b.srvLog, false, false, false)
	ns.Start()
	if err := b.waitReady(ctx, ns); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return err
	}
	b.ns = ns
	nc, err := nats.Connect("", b.connOpts(nats.InProcessServer(ns), nats.UserInfo(GatewayUser, secret))...)
	if err != nil {
		b.Close()
		return fmt.Errorf("bus: connect in-process: %w", err)
	}
	b.nc = nc
	b.unlockDir = release
	b.log.Info("embedded nats started", "url", ns.ClientURL(), "store", b.opts.DataDir, "credential", tokenPath)
	return nil
}

// exists reports whether path exists; an error other than not-exist
// counts as existing, so that nothing there is ever removed.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// undoStart removes what a failed embedded start created, and only that:
// the credential it generated, the JetStream store directory if there
// was none, and the data directory if it made it. The server is down by
// then (startEmbedded shuts it down or Close did).
func (b *Bus) undoStart(tokenNew, dirNew, jsNew bool) {
	dir := b.opts.DataDir
	remove := func(rm func(string) error, path string) {
		if err := rm(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.log.Warn("could not remove what a failed start of the embedded bus created", "path", path, "err", err)
		}
	}
	if tokenNew {
		remove(os.Remove, filepath.Join(dir, TokenFile))
	}
	if jsNew {
		remove(os.RemoveAll, filepath.Join(dir, server.JetStreamStoreDir))
	}
	if dirNew {
		remove(os.Remove, dir) // empty by now
	}
}

// StartError is the embedded server failing to start on Addr (its
// listener could not bind, most often): Msg is nats-server's own word.
type StartError struct {
	Addr, Msg string
}

func (e *StartError) Error() string {
	return fmt.Sprintf("bus: embedded nats on %s failed to start: %s", e.Addr, e.Msg)
}

// waitReady polls the server in short slices so a listen failure (which
// nats-server reports only through Fatalf) fails Start at once.
func (b *Bus) waitReady(ctx context.Context, ns *server.Server) error {
	addr := fmt.Sprintf("%s:%d", b.host, b.port)
	deadline := time.Now().Add(readyTimeout)
	for {
		if ns.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if msg := b.srvLog.fatalMsg(); msg != "" {
			return &StartError{Addr: addr, Msg: msg}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bus: embedded nats on %s: %w", addr, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bus: embedded nats on %s not ready after %s", addr, readyTimeout)
		}
	}
}

func (b *Bus) connectExternal(ctx context.Context) error {
	url := strings.Join(b.urls, ",")
	nc, err := nats.Connect(url, b.connOpts(nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return fmt.Errorf("bus: connect %s: %w", redactList(b.urls), err)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	// nats.go reports only a dial or a TLS handshake that fails; a
	// server (or a load balancer with none behind it) that accepts and
	// then closes, or an INFO failure, reaches no callback, and the start
	// waited in silence with readiness at 503. Say so, with the last
	// error.
	started := time.Now()
	nextLog := started.Add(b.waitLogEvery)
	for !nc.IsConnected() {
		if now := time.Now(); now.After(nextLog) {
			b.log.Warn("waiting for the bus", "url", redactList(b.urls), "waited", now.Sub(started).Round(time.Second), "last_error", b.whyDown(nc, now, b.waitLogEvery))
			nextLog = now.Add(b.waitLogEvery)
		}
		select {
		case <-ctx.Done():
			// The connection retries quietly: say why it did not connect
			// (a refused credential, a TLS error), not only that time ran
			// out. The server's word never repeats the credential.
			last := explainTLS(b.lastFailure(nc, time.Now(), b.waitLogEvery))
			nc.Close()
			if last != nil {
				return fmt.Errorf("bus: not connected to %s: %w (last error: %v)", redactList(b.urls), ctx.Err(), last)
			}
			return fmt.Errorf("bus: not connected to %s: %w", redactList(b.urls), ctx.Err())
		case <-t.C:
		}
	}
	b.nc = nc
	b.cluster = nc.ConnectedClusterName()
	b.log.Info("connected to nats", "url", connectedURL(nc), "cluster", b.cluster)
	return nil
}

func (b *Bus) connOpts(extra ...nats.Option) []nats.Option {
	b.closed = make(chan struct{})
	closed := b.closed
	return append([]nats.Option{
		nats.Name(b.opts.Name),
		nats.CustomInboxPrefix(InboxPrefix),
		nats.MaxReconnects(-1),
		// Without it nats.go closes the connection for good once a server
		// refuses the credential twice (rotated on the server first): the
		// gateway would never reconnect, even after the fix.
		nats.IgnoreAuthErrorAbort(),
		nats.ReconnectWait(250 * time.Millisecond),
		// A server that goes silent (its machine off, a partition dropping
		// its packets) sends no close: with nats.go's default pings (every
		// 2 min, 2 unanswered) the connection looked up for 6 min, while
		// no heartbeat reached discovery and every host went unhealthy
		// after 3 missed ones (15 s). Pinging every 2 s finds it within
		// 6 s, and the connection moves to another node.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.up.Store(false)
			b.downAt.CompareAndSwap(0, time.Now().UnixNano())
			if err == nil { // our own Close or move (LeaveCutOff): nothing went wrong
				b.log.Debug("nats disconnected")
				return
			}
			b.log.Warn("nats disconnected", "err", err)
		}),
		// A start's failed attempts are its own: kept, they left the
		// first outage after it unlogged for up to reconnectLogEvery and
		// then counted in its not_logged and failed_attempts. Called
		// after the callbacks of those attempts, as they are queued.
		nats.ConnectHandler(func(*nats.Conn) { b.fails.reset() }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.up.Store(true)
			b.downAt.Store(0)
			b.log.Info("nats reconnected", "url", connectedURL(nc), "failed_attempts", b.fails.reset())
		}),
		// A dial that fails comes here; a server that refuses the
		// credential (rotated, revoked) comes to ErrorHandler below.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { b.fails.failed(err) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub == nil && isAuthErr(err) {
				b.fails.failed(err)
				return
			}
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			b.async.failed(subj, err)
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			b.up.Store(false)
			close(closed)
		}),
	}, extra...)
}

// connectedURL is the URL nc is connected to, its user info hidden as
// redact hides it: nats.go's ConnectedUrlRedacted hides a password but
// shows a token (user info with no password) as it is.
func connectedURL(nc *nats.Conn) string { return redact(nc.ConnectedUrl()) }

// Clustered reports whether the external server connected to at Start is
// a member of a NATS cluster, as the server itself told the client in its
// INFO (its cluster name), however many URLs led there: one DNS name or
// load balancer in front of a cluster is a cluster. False for the
// embedded bus, which is a single server.
func (b *Bus) Clustered() bool { return b.cluster != "" }

// reconnectLogEvery is how often failed reconnect attempts are logged: a
// connection that retries every 250 ms would otherwise log four lines a
// second for as long as the bus is gone.
const reconnectLogEvery = 10 * time.Second

// reconnectFails logs why reconnect attempts fail, the first at once and
// then at most one per reconnectLogEvery with the count of those left out
// since the line before, so an operator sees the server's word (a refused
// dial, "Authorization Violation") without a flood.
type reconnectFails struct {
	log *slog.Logger
	// urls is the bus URLs, credentials hidden (redactList), for each
	// line to name: a dial's error names at most the one address it
	// tried, nats.go's ErrNoServers none. Empty for the embedded bus.
	urls string

	mu      sync.Mutex
	last    time.Time // when a failure was last logged; zero after a reconnect
	total   int       // failures since the last reconnect
	skipped int       // failures not logged since the last line
	lastErr error     // the last failure, logged or not; nil after a reconnect
	lastAt  time.Time // when lastErr came
}

func (r *reconnectFails) failed(err error) {
	r.mu.Lock()
	r.total++
	now := time.Now()
	r.lastErr, r.lastAt = err, now
	// The first round of dials of a start (RetryOnFailedConnect) drops
	// each refused dial's error and reports only "no servers available
	// for connection". The next attempt, ReconnectWait later, reports
	// its dial's own error ("connect: connection refused"), which is
	// logged at once in its place, as no line has been logged yet.
	// Only the first failure is held: no line is put off for longer.
	if r.total == 1 && errors.Is(err, nats.ErrNoServers) {
		r.skipped++
		r.mu.Unlock()
		return
	}
	if !r.last.IsZero() && now.Sub(r.last) < reconnectLogEvery {
		r.skipped++
		r.mu.Unlock()
		return
	}
	r.last = now
	skipped := r.skipped
	r.skipped = 0
	r.mu.Unlock()
	attrs := []any{"err", explainTLS(err), "not_logged", skipped, "every", reconnectLogEvery}
	if r.urls != "" {
		attrs = append([]any{"url", r.urls}, attrs...)
	}
	r.log.Warn("nats reconnect failed", attrs...)
}

// loggedWithin reports whether a failure was logged less than d before now.
func (r *reconnectFails) loggedWithin(now time.Time, d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.last.IsZero() && now.Sub(r.last) < d
}

// lastWithin returns the last failure if it came less than d before now:
// an older one may no longer be why (the address may since accept and
// close instead of refusing).
func (r *reconnectFails) lastWithin(now time.Time, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastErr == nil || now.Sub(r.lastAt) >= d {
		return nil
	}
	return r.lastErr
}

// reset starts over after a reconnect and returns how many attempts
// failed before it.
func (r *reconnectFails) reset() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.total
	r.last, r.total, r.skipped, r.lastErr = time.Time{}, 0, 0, nil
	return n
}

// asyncLogEvery is how often one asynchronous error (the same subject and
// text) is logged: while an external bus is down, JetStream's consumers
// report "consumer not active" every few seconds each.
const asyncLogEvery = 10 * time.Second

// maxAsyncKeys bounds the (subject, error) pairs asyncErrs remembers;
// past it, those quiet for a whole period are forgotten.
const maxAsyncKeys = 256

// asyncErrs logs nats.go's asynchronous errors, each (subject, error
// text) at once and then at most once per every, with the count of those
// left out since its line before, as reconnectFails does.
type asyncErrs struct {
	log   *slog.Logger
	every time.Duration

	mu   sync.Mutex
	seen map[[2]string]*asyncSeen
}

type asyncSeen struct {
	last    time.Time // when it was last logged
	skipped int       // occurrences not logged since
}

func (a *asyncErrs) failed(subject string, err error) {
	key := [2]string{subject, err.Error()}
	now := time.Now()
	a.mu.Lock()
	if a.seen == nil {
		a.seen = map[[2]string]*asyncSeen{}
	}
	s := a.seen[key]
	if s != nil && now.Sub(s.last) < a.every {
		s.skipped++
		a.mu.Unlock()
		return
	}
	if len(a.seen) >= maxAsyncKeys {
		for k, v := range a.seen {
			if now.Sub(v.last) >= a.every {
				delete(a.seen, k)
			}
		}
	}
	skipped := 0
	if s != nil {
		skipped = s.skipped
	}
	a.seen[key] = &asyncSeen{last: now}
	a.mu.Unlock()
	a.log.Warn("nats async error", "subject", subject, "err", err, "not_logged", skipped, "every", a.every)
}

// attemptErr reports whether err is a dial that failed (one server's, or
// nats.go's word for all of them), a TLS handshake that failed (a
// certificate the process does not trust, its own refused) or a refused
// credential: each comes again at every attempt. Not the EOF of an
// address that accepts and closes, which nats.go reports only on a first
// connect, once, and which noHandshake explains better.
func attemptErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTLS) || isAuthErr(err)
}

// untrustedCA is added to an error of a bus whose certificate chains to
// no root this process trusts. gatehouse has no setting of its own for a
// private CA: Go's system roots, which SSL_CERT_FILE and SSL_CERT_DIR set
// on Linux, are where it goes (docs/config.md, bus.url), and an operator
// who meets "certificate signed by unknown authority" is told so.
const untrustedCA = "the bus's certificate is not signed by a CA this process trusts: for a private CA, start gatehouse with SSL_CERT_FILE set to the CA's PEM file, or SSL_CERT_DIR to a directory holding it"

// explainTLS returns err with untrustedCA when the certificate's signer is
// unknown, and err as it is otherwise (nil included).
func explainTLS(err error) error {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w (%s)", err, untrustedCA)
	}
	return err
}

// isAuthErr reports whether err is the server refusing the credential.
func isAuthErr(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// Conn returns the connection. Nil before a successful Start.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream returns the JetStream context on Conn. Nil before Start.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// ClientURL is the URL hosts should use: the embedded server's listen
// URL, or the external URLs as given without their user info (a gateway's
// credential is not a host's). An embedded server listening on every
// interface (0.0.0.0 or ::) is given by its loopback address, which a
// client can dial. Another gateway sharing an embedded bus adds
// GatewayUser and the secret in TokenFile to it.
func (b *Bus) ClientURL() string {
	if b.ns == nil {
		urls := make([]string, len(b.urls))
		for i, u := range b.urls {
			urls[i] = stripUser(u)
		}
		return strings.Join(urls, ",")
	}
	return dialable(b.ns.ClientURL())
}

// redactList joins urls with their user info hidden.
func redactList(urls []string) string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact(u)
	}
	return strings.Join(out, ",")
}

// dialable replaces an unspecified host in a server URL by loopback.
func dialable(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		lo := "127.0.0.1"
		if ip.To4() == nil {
			lo = "::1"
		}
		u.Host = net.JoinHostPort(lo, u.Port())
	}
	return u.String()
}

// Close drains and closes the connection, then shuts the embedded server
// down and waits for it. Idempotent; safe before or after Start.
func (b *Bus) Close() {
	b.closeOnce.Do(func() {
		b.stopped = true
		b.up.Store(false)
		if b.watchStop != nil {
			close(b.watchStop)
			<-b.watchDone
		}
		if b.nc != nil {
			if err := b.nc.Drain(); err == nil {
				select {
				case <-b.closed:
				case <-time.After(closeDrainTimeout):
				}
			}
			b.nc.Close()
		}
		if b.ns != nil {
			b.ns.Shutdown()
			b.ns.WaitForShutdown()
		}
		if b.unlockDir != nil { // the server is down: the store is free
			b.unlockDir()
		}
	})
}
