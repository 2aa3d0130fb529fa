package gateway

import (
	"net/http"
	"net/netip"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLinkLocalClientNamedWithoutZone: a client at an IPv6 link-local
// address (here named by a trusted proxy; a client on the gateway's LAN
// connects from one) is named to the host by its address, without the
// zone, which names an interface of the gateway's machine and means
// nothing to a host or a peer cluster, whichever cluster serves it. A
// forward used to sign the zoned address, which the owner's mark parser
// refuses: the owner's host saw the forwarding gateway's address instead
// of the client's, the owner charged every such client to that gateway,
// and logged a warning to check the peer's public key.
func TestLinkLocalClientNamedWithoutZone(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs, edit: func(c *testCluster, o *Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(clientAddr + "/32")}
	}})
	cl := clClient(t)
	tests := []struct{ name, xff, want string }{
		{"global", "2001:db8::1", "2001:db8::1"},
		{"link-local with zone", "fe80::1%eth0", "fe80::1"},
		{"link-local with zone and port", "[fe80::1%eth0]:4711", "fe80::1"},
	}
	for _, tt := range tests {
		for _, owner := range []string{"eu", "us"} { // served where it lands, and forwarded
			t.Run(tt.name+"/owner "+owner, func(t *testing.T) {
				app := ownedBy(t, owner, threeIDs)
				res, body := send(t, cl, cs["eu"], http.MethodGet, app, "/", http.Header{"X-Forwarded-For": {tt.xff}})
				if res.StatusCode != 200 || body != "served by "+owner {
					t.Fatalf("= %d %q, want served by %s", res.StatusCode, body, owner)
				}
				seen := cs[owner].host.requests()
				if got := seen[len(seen)-1].ClientIP; got != tt.want {
					t.Errorf("the host saw client %q, want %q", got, tt.want)
				}
			})
		}
	}
	if n := promtest.ToFloat64(cs["us"].gw.Metrics().ForwardMarksRefused.WithLabelValues("eu")); n != 0 {
		t.Errorf("us refused %v forward marks from eu, want 0", n)
	}
}
