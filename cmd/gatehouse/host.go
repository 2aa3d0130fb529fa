package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/config"
)

// hostFlags are `gatehouse host`'s settings.
type hostFlags struct {
	bus, cluster, id, keyFile, addr, advertise, upstream, scheme string
	apps                                                         []string
	heartbeat, drain, grace                                      time.Duration
}

func parseHostFlags(args []string, stdout, stderr io.Writer) (*hostFlags, error) {
	f := &hostFlags{}
	fs := flag.NewFlagSet("gatehouse host", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.bus, "bus", "nats://127.0.0.1:4222", "bus URL (nats://, tls://, ws:// or wss://); several comma separated for a NATS cluster")
	fs.StringVar(&f.cluster, "cluster", "", "cluster id (required)")
	fs.StringVar(&f.id, "id", "", "host id, as enrolled (required)")
	fs.StringVar(&f.keyFile, "key", "", "PKCS#8 PEM Ed25519 private key file, from 'gatehouse keygen' (required); mode 0600: one open to group or others is warned about at start")
	fs.Func("app", "app this host serves (required; repeatable)", func(s string) error { f.apps = append(f.apps, s); return nil })
	fs.StringVar(&f.addr, "addr", "", "listen address, host:port (required); a port of 0 picks a free one")
	fs.StringVar(&f.advertise, "advertise", "", "address to announce, if not the listen address; a listen address without a host (\":8081\", \"0.0.0.0:8081\") announces 127.0.0.1 unless this is set")
	fs.StringVar(&f.upstream, "upstream", "", "URL of the app to proxy to, http:// or https:// (required); a path in it prefixes each request's; not this sidecar's own -addr, which is refused, and a request that comes back to the sidecar anyway (by a name or a port forward that leads to it) is answered 508")
	fs.StringVar(&f.scheme, "scheme", "http", "how gateways reach this sidecar: http or h2c (h2c also speaks h2c to an http:// upstream)")
	fs.DurationVar(&f.heartbeat, "heartbeat", host.DefaultHeartbeatInterval, "heartbeat interval; must match the gateways' heartbeat_interval (at least 1s)")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight requests may take to finish (at least 1s); those still going are then cut (logged; exit 0)")
	fs.DurationVar(&f.grace, "leave-grace", time.Second, "on SIGTERM, how long to keep accepting after leave, while gateways stop picking this host")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gatehouse host -bus URL -cluster ID -id HOST_ID -key FILE -app APP [-app APP...] -addr LISTEN_ADDR -upstream URL [-scheme http]\n\n"+
			"Listens on -addr, answers the gateway's challenge itself, proxies everything else to\n-upstream, and announces, heartbeats and (on SIGTERM) leaves on the bus, then drains.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		// A bus list split at a space after its comma leaves a URL
		// over, whose password is not repeated.
		return nil, usagef("host: unexpected argument %s", config.StrayArg(fs, args))
	}
	for name, v := range map[string]string{"-cluster": f.cluster, "-id": f.id, "-key": f.keyFile, "-addr": f.addr, "-upstream": f.upstream} {
		if v == "" {
			return nil, usagef("host: %s is required", name)
		}
	}
	if len(f.apps) == 0 {
		return nil, usagef("host: at least one -app is required")
	}
	for i, a := range f.apps {
		if !host.ValidApp(a) {
			return nil, fmt.Errorf("host: -app %q is not an app id (a DNS label)", a)
		}
		// Announced as given, "hello,hello": a slip in a long command
		// line or a template, said rather than sent to every gateway.
		if slices.Contains(f.apps[:i], a) {
			return nil, fmt.Errorf("host: -app %q is given twice: give each app once", a)
		}
	}
	if !host.ValidCluster(f.cluster) {
		return nil, fmt.Errorf("host: -cluster %q is not a DNS label", f.cluster)
	}
	if !host.ValidHostID(f.id) {
		return nil, fmt.Errorf("host: -id %q invalid (1-128 of A-Z a-z 0-9 . _ -)", f.id)
	}
	if f.scheme != host.SchemeHTTP && f.scheme != host.SchemeH2C {
		return nil, fmt.Errorf("host: -scheme %q: the sidecar serves http or h2c (embed the host package to terminate TLS)", f.scheme)
	}
	// Each flag is named alone, with its own bound, for 0s and negatives
	// as for 500ms: one line for all three sent an operator who fixed
	// the one named first to the floor of another.
	if f.grace < 0 {
		return nil, fmt.Errorf("host: -leave-grace must not be negative (0s: no grace), got %s", f.grace)
	}
	if f.drain < time.Second {
		// As serve's drain_timeout: a shorter drain cuts every request in
		// flight at each stop, so 30ms is a slip of 30s, not a choice.
		return nil, fmt.Errorf("host: -drain-timeout must be at least 1s, got %s", f.drain)
	}
	if f.heartbeat < time.Second {
		// The gateways' heartbeat_interval, which this must match, is at
		// least 1s: under it the sidecar floods the bus, every gateway
		// handling each heartbeat, for a host they expect far less often.
		return nil, fmt.Errorf("host: -heartbeat must be at least 1s, as the gateways' heartbeat_interval is, got %s", f.heartbeat)
	}
	bus, err := checkBus(f.bus)
	if err != nil {
		return nil, err
	}
	f.bus = bus
	return f, nil
}

// checkBus returns the -bus list with its items trimmed, or refuses one
// that is not a NATS URL, as serve refuses such a bus.url
// (internal/config): NATS takes a scheme it does not know (http, https)
// as nats://, in the clear however the URL reads, and an empty list as
// nats://127.0.0.1:4222. A credential in the URL is not repeated.
func checkBus(list string) (string, error) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, p.Scheme) {
			return "", fmt.Errorf("host: -bus %q: want NATS URLs (nats://, tls://, ws:// or wss://) like nats://127.0.0.1:4222, comma separated", config.RedactURL(u))
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return "", errors.New("host: -bus is empty: give the bus URL, like nats://127.0.0.1:4222")
	}
	return strings.Join(urls, ","), nil
}

// flagError is an error of the host package about the value of flag,
// told as the command's other refusals are, "host: -flag: …": the
// package's own words ("host: read key: open …") name the file but not
// the flag it came from, which embedders of the package do not have.
type flagError struct {
	flag string
	err  error
}

func (e flagError) Error() string {
	return "host: " + e.flag + ": " + strings.TrimPrefix(e.err.Error(), "host: ")
}

func (e flagError) Unwrap() error { return e.err }

// announceAddr is what the sidecar announces for listener address la: the
// -advertise value if given, else la with an unspecified or empty host
// replaced by 127.0.0.1 (reachable only by a gateway on the same machine;
// set -advertise otherwise).
func announceAddr(advertise, listen string, la net.Addr) (string, error) {
	if advertise != "" {
		return advertise, host.CheckAddr(advertise)
	}
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(la.String())
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = "127.0.0.1"
	}
	a := net.JoinHostPort(h, port)
	return a, host.CheckAddr(a)
}

// runHost is `gatehouse host`, the sidecar of DESIGN §4: it serves -addr,
// answers the challenge path itself, proxies the rest to -upstream and runs
// the host protocol. When ctx ends (SIGTERM) it sends leave, keeps
// accepting for -leave-grace, then stops accepting and waits up to
// -drain-timeout for in-flight requests, cutting (and logging) those left.
func runHost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseHostFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	up, err := url.Parse(f.upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return fmt.Errorf("host: -upstream %q must be an http:// or https:// URL", f.upstream)
	}
	if up.User != nil {
		// The proxy never sends it (the client's Authorization passes
		// through as it is), so refuse it rather than ignore it; and do
		// not echo the credential.
		return errors.New("host: -upstream must not carry user info: the sidecar does not authenticate to the upstream")
	}
	if selfLoop(up, f.addr, localIPs()) {
		// Checked before the listen, so a refused start binds nothing.
		return fmt.Errorf("host: -upstream %s reaches this sidecar's own -addr %s: it would forward every request to itself; give the app's address", up, f.addr)
	}
	key, err := host.LoadKey(f.keyFile)
	if err != nil {
		return flagError{"-key", err}
	}
	// JSON, as serve logs. The protocol's own lines name the host already;
	// the sidecar's add it.
	base := newLogger(stderr, slog.LevelInfo)
	logger := base.With("host_id", f.id)
	warnKeyMode(logger, f.keyFile)
	// As serve: a log whose reader went away (2>&1 | logger, a shim
	// restarted) must not end the sidecar, and every request to its app
	// with it, at its next line: Go's runtime kills a process writing to a
	// broken pipe on fd 1 or 2 with SIGPIPE unless the signal is ignored.
	signal.Ignore(syscall.SIGPIPE)

	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("host: -addr %s: %w", f.addr, err)
	}
	defer ln.Close()
	addr, err := announceAddr(f.advertise, f.addr, ln.Addr())
	if err != nil {
		return fmt.Errorf("host: announce address: %v", err)
	}

	// The sidecar may start before its bus and retries for ever, so it
	// says when the bus is out of reach (once per outage): a mistyped or
	// unreachable -bus must not leave it silently unannounced.
	var busDown atomic.Bool
	busReached := func(nc *nats.Conn) {
		if busDown.Swap(false) {
			logger.Info("host: bus reached", "bus", config.RedactURL(nc.ConnectedUrl()))
		}
	}
	nc, err := nats.Connect(f.bus, nats.Name("gatehouse host "+f.id), nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second), nats.RetryOnFailedConnect(true),
		// A node gone silent without a close (machine off, packets
		// dropped) is found in ~6 s, as the gateways find theirs, not
		// after nats.go's default 6 min, while every gateway takes this
		// host out of rotation after 3 missed heartbeats.
		nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(2),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if busDown.CompareAndSwap(false, true) {
				logger.Warn("host: bus unreachable, retrying", "bus", redactBus(f.bus), "err", explainTLS("the bus's", err))
			}
		}),
		// A first connection made after failed tries is nats.go's
		// "connected", not "reconnected": either ends the outage the
		// warning above began. Redacted here, not by nats.go's
		// ConnectedUrlRedacted, which hides a password but not a token.
		nats.ConnectHandler(busReached), nats.ReconnectHandler(busReached))
	if err != nil {
		return fmt.Errorf("host: bus %s: %w", redactBus(f.bus), err)
	}
	defer nc.Close()

	var inflight atomic.Int64
	h, err := host.New(host.Options{
		Conn: nc, Cluster: f.cluster, HostID: f.id, Key: key, Apps: f.apps, Addr: addr,
		Scheme: f.scheme, HeartbeatInterval: f.heartbeat, Inflight: inflight.Load, Logger: base,
	})
	if err != nil {
		return err
	}
	srv := sidecarServer(h.Wrap(counted(&inflight, sidecarProxy(up, f.scheme, logger))), f.scheme, sidecarDefaults)
	fmt.Fprintf(stdout, "gatehouse host %s: serving %s (announced as %s://%s) for %s, proxying to %s, cluster %s on %s\n",
		f.id, ln.Addr(), f.scheme, addr, strings.Join(f.apps, ","), up, f.cluster, redactBus(f.bus))
	return serveSidecar(ctx, srv, sidecarListener(ln, sidecarDefaults), h, f, &inflight, logger)
}

// sidecarTimeouts bound how long a client of the sidecar may hold a
// connection without sending what it must. Gateways are its clients, but
// its port is open to whatever reaches its network.
type sidecarTimeouts struct {
	readHeader time.Duration // a request's head, from its first byte (a new connection's: from the accept)
	idle       time.Duration // between requests; an h2c connection with no stream
	// stall bounds one wait of an exchange under way (hoststall.go): a
	// read of a request body, a write of an answer, with nothing moving.
	stall time.Duration
}

// sidecarDefaults are the gateway's own listeners' defaults
// (listeners.read_header_timeout, listeners.idle_timeout). A gateway sends
// a head at once, and keeps an idle connection to a host 90 s (the
// proxy's IdleConnTimeout), under idle: it closes its end first, so it
// never sends a request on a connection the sidecar is closing.
//
// stall is the gateway's own bound on its clients' stalls, which it takes
// from listeners.idle_timeout too (internal/edge): a gateway in front
// stalls no longer than its client did, and cuts that client first.
var sidecarDefaults = sidecarTimeouts{readHeader: 10 * time.Second, idle: 120 * time.Second, stall: 120 * time.Second}

// sidecarServer is the sidecar's server for h, speaking scheme, to serve
// a sidecarListener. There is no ReadTimeout or WriteTimeout: each would
// bound a whole request or answer, and cut a long upload, an event
// stream or an upgraded connection (a WebSocket) the sidecar proxies; an
// upgraded connection, hijacked, has no deadline left from the server.
// The stall bound takes their place: one read of a body, or one write,
// that waits that long (stallBodies, sidecarListener).
func sidecarServer(h http.Handler, scheme string, t sidecarTimeouts) *http.Server {
	srv := &http.Server{
		Handler:           stallBodies(h, t.stall),
		ReadHeaderTimeout: t.readHeader,
		// Without it an idle keep-alive connection (and one that sent
		// under 4 bytes of its next request, which net/http peeks
		// before the head's deadline starts) or an h2c connection
		// with no stream was held for ever.
		IdleTimeout: t.idle,
		ErrorLog:    log.New(io.Discard, "", 0),
	}
	if scheme == host.SchemeH2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		srv.HTTP2 = &http.HTTP2Config{
			MaxReceiveBufferPerStream:     sidecarStreamWindow,
			MaxReceiveBufferPerConnection: sidecarConnWindow,
		}
	}
	return srv
}

// The h2c server's receive windows. A stream's unread upload holds its
// part of the connection's window until its handler reads it, and a
// gateway sends all its requests to the host on one connection: with
// net/http's defaults, 1 MiB each, one request whose app took none of
// its upload (and stayed open) left every other stream of the gateway's
// unable to send a byte, and the stall bound answered their uploads 408.
// Six streams' windows: five such streams leave the others a stream's
// window, and a connection holds at most 3 MiB of uploads the app has not
// taken (net/http's documented bound on the connection's is under 4 MiB).
// 512 KiB a stream still moves an upload at 500 MB/s a millisecond away.
const (
	sidecarStreamWindow = 512 << 10
	sidecarConnWindow   = 6 * sidecarStreamWindow
)

// selfLoop reports whether up is listen, the sidecar's own -addr, so that
// it would forward every request to itself, each hop holding a connection
// until the machine runs out of ports or file descriptors. A listen
// address without a host, or with an unspecified one, takes loopback and
// every address in local (the machine's own) of either family (Go listens
// dual-stack); an upstream "localhost" or :: is both loopbacks and
// 0.0.0.0 is 127.0.0.1, as dialling them is (loopbackOr); a listen
// address "localhost" is 127.0.0.1, as listening on it is; one name in
// both is one address. Any other name is left to the request-time
// check (sidecarProxy): its address may change after the start, and
// resolving it here would make the start wait on DNS.
func selfLoop(up *url.URL, listen string, local []net.IP) bool {
	lh, lp, err := net.SplitHostPort(listen)
	if err != nil {
		return false // net.Listen says what is wrong with it
	}
	upPort := up.Port()
	if upPort == "" {
		upPort = up.Scheme // http or https, their default ports
	}
	lport, err := net.LookupPort("tcp", lp)
	if err != nil || lport == 0 {
		return false // port 0 picks a free port, which the upstream cannot name
	}
	if uport, err := net.LookupPort("tcp", upPort); err != nil || uport != lport {
		return false
	}
	if lh != "" && strings.EqualFold(strings.TrimSuffix(lh, "."), strings.TrimSuffix(up.Hostname(), ".")) {
		return true
	}
	targets := loopbackOr(up.Hostname())
	lip := net.ParseIP(lh)
	if lh == "" || lip != nil && lip.IsUnspecified() {
		return slices.ContainsFunc(targets, func(t net.IP) bool {
			return t.IsLoopback() || slices.ContainsFunc(local, t.Equal)
		})
	}
	listens := loopbackOr(lh)
	if lip == nil {
		// net.Listen binds one address of a name, its first IPv4 one:
		// "localhost" is 127.0.0.1 alone, and an app on [::1] at the
		// port is another socket. (Where localhost is ::1 alone, a loop
		// through it is left to the request-time check.)
		listens = listens[:min(1, len(listens))]
	}
	return slices.ContainsFunc(targets, func(t net.IP) bool {
		return slices.ContainsFunc(listens, t.Equal)
	})
}

// loopbackOr is the addresses a dial of host h reaches without a lookup:
// h itself if it is an IP; for 0.0.0.0 (or ::ffff:0.0.0.0, which Go
// dials as it) 127.0.0.1 alone, where Linux connects it: a sidecar on ::1
// is another socket; both loopbacks for :: and "localhost". Linux
// connects :: to ::1, but Go's dialer, refused there, tries 0.0.0.0 next
// (net's internetAddrList, go.dev/issue/18806), so :: reaches 127.0.0.1
// whenever nothing listens on ::1. None for any other name.
func loopbackOr(h string) []net.IP {
	ip := net.ParseIP(h)
	switch {
	case ip == nil && strings.EqualFold(strings.TrimSuffix(h, "."), "localhost"):
		return []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	case ip == nil:
		return nil
	case !ip.IsUnspecified():
		return []net.IP{ip}
	case ip.To4() != nil:
		return []net.IP{net.IPv4(127, 0, 0, 1)}
	default:
		return []net.IP{net.IPv6loopback, net.IPv4(127, 0, 0, 1)}
	}
}

// localIPs is the machine's interface addresses, which a listener on
// every address accepts on; none if they cannot be read.
func localIPs() []net.IP {
	addrs, _ := net.InterfaceAddrs()
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// warnKeyMode warns when the key file at path is open to group or
// others, as ssh and serve (cluster.key) refuse a key: whoever reads it
// can pass the gateways' challenge as this host. Warned, not refused: a
// Kubernetes secret is mounted 0644 unless its defaultMode says
// otherwise, and refusing would stop every such sidecar at its next
// restart.
func warnKeyMode(logger *slog.Logger, path string) {
	if runtime.GOOS == "windows" {
		return // no Unix modes: Go makes one up from the read-only bit
	}
	fi, err := os.Stat(path)
	if err != nil {
		return // read a moment ago by LoadKey; nothing to say about a file gone since
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		logger.Warn("host: -key is open to group or others, and anyone who reads it can sign as this host: chmod 600 it (a Kubernetes secret: defaultMode 0400)",
			"file", path, "mode", fmt.Sprintf("%04o", perm))
	}
}

// untrustedCA is added to an error of a bus or an upstream whose
// certificate chains to no root the sidecar trusts, after whose
// certificate it is: the sidecar has no flag for a private CA, Go's system
// roots (SSL_CERT_FILE, SSL_CERT_DIR on Linux) are where it goes (README,
// "Private CA"). internal/bus says the same for the gateway's bus; the
// binary does not import it.
const untrustedCA = "certificate is not signed by a CA this process trusts: for a private CA, start gatehouse with SSL_CERT_FILE set to the CA's PEM file, or SSL_CERT_DIR to a directory holding it"

// explainTLS returns err with untrustedCA, naming whose certificate ("the
// bus's"), when the certificate's signer is unknown, and err as it is
// otherwise.
func explainTLS(whose string, err error) error {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w (%s %s)", err, whose, untrustedCA)
	}
	return err
}

// redactBus hides the user info of each URL in a -bus list: an external
// NATS may give its hosts a credential, which is not for stdout or logs.
func redactBus(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = config.RedactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// serveSidecar runs the server and the host protocol until ctx ends, then
// leaves and drains, in that order. inflight counts the requests the
// server's handler has in progress.
func serveSidecar(ctx context.Context, srv *http.Server, ln net.Listener, h *host.Host, f *hostFlags, inflight *atomic.Int64, logger *slog.Logger) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	hctx, stopHost := context.WithCancel(context.Background())
	defer stopHost()
	ran := make(chan error, 1)
	go func() { ran <- h.Run(hctx) }()

	select {
	case <-ctx.Done():
	case err := <-served:
		stopHost()
		<-ran
		return fmt.Errorf("host: serve: %w", err)
	case err := <-ran:
		srv.Close()
		<-served
		return err
	}
	stopHost() // sends leave and flushes it
	if err := <-ran; err != nil {
		logger.Warn("host: protocol stopped with an error", "err", err)
	}
	// Gateways stop picking us once they see leave; requests they picked
	// just before still arrive, so keep accepting a little longer.
	t := time.NewTimer(f.grace)
	<-t.C
	dctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	err := srv.Shutdown(dctx)
	<-served
	if err == nil {
		err = waitIdle(dctx, inflight)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The bound the operator set, reached: cut what is left and stop
		// as asked (exit 0), as serve does at drain_timeout and nginx at
		// worker_shutdown_timeout. An upgraded connection, which Close
		// does not reach, ends with the process.
		n := inflight.Load()
		srv.Close()
		logger.Warn("host: drained; -drain-timeout cut the requests still in flight",
			"drain_timeout", f.drain.String(), "cut_requests", n)
		return nil
	}
	if err != nil {
		return fmt.Errorf("host: drain: %w", err)
	}
	logger.Info("host: drained")
	return nil
}

// waitIdle waits until n is 0 or ctx ends. Shutdown does not wait for
// hijacked connections, so an upgraded request (a WebSocket) proxied to the
// upstream is still in flight after it returns; its handler, counted in n,
// ends with the connection.
func waitIdle(ctx context.Context, n *atomic.Int64) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for n.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// counted tracks requests in progress for heartbeats and the drain.
func counted(n *atomic.Int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		defer n.Add(-1)
		next.ServeHTTP(w, r)
	})
}
