package discovery_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
	"github.com/gatehouse-dev/gatehouse/internal/discovery"
	tu "github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestLongHostIDLogLineIsBounded: a host_id is whatever a bus client
// puts in its message. One as long as a message may be (under
// MaxMessageSize, so it reaches validation) and one of 1 MiB and an app or scheme as long, each cost
// one line of a few KiB at most, not the id quoted whole (four times its
// size for bytes %q escapes).
func TestLongHostIDLogLineIsBounded(t *testing.T) {
	t.Parallel()
	gatewayURL, hostURL := startGatewayBus(t)
	var logs tu.SyncBuffer
	e := start(t, gatewayURL, func(o *discovery.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	anon, err := nats.Connect(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()

	body := func(kind string, id string) []byte {
		switch kind {
		case "announce":
			return []byte(`{"host_id":"` + id + `","apps":["hello"],"addr":"127.0.0.1:1","scheme":"http","public_key":"x","ts":1}`)
		case "heartbeat":
			return []byte(`{"host_id":"` + id + `","ts":1}`)
		}
		return []byte(`{"host_id":"` + id + `","ts":1}`)
	}
	near := host.MaxMessageSize - 200
	subjects := map[string]string{
		"announce":  host.AnnounceSubject(cluster),
		"heartbeat": host.HeartbeatSubject(cluster),
		"leave":     host.LeaveSubject(cluster),
	}
	n := 0
	for kind, subj := range subjects {
		// \x01 is no host id byte, and JSON escapes it six bytes long
		// where %q takes four.
		for _, id := range []string{strings.Repeat("a", near), strings.Repeat(`\u0001`, near/6), strings.Repeat("a", 1<<20)} {
			b := body(kind, id)
			if len(b) > int(anon.MaxPayload()) {
				b = b[:anon.MaxPayload()] // the bus takes no more; still over MaxMessageSize
			}
			if err := anon.Publish(subj, b); err != nil {
				t.Fatalf("%s of %d bytes: %v", kind, len(b), err)
			}
			n++
		}
	}
	// The other quoted fields of an announce: an app, a scheme.
	for _, b := range []string{
		`{"host_id":"web-1","apps":["` + strings.Repeat("a", near) + `"],"addr":"127.0.0.1:1","scheme":"http","public_key":"x","ts":1}`,
		`{"host_id":"web-1","apps":["hello"],"addr":"127.0.0.1:1","scheme":"` + strings.Repeat("a", near) + `","public_key":"x","ts":1}`,
	} {
		if err := anon.Publish(subjects["announce"], []byte(b)); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := anon.Flush(); err != nil {
		t.Fatal(err)
	}
	tu.WaitFor(t, 10*time.Second, func() bool {
		return e.dropped("malformed")+e.dropped("oversized") == float64(n)
	}, "not every message dropped")
	lines := 0
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, dropMsg) {
			continue
		}
		lines++
		if len(line) > 4<<10 {
			t.Errorf("a %d-byte log line for one message: %.300s...", len(line), line)
		}
	}
	if lines != n {
		t.Errorf("%d lines about %d dropped messages, want one each", lines, n)
	}
}
