package discovery

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// Anyone may publish on the hosts subjects with headers, which the
// gateway never reads but which a message waiting in a lane holds (nats.go
// keeps its body in the buffer its headers came in): up to the bus's
// max_payload a message, 1 MiB by default, where its body is at most 64
// KiB. The lanes' byte bounds count them, as the subscription's own
// pending limit does, so that headers cannot make a full lane hold more
// than its bound.
func TestLaneBytesCountHeaders(t *testing.T) {
	t.Parallel()
	ns := testutil.StartBus(t)
	nc := testutil.Connect(t, ns.ClientURL())
	d, err := New(Options{
		Conn: nc, Cluster: "c1", GatewayID: "gw-1", Builder: route.NewBuilder(new(route.Live)),
		Keys:              oneKey{&route.HostKey{HostID: "web-1"}},
		HeartbeatInterval: 100 * time.Millisecond, HostTTL: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// dispatch alone, without Run: nothing drains the lanes, as when
	// their goroutines fall behind a flood, so what a lane takes it holds.
	sub, err := nc.Subscribe(host.WildcardSubject("c1"), d.dispatch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	const pad = 1000 << 10         // each within the bus's 1 MiB max_payload
	const msgs = laneBytes/pad + 1 // past the lane's bytes
	anon := testutil.Connect(t, ns.ClientURL())
	padding := strings.Repeat("x", pad)
	for i := range msgs {
		m := nats.NewMsg(host.AnnounceSubject("c1"))
		m.Header.Set("Pad", padding)
		m.Data = fmt.Appendf(nil, `{"host_id":"bogus-%d"}`, i)
		if err := anon.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := anon.Flush(); err != nil {
		t.Fatal(err)
	}
	queued := func() int { return len(d.unprovenLane.c) + int(promtest.ToFloat64(d.queueFull)) }
	testutil.WaitFor(t, 5*time.Second, func() bool { return queued() == msgs }, "dispatch did not take every message")
	if held := len(d.unprovenLane.c); held*pad > laneBytes {
		t.Fatalf("the unproven lane holds %d messages of %d KiB of headers each (%d KiB), past its %d KiB; %v dropped as queue_full",
			held, pad>>10, held*pad>>10, laneBytes>>10, promtest.ToFloat64(d.queueFull))
	}
}
