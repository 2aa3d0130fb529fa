package gateway

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestSlowHostAtOwnerIsNoHungPeer: the owner cluster's gateway is up and
// answers, but its host for the app does not answer a forwarded request
// in time. The owner answers the forward itself, before the forwarding
// gateway's deadline (the one deadline covers the forward and the
// owner's own attempt), so the forwarder never takes it for a hung
// gateway: no cool-down, no warning, and the owner's other apps are still
// forwarded to it at once. Before, both gateways ran out the same
// deadline, the forwarder's first, and one slow request made every app
// the owner serves go elsewhere for a cool-down, a 502 where no other
// cluster has a host.
func TestSlowHostAtOwnerIsNoHungPeer(t *testing.T) {
	tests := []struct {
		name   string
		method string
	}{
		{"GET", http.MethodGet},
		{"POST", http.MethodPost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs testutil.SyncBuffer
			cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: time.Second, edit: func(c *testCluster, o *Options) {
				if c.id == "eu" {
					o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				}
			}})
			cl := clClient(t)
			app := ownedBy(t, "us", threeIDs)
			cs["us"].host.mode.Store(hostHang)
			start := time.Now()
			res, _ := send(t, cl, cs["eu"], tt.method, app, "/", nil)
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("%s with the owner's host hung took %s, want about the 1 s deadline", tt.method, took)
			}
			if res.StatusCode < 500 && res.StatusCode != http.StatusOK {
				t.Fatalf("%s with the owner's host hung = %d", tt.method, res.StatusCode)
			}
			if tt.method == http.MethodPost {
				// The owner's host has the write: never served again here
				// (DESIGN §5.2), the owner's 504 is the answer.
				if res.StatusCode != http.StatusGatewayTimeout {
					t.Fatalf("POST with the owner's host hung = %d, want the owner's 504", res.StatusCode)
				}
				if n := len(cs["eu"].host.requests()); n != 0 {
					t.Fatalf("the POST the owner's host took was replayed at eu (%d requests)", n)
				}
			}
			cs["us"].host.mode.Store(hostOK)
			res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", nil)
			if res.StatusCode != http.StatusOK || body != "served by us" {
				t.Fatalf("GET right after = %d %q, want served by us: its gateway answered, it is no hung peer", res.StatusCode, body)
			}
			if n := promtest.ToFloat64(cs["eu"].gw.Metrics().ClusterForwards.WithLabelValues("us", "owner", "deadline")); n != 0 {
				t.Errorf("deadline forwards counted %v, want 0: the owner answered", n)
			}
			if strings.Contains(logs.String(), "did not answer a forward within cluster.deadline") {
				t.Errorf("the owner was warned about as a hung peer:\n%s", logs.String())
			}
		})
	}
}
