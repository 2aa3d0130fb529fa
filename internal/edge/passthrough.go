package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// ErrNoHost is returned by a passthrough Dial when the app has no
// reachable verified tls host.
var ErrNoHost = errors.New("edge: no verified tls host for passthrough app")

// ErrCut is returned by a passthrough Dial when the app or host was
// taken out of service (see route.Conns) while the host was dialed.
var ErrCut = errors.New("edge: passthrough app or host taken out of service")

// RoutePassthrough returns an Options.Passthrough that reads live: see
// [Passthrough.Route]. now may be nil (time.Now). Its pipes are not held
// in a route.Conns: a table change never cuts them.
func RoutePassthrough(live *route.Live, now func() time.Time) func(serverName string) (Dial, bool) {
	return NewPassthrough(live, now, nil).Route
}

// Passthrough routes TLS passthrough names through a live table. Its
// Route is an Options.Passthrough; with HeldApps and ForgetApp it is a
// route.AppState, so that a deleted app's round-robin counter goes with
// the app. Safe for concurrent use.
type Passthrough struct {
	live *route.Live
	now  func() time.Time
	// One counter per app, as the L7 dispatch keeps (internal/proxy): with
	// one for all, two apps whose clients take turns would each always
	// start at the same host. An entry lives until its app leaves the
	// table (ForgetApp).
	robins sync.Map // app id -> *atomic.Uint32
	// conns holds each pipe open to its app and host, so that a table
	// that takes either out of service closes it; nil: not held.
	conns *route.Conns
}

// NewPassthrough returns a Passthrough reading live. now may be nil
// (time.Now). conns, if not nil, holds every pipe it routes until the
// pipe ends, so that route.Conns.Cut closes the pipes of an app suspended,
// retired or deleted, or of a host revoked; conns must read
// the same live.
func NewPassthrough(live *route.Live, now func() time.Time, conns *route.Conns) *Passthrough {
	if now == nil {
		now = time.Now
	}
	return &Passthrough{live: live, now: now, conns: conns}
}

// Route pipes a name that reaches an active app in passthrough mode to
// one of the app's verified hosts with scheme "tls" (round robin,
// skipping degraded hosts unless all are, trying the next on a failed
// dial and marking it degraded). Any other name (unknown, http mode,
// suspended or retired app) is terminated by the gateway.
func (p *Passthrough) Route(name string) (Dial, bool) {
	if strings.IndexByte(name, ':') >= 0 {
		// No host name holds one (RFC 6066 §3 has no port in SNI);
		// the table's lookup would take "name:junk" for a Host
		// header's name:port and pipe it.
		return nil, false
	}
	tbl := p.live.Load()
	m := tbl.Lookup(name)
	if m.Kind != route.KindApp || m.App.Mode != route.ModePassthrough || m.App.Status != route.StatusActive {
		return nil, false
	}
	now := p.now
	hosts := passthroughHosts(tbl.Pool(m.App.ID), now())
	rr, ok := p.robins.Load(m.App.ID)
	if !ok {
		rr, _ = p.robins.LoadOrStore(m.App.ID, new(atomic.Uint32))
	}
	// Reduced as a uint32: an int of it turns negative on 32-bit.
	start := int(rr.(*atomic.Uint32).Add(1) % uint32(max(len(hosts), 1)))
	app, conns := m.App.ID, p.conns
	return func(ctx context.Context) (net.Conn, *route.Conn, error) {
		c, h, err := dialFirst(ctx, hosts, start, now)
		if err != nil || conns == nil {
			return c, nil, err
		}
		// Closing the host's side ends the pipe: the copy from it fails,
		// and the pipe then closes both sides.
		held, ok := conns.Add(app, h.ID, c)
		if !ok {
			c.Close()
			return nil, nil, ErrCut
		}
		return c, held, nil
	}, true
}

// HeldApps calls f with each app id p keeps a round-robin counter for.
func (p *Passthrough) HeldApps(f func(id string) bool) {
	p.robins.Range(func(k, _ any) bool { return f(k.(string)) })
}

// ForgetApp drops app's round-robin counter; a connection routed to app
// after it starts a new one, which a later sweep forgets again.
func (p *Passthrough) ForgetApp(app string) { p.robins.Delete(app) }

// passthroughHosts are the tls hosts of pool that are not cooling down
// at now; when every one is, the one that failed longest ago, as the L7
// dispatch picks (internal/proxy): a host back from a restart is tried
// rather than every client closed until its cool-down ends.
func passthroughHosts(pool []*route.Host, now time.Time) []*route.Host {
	var hosts []*route.Host
	var oldest *route.Host
	for _, h := range pool {
		if h.Scheme != "tls" {
			continue
		}
		if !h.Health.Degraded(now) {
			hosts = append(hosts, h)
		} else if oldest == nil || h.Health.LastFail().Before(oldest.Health.LastFail()) {
			oldest = h
		}
	}
	if len(hosts) == 0 && oldest != nil {
		hosts = append(hosts, oldest)
	}
	return hosts
}

// failLog says a failure once per key and window, and the next time it
// speaks, how many it left out: every client of a passthrough app whose
// hosts are down fails its dial, and a line each would flood the log.
// The zero value is ready; safe for concurrent use.
type failLog struct {
	mu   sync.Mutex
	keys map[string]*failLogKey
}

type failLogKey struct {
	next time.Time // when the key may be said again
	left int       // failures not said since the last line
}

// failLogWindow is how often one key is said; failLogKeys bounds how many
// are remembered (the keys are routed names, so few; past it the memory
// starts over, and each key may be said once more).
const (
	failLogWindow = 10 * time.Second
	failLogKeys   = 1024
)

// say reports whether a failure for key at now is to be logged, and how
// many for it were not since the last that was.
func (l *failLog) say(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if l.keys == nil || len(l.keys) >= failLogKeys {
			l.keys = map[string]*failLogKey{}
		}
		k = &failLogKey{}
		l.keys[key] = k
	}
	if now.Before(k.next) {
		k.left++
		return false, 0
	}
	left := k.left
	k.next, k.left = now.Add(failLogWindow), 0
	return true, left
}

// dialFirst dials hosts in round-robin order from start until one
// answers, and returns the connection and the host.
func dialFirst(ctx context.Context, hosts []*route.Host, start int, now func() time.Time) (net.Conn, *route.Host, error) {
	if len(hosts) == 0 {
		return nil, nil, ErrNoHost
	}
	var d net.Dialer
	var errs []error
	for i := range hosts {
		h := hosts[(start+i)%len(hosts)]
		// The address that passed the host's challenge: a name in Addr is
		// never resolved again (DESIGN §4).
		c, err := d.DialContext(ctx, "tcp", h.DialAddr())
		if err == nil {
			h.Health.OK()
			return c, h, nil
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			// Called off by the gateway (its drain): nothing is known
			// of the host, and a cool-down would turn its clients away.
			errs = append(errs, fmt.Errorf("%s: %w", h.ID, err))
			break
		}
		h.Health.Fail(now())
		errs = append(errs, fmt.Errorf("%s: %w", h.ID, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, fmt.Errorf("%w: %w", ErrNoHost, errors.Join(errs...))
}
