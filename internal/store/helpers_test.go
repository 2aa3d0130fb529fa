package store_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/store"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logCount is a slog handler that counts records whose message contains
// a substring, so a test can wait for "the watch failed" instead of
// sleeping.
type logCount struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCount) WithGroup(string) slog.Handler            { return l }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logCount) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// js connects to url and returns a JetStream on that connection.
func js(t testing.TB, url string, opts ...nats.Option) (jetstream.JetStream, *nats.Conn) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return j, nc
}

func open(t testing.TB, j jetstream.JetStream, o store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := store.Open(ctx, j, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gateway is one store feeding one routing table, as a gateway runs it.
type gateway struct {
	s    *store.Store
	live *route.Live
}

// run starts s.Run on a fresh builder; it is stopped and joined when t
// ends.
func run(t testing.TB, s *store.Store) *gateway {
	t.Helper()
	g := &gateway{s: s, live: new(route.Live)}
	startRun(t, s, g.live)
	select {
	case <-s.Synced():
	case <-time.After(20 * time.Second):
		t.Fatal("store never synced")
	}
	return g
}

// startRun runs s into live, on a builder of its own, until the returned
// stop is called or t ends, and reports an error Run returns.
func startRun(t testing.TB, s *store.Store, live *route.Live) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, route.NewBuilder(live)) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (g *gateway) routes(host, app string) bool {
	m := g.live.Load().Lookup(host)
	return m.Kind == route.KindApp && m.App.ID == app
}

func mustPut(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var _ = testutil.WaitFor

func slogger(h slog.Handler) *slog.Logger { return slog.New(h) }
