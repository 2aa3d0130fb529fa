package gatehouse

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

type zoneMap map[string]*route.Zone

func (m zoneMap) GetZone(_ context.Context, name string) (*route.Zone, error) {
	if z, ok := m[name]; ok {
		return z, nil
	}
	return nil, errNoZone
}

func (m zoneMap) PutZone(_ context.Context, z *route.Zone) error { m[z.Name] = z; return nil }

var errNoZone = errors.New("no such zone") // seedZone only tells found from not

// The seeded zone answers the https listener's address; with none (":443")
// it answers loopback, which would send the internet to 127.0.0.1, so that
// is a warning that says how to set the public addresses, and so is an
// explicit loopback address. A zone already stored is left as it is, and
// every later start warns again while its gateways are all loopback (the
// warning used to come only on the start that seeded the zone). A zone
// under localhost answers loopback by definition: no warning.
func TestSeedZone(t *testing.T) {
	const warn = `"level":"WARN","msg":"zone's gateways are all loopback`
	for _, c := range []struct {
		zone, https, want, log string
		warns                  bool
	}{
		{"apps.example.com", "203.0.113.10:443", "203.0.113.10", `"level":"INFO","msg":"zone seeded"`, false},
		{"apps.example.com", "[2001:db8::1]:443", "2001:db8::1", `"level":"INFO","msg":"zone seeded"`, false},
		// stored as the control API stores gateways (checkZone): an
		// IPv4-mapped address as IPv4, or the zone answered neither A
		// nor AAAA for it, and an address without its interface zone
		{"apps.example.com", "[::ffff:203.0.113.10]:443", "203.0.113.10", `"level":"INFO","msg":"zone seeded"`, false},
		{"apps.example.com", "[2001:db8::1%eth0]:443", "2001:db8::1", `"level":"INFO","msg":"zone seeded"`, false},
		{"apps.example.com", ":443", "127.0.0.1", warn + `: its names resolve to 127.0.0.1`, true},
		{"apps.example.com", "0.0.0.0:8443", "127.0.0.1", `gatehouse ctl zones put apps.example.com '{\"gateways\":[\"<public IP>\"]}'`, true},
		{"apps.example.com", "[::ffff:0.0.0.0]:8443", "127.0.0.1", warn, true},
		{"apps.example.com", "127.0.0.1:8443", "127.0.0.1", warn, true},
		{"apps.example.com", "[::1]:8443", "::1", warn, true},
		{"localhost", "127.0.0.1:8443", "127.0.0.1", `"level":"INFO","msg":"zone seeded"`, false},
	} {
		var logs testutil.SyncBuffer
		st := zoneMap{}
		if err := seedZone(t.Context(), st, slog.New(slog.NewJSONHandler(&logs, nil)), c.zone, c.https); err != nil {
			t.Fatal(err)
		}
		z := st[c.zone]
		if z == nil || len(z.Gateways) != 1 || z.Gateways[0] != c.want {
			t.Errorf("%s: zone %+v, want gateways [%s]", c.https, z, c.want)
		}
		if !strings.Contains(logs.String(), c.log) {
			t.Errorf("%s: log %s, want %s", c.https, logs.String(), c.log)
		}
		if strings.Contains(logs.String(), warn) != c.warns || strings.Contains(logs.String(), `"level":"INFO"`) == c.warns {
			t.Errorf("%s: want one line, a warning or the seeding: %s", c.https, logs.String())
		}
		var again testutil.SyncBuffer
		if err := seedZone(t.Context(), st, slog.New(slog.NewJSONHandler(&again, nil)), c.zone, "192.0.2.1:443"); err != nil {
			t.Fatal(err)
		}
		if st[c.zone] != z {
			t.Errorf("%s: a stored zone was seeded again: %+v", c.https, st[c.zone])
		}
		if warned := strings.Contains(again.String(), warn); warned != c.warns {
			t.Errorf("%s: next start warned %v, want %v: %s", c.https, warned, !warned, again.String())
		} else if !warned && again.String() != "" {
			t.Errorf("%s: next start logged %s", c.https, again.String())
		}
	}
}

// A gateway with neither control.token nor an issuer keeps its control
// API closed, as it should, but says so at start: every control call
// would answer 401 with no hint why. Its whole log is JSON objects with
// each key once.
func TestStartLogSaysControlClosed(t *testing.T) {
	for _, tok := range []string{"", controlToken} {
		cfg := testConfig(t)
		cfg.Control.Token = tok
		var logs testutil.SyncBuffer
		g, err := New(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		select {
		case <-g.Ready():
		case err := <-done:
			t.Fatalf("stopped before ready: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(logs.String(), `"level":"WARN","msg":"control API closed`)
		if warned != (tok == "") {
			t.Errorf("token %q: warned %v:\n%s", tok, warned, logs.String())
		}
		testutil.CheckJSONLog(t, logs.String())
	}
}
