package discovery_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestHeartbeatAfterSilenceSaysHowLong: a host that heartbeats less often
// than the gateway's heartbeat_interval (its -heartbeat set longer) turns
// unhealthy after three intervals and healthy again at its next
// heartbeat, over and over. The line that says it recovered names how
// long its heartbeats were apart and the interval the gateway expects,
// so the operator sees the mismatch rather than a host that flaps for no
// reason given.
func TestHeartbeatAfterSilenceSaysHowLong(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	var logs tu.SyncBuffer
	e := start(t, "", func(o *discovery.Options) {
		o.HeartbeatInterval = every
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	k, pub := newKey(t)
	cs := newChallengeServer(t, "web-1", k)
	e.keys.enrol("web-1", pub, "hello")
	e.publish(host.KindAnnounce, announce("web-1", cs.addr, pub, "hello"))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "not routable")
	e.publish(host.KindHeartbeat, heartbeat("web-1", 0))
	tu.WaitFor(t, 10*every, func() bool { return !e.routable("hello", "web-1") }, "still routable after 3 silent intervals")
	e.publish(host.KindHeartbeat, heartbeat("web-1", 0))
	tu.WaitFor(t, 5*time.Second, func() bool { return e.routable("hello", "web-1") }, "no recovery on heartbeat")
	var line string
	tu.WaitFor(t, 5*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"discovery: host healthy again"`) {
				line = l
				return true
			}
		}
		return false
	}, "no line that the host recovered")
	for _, want := range []string{`"heartbeat_gap":"`, `"heartbeat_interval":"200ms"`} {
		if !strings.Contains(line, want) {
			t.Errorf("the recovery line has no %s: %s", want, line)
		}
	}
}
