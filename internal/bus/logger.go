package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// serverLog adapts nats-server's Logger to slog. Fatalf logs at error
// level and returns: the stock logger's Fatalf calls os.Exit, which would
// take the whole gateway down for, say, a port already in use
// (STYLE §4). The first fatal message is kept so Start can report it.
type serverLog struct {
	log *slog.Logger

	mu    sync.Mutex
	fatal string
}

func (l *serverLog) logf(lvl slog.Level, format string, v []any) {
	if !l.log.Enabled(context.Background(), lvl) {
		return
	}
	l.log.Log(context.Background(), lvl, fmt.Sprintf(format, v...))
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
