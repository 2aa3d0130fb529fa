package bus_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		opts bus.Options
		want string // substring naming the field
	}{
		{"no data dir", bus.Options{}, "data dir"},
		{"listen no port", bus.Options{DataDir: dir, Listen: "127.0.0.1"}, "listen"},
		{"listen bad port", bus.Options{DataDir: dir, Listen: "127.0.0.1:99999"}, "listen"},
		{"listen word port", bus.Options{DataDir: dir, Listen: "127.0.0.1:http"}, "listen"},
		{"listen bad host", bus.Options{DataDir: dir, Listen: "not a host:4222"}, "listen"},
		{"url scheme", bus.Options{URL: "http://127.0.0.1:4222"}, "url"},
		{"url no host", bus.Options{URL: "nats://:4222"}, "url"},
		{"url bad port", bus.Options{URL: "nats://127.0.0.1:0"}, "url"},
		{"url empty entry", bus.Options{URL: "nats://127.0.0.1:4222,,nats://127.0.0.1:4223"}, "url"},
		{"url path", bus.Options{URL: "nats://127.0.0.1:4222/x"}, "url"},
		{"url garbage", bus.Options{URL: "nats://[::1"}, "url"},
		{"name space", bus.Options{DataDir: dir, Name: "a b"}, "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := bus.New(tt.opts)
			if err == nil {
				b.Close()
				t.Fatalf("New(%+v) = nil error", tt.opts)
			}
			if !strings.HasPrefix(err.Error(), "bus: "+tt.want) {
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestNewAcceptsGoodOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []bus.Options{
		{DataDir: t.TempDir()},
		{DataDir: t.TempDir(), Listen: "[::1]:0"},
		{DataDir: t.TempDir(), Listen: ":4222"},
		{URL: "nats://127.0.0.1:4222"},
		{URL: "nats://a.example:4222, tls://b.example"},
		{URL: "nats://gatehouse:secret@127.0.0.1:4222"},
		{URL: "tls://token@a.example, tls://user:p%40ss@b.example:4222"},
	} {
		if _, err := bus.New(o); err != nil {
			t.Errorf("New(%+v): %v", o, err)
		}
	}
}

func startEmbeddedIn(t *testing.T, dir, listen string) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Options{DataDir: dir, Listen: listen, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEmbeddedStartStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := startEmbeddedIn(t, dir, "127.0.0.1:0")
	if !b.Embedded() {
		t.Fatal("not embedded")
	}
	url := b.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":0") {
		t.Fatalf("ClientURL = %q", url)
	}
	// JetStream calls write through to disk (SyncAlways): a bound of their
	// own, not nats.go's 5 s default, which a loaded machine can outlast.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// JetStream works on the in-process connection.
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Another gateway connecting over TCP with the credential sees the
	// same bucket (a host without it cannot: auth_test.go).
	nc := testutil.Connect(t, gatewayURL(t, dir, url))
	js, _ := jetstream.New(nc)
	kv2, err := js.KeyValue(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv2.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("get over tcp: %v %v", e, err)
	}
	b.Close()
	b.Close() // idempotent
	if b.Conn().IsConnected() {
		t.Fatal("conn still connected after Close")
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "server still serving after Close")
	if err := b.Start(t.Context()); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestEmbeddedKeepsDataAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// JetStream calls write through to disk (SyncAlways): a bound of their
	// own, not nats.go's 5 s default, which a loaded machine can outlast.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		b, err := bus.New(bus.Options{DataDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			_, err = kv.Put(ctx, "k", []byte("v"))
		} else {
			_, err = kv.Get(ctx, "k")
		}
		b.Close()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}

// TestEmbeddedSyncsEveryWrite: the embedded server is the routing
// state's one copy, so it says (as /jsz would to an operator) that each
// JetStream write reaches the disk before it is acknowledged, not at
// NATS's default two-minute sync.
func TestEmbeddedSyncsEveryWrite(t *testing.T) {
	t.Parallel()
	b := startEmbeddedIn(t, t.TempDir(), "127.0.0.1:0")
	sync, err := b.SyncAlways()
	if err != nil {
		t.Fatal(err)
	}
	if !sync {
		t.Fatal("embedded JetStream syncs in the background: an acknowledged write can be lost with the machine's power")
	}
}

func TestEmbeddedPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := bus.New(bus.Options{DataDir: t.TempDir(), Listen: l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	start := time.Now()
	err = b.Start(t.Context())
	if err == nil {
		t.Fatal("Start on a taken port succeeded")
	}
	if !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error does not say the port is taken: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("port-taken error took %s", d)
	}
}

func TestExternal(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	b, err := bus.New(bus.Options{URL: ns.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b.Embedded() || b.ClientURL() != ns.ClientURL() {
		t.Fatalf("ClientURL = %q, want %q", b.ClientURL(), ns.ClientURL())
	}
	if _, err := b.JetStream().AccountInfo(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestExternalUnreachableBoundedByContext(t *testing.T) {
	t.Parallel()
	addr := testutil.RefusedAddr(t) // nothing listens there
	b, err := bus.New(bus.Options{URL: "nats://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = b.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("Start = %v, want not connected", err)
	}
}

func TestExternalConnectsOnceServerAppears(t *testing.T) {
	t.Parallel()
	// A gateway started before its NATS keeps trying until ctx ends.
	addr := testutil.FreeAddr(t)
	// The operator chose the embedded bus's secret beforehand.
	dir := t.TempDir()
	const secret = "chosen-by-the-operator"
	if err := os.WriteFile(filepath.Join(dir, bus.TokenFile), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := bus.New(bus.Options{URL: "nats://" + bus.GatewayUser + ":" + secret + "@" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		done <- b.Start(ctx)
	}()
	startEmbeddedIn(t, dir, addr) // the server appears at that address
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().AccountInfo(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A start that fails (here: the port is taken) leaves the data directory
// as it found it: no bus.token an operator would take for the bus's
// credential, no empty JetStream store; and what an earlier run left
// there, credential and data, is kept.
func TestEmbeddedFailedStartLeavesNothing(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	failStart := func(dir string) {
		t.Helper()
		b, err := bus.New(bus.Options{DataDir: dir, Listen: l.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Start(t.Context()); err == nil {
			t.Fatal("Start on a taken port succeeded")
		}
	}
	list := func(dir string) []string {
		t.Helper()
		var out []string
		err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				out = append(out, p)
			}
			return err
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return out
	}

	empty := t.TempDir()
	failStart(empty)
	if got := list(empty); len(got) != 1 {
		t.Fatalf("a failed start left %v in an empty data dir", got[1:])
	}
	missing := filepath.Join(t.TempDir(), "data")
	failStart(missing)
	if got := list(missing); len(got) != 0 {
		t.Fatalf("a failed start left %v behind in a data dir it created", got)
	}

	used := t.TempDir()
	b := startEmbeddedIn(t, used, "127.0.0.1:0")
	// JetStream calls write through to disk (SyncAlways): a bound of their
	// own, not nats.go's 5 s default, which a loaded machine can outlast.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	token, err := os.ReadFile(filepath.Join(used, bus.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	failStart(used)
	if again, err := os.ReadFile(filepath.Join(used, bus.TokenFile)); err != nil || string(again) != string(token) {
		t.Fatalf("a failed start changed the existing credential: %v", err)
	}
	b = startEmbeddedIn(t, used, "127.0.0.1:0")
	kv, err = b.JetStream().KeyValue(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("a failed start lost the existing data: %v", err)
	}
}

// An external bus that refuses the gateway's credential fails Start with
// the server's word for it, not only "context deadline exceeded": the
// connection retries quietly, and the operator was left to guess why.
func TestExternalWrongCredentialSaysSo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startEmbeddedIn(t, dir, "127.0.0.1:0")
	addr := strings.TrimPrefix(srv.ClientURL(), "nats://")
	b, err := bus.New(bus.Options{URL: "nats://" + bus.GatewayUser + ":not-the-secret-at-all@" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err = b.Start(ctx)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("Start = %v, want the authorization failure", err)
	}
	if strings.Contains(err.Error(), "not-the-secret") {
		t.Fatalf("the error repeats the credential: %v", err)
	}
}

// The embedded server's lines and the bus's own are JSON objects with each
// key once (the server's once carried "component" twice), and a clean
// Close warns about nothing.
func TestEmbeddedLogsCleanJSON(t *testing.T) {
	t.Parallel()
	var logs testutil.SyncBuffer
	b, err := bus.New(bus.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "test",
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.Close()
	out := logs.String()
	if !strings.Contains(out, `"component":"nats-server"`) || !strings.Contains(out, `"component":"bus"`) {
		t.Fatalf("the server's or the bus's lines are missing:\n%s", out)
	}
	testutil.CheckJSONLog(t, out)
	if strings.Contains(out, `"level":"WARN"`) {
		t.Errorf("a clean start and Close warned:\n%s", out)
	}
}

// TestEmbeddedDataDirInUse: two embedded servers on one data directory
// (a second gateway started with the first one's data_dir and other
// ports) would each open the one JetStream store, write the same files
// and serve diverging state: NATS itself takes no lock. The second start
// is refused, saying why, and changes nothing of the first one's bus;
// once the first has stopped, the directory starts again.
func TestEmbeddedDataDirInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startEmbeddedIn(t, dir, "127.0.0.1:0")
	// The JetStream calls write through to disk (SyncAlways): a bound of
	// their own, not nats.go's 5 s default, which a loaded machine can
	// outlast (creating the bucket took 2.2 s under -race at load 28).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := first.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	second, err := bus.New(bus.Options{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(t.Context())
	second.Close()
	if err == nil {
		t.Fatal("a second embedded bus started on a data dir in use")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error does not say the data dir is in use: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("w")); err != nil {
		t.Fatalf("the first bus after the refused start: %v", err)
	}

	first.Close()
	again := startEmbeddedIn(t, dir, "127.0.0.1:0")
	kv, err = again.JetStream().KeyValue(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "w" {
		t.Fatalf("after a restart: %v %v", e, err)
	}
}
