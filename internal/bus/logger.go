package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// serverLog adapts nats-server's Logger to slog. Fatalf logs at error
// level and returns: the stock logger's Fatalf calls os.Exit, which would
// take the whole gateway down for, say, a port already in use
// (STYLE §4). The first fatal message is kept so Start can report it.
//
// Its lines about client connections are bounded (see clientLogBurst).
type serverLog struct {
	log *slog.Logger
	now func() time.Time // paces the lines about clients

	mu    sync.Mutex
	fatal string
	// The token bucket of the lines about clients.
	tokens  int
	at      time.Time // tokens are counted up to here; zero: a full bucket
	skipped int       // lines held back since the last one logged
}

// Anyone who reaches the embedded bus connects as a host, without a
// credential, and the server writes a line at error level for each thing
// such a client does that it may not: a publish or subscription outside
// the host subjects ("Publish Violation"), a wrong guess at the gateway's
// credential, a protocol line it cannot parse. A client could so fill
// the gateway's log as fast as it sends. The lines that name a client
// connection (nats-server's "ip:port - cid:N" prefix) at info level and
// above share one token bucket: clientLogBurst at once, then one every
// clientLogEvery (10 a minute); the next line logged counts those held
// back (not_logged). The server's lines about itself are never held back,
// nor those about the gateway's own in-process connection (a slow
// consumer, a refused subscription): the server names a connection by its
// remote address first, and only this process can open one over a pipe,
// whose address is "pipe", so a client cannot pass for it. At debug
// level, chosen for a close look, nothing is held back.
const (
	clientLogBurst = 10
	clientLogEvery = 6 * time.Second
	clientMark     = " - cid:"
	inProcessMark  = "pipe" + clientMark
)

func (l *serverLog) logf(lvl slog.Level, format string, v []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, lvl) {
		return
	}
	msg := fmt.Sprintf(format, v...)
	if lvl < slog.LevelInfo || !strings.Contains(msg, clientMark) || strings.HasPrefix(msg, inProcessMark) {
		l.log.Log(ctx, lvl, msg)
		return
	}
	skipped, ok := l.clientLine()
	switch {
	case !ok:
	case skipped > 0:
		l.log.Log(ctx, lvl, msg, "not_logged", skipped, "every", clientLogEvery)
	default:
		l.log.Log(ctx, lvl, msg)
	}
}

// clientLine takes a token for a line about a client and reports whether
// it may be logged, with the count of those held back before it.
func (l *serverLog) clientLine() (skipped int, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.at.IsZero():
		l.tokens, l.at = clientLogBurst, now
	case now.Before(l.at):
		l.at = now // the clock was set back: refill from here
	default:
		// Whole tokens only, the remainder carried in at.
		if n := int(now.Sub(l.at) / clientLogEvery); n > 0 {
			l.tokens += n
			l.at = l.at.Add(time.Duration(n) * clientLogEvery)
			if l.tokens >= clientLogBurst {
				l.tokens, l.at = clientLogBurst, now
			}
		}
	}
	if l.tokens == 0 {
		l.skipped++
		return 0, false
	}
	l.tokens--
	skipped, l.skipped = l.skipped, 0
	return skipped, true
}

func (l *serverLog) Noticef(format string, v ...any) { l.logf(slog.LevelInfo, format, v) }
func (l *serverLog) Warnf(format string, v ...any) {
	lvl := slog.LevelWarn
	if format == plaintextWarning {
		lvl = slog.LevelDebug
	}
	l.logf(lvl, format, v)
}

// plaintextWarning is what nats-server warns at every start of the
// embedded server: its host user has no password by design (hosts connect
// without credentials and get only the host protocol's subjects), and the
// gateway's secret is already in plain text in TokenFile, which a bcrypt
// hash in memory would not change. A warning an operator can do nothing
// about is logged at debug level instead.
const plaintextWarning = "Plaintext passwords detected, use nkeys or bcrypt"

func (l *serverLog) Errorf(format string, v ...any) { l.logf(slog.LevelError, format, v) }
func (l *serverLog) Debugf(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l *serverLog) Tracef(format string, v ...any) { l.logf(slog.LevelDebug-4, format, v) }

func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
	l.log.Error(msg, "fatal", true)
}

// fatalMsg returns the first fatal message, or "".
func (l *serverLog) fatalMsg() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}
