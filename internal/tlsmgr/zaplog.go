package tlsmgr

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// certmagic logs through zap; the gateway logs through slog. certmagic's
// warnings and errors (an ACME problem's detail, a challenge that failed,
// a retry) are an operator's only view of why an order is stuck, so they
// go to the manager's logger. Its info and debug lines (every step of
// every order) do not.
//
// Some of its error lines are written on the TLS handshake path, where any
// client can provoke them: each message is logged at most zapBurst times
// per zapTick, the rest dropped (zap's sampler, keyed by level and
// message), so no client can fill the log.
const (
	zapTick  = time.Minute
	zapBurst = 5
)

// zapLogger returns a zap logger that writes certmagic's warnings and
// errors to log, sampled.
func zapLogger(log *slog.Logger) *zap.Logger {
	core := slogCore{h: log.Handler()}
	return zap.New(zapcore.NewSamplerWithOptions(core, zapTick, zapBurst, 0))
}

// slogCore is a zapcore.Core writing to a slog.Handler.
type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return l >= zapcore.WarnLevel && c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	r := slog.NewRecord(e.Time, slogLevel(e.Level), "certmagic: "+e.Message, 0)
	if name := strings.TrimPrefix(e.LoggerName, "."); name != "" {
		r.AddAttrs(slog.String("logger", name))
	}
	for _, k := range keys {
		r.AddAttrs(slog.Any(k, enc.Fields[k]))
	}
	return c.h.Handle(context.Background(), r)
}

func (c slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
