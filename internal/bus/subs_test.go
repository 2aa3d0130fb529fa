package bus_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/bus"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// A client of the embedded bus needs no credential, so one connection
// subscribing without end (each subscription a few hundred bytes of the
// server's memory) must not take the gateway's memory with it.
func TestEmbeddedBoundsSubscriptionsPerConnection(t *testing.T) {
	t.Parallel()
	b := startEmbeddedIn(t, t.TempDir(), "127.0.0.1:0")
	var mu sync.Mutex
	var errs []string
	anon, err := nats.Connect(b.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	inbox := anon.NewInbox()
	for i := range bus.MaxSubscriptions + 10 {
		if _, err := anon.SubscribeSync(fmt.Sprintf("%s.%d", inbox, i)); err != nil {
			break // nats.go reports the server's refusal on a later call, or not at all
		}
	}
	_ = anon.Flush()
	exceeded := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			if strings.Contains(strings.ToLower(e), "maximum subscriptions exceeded") {
				return true
			}
		}
		return false
	}
	if !testutil.Eventually(5*time.Second, exceeded) {
		mu.Lock()
		t.Fatalf("%d subscriptions on one connection were all taken (errors: %q)", bus.MaxSubscriptions+10, errs)
	}

	// A host within the bound still speaks the host protocol, and the
	// gateway's own connection still works.
	h, err := nats.Connect(b.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	watch, err := b.Conn().SubscribeSync(host.AnnounceSubject("one"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(host.AnnounceSubject("one"), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if m, err := watch.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("gateway got %v, %v", m, err)
	}
}
