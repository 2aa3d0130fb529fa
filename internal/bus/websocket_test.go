package bus_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// bus.url takes ws:// and wss:// URLs as well as nats:// and tls://
// (docs/config.md; internal/config accepts them), and the client
// connects over them.
func TestExternalWebSocket(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	ns, err := server.NewServer(&server.Options{
		ServerName: "ws", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(),
		Websocket: server.WebsocketOpts{Host: "127.0.0.1", Port: port, NoTLS: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	for _, u := range []string{"wss://nats.example:443", "ws://a.example, wss://b.example"} {
		if _, err := bus.New(bus.Options{URL: u}); err != nil {
			t.Errorf("New(%q): %v", u, err)
		}
	}
	// The client cannot mix the two kinds: say so here, not at connect.
	if _, err := bus.New(bus.Options{URL: "ws://a.example, nats://b.example:4222"}); err == nil || !strings.HasPrefix(err.Error(), "bus: url") {
		t.Errorf("mixed ws and nats URLs: err = %v", err)
	}
	b, err := bus.New(bus.Options{URL: fmt.Sprintf("ws://127.0.0.1:%d", port)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().AccountInfo(t.Context()); err != nil {
		t.Fatal(err)
	}
}
