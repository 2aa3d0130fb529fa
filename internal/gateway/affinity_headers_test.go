package gateway

import (
	"net/http"
	"slices"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestForwardedCORSHeadersOnce: a cross-origin request that lands on a
// gateway which forwards it gets the CORS fields of the app once, exactly
// as when it lands on the owner: the owner's gateway already applied the
// app's allow-list, and the forwarding gateway applying it again must not
// list Origin twice in Vary nor the exposed fields twice.
func TestForwardedCORSHeadersOnce(t *testing.T) {
	const origin = "https://site.example"
	cs := startClusters(t, clusterSetup{ids: threeIDs, edit: func(c *testCluster, o *Options) {
		tbl := o.Live.Load()
		for _, a := range clApps {
			app := *tbl.App(a)
			app.CORS = route.CORS{Origins: []string{origin}}
			c.b.PutApp(&app)
		}
	}})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)
	hdr := http.Header{"Origin": {origin}}
	direct, _ := send(t, cl, cs["ap"], http.MethodGet, app, "/", hdr)
	for _, via := range []string{"eu", "us"} {
		res, body := send(t, cl, cs[via], http.MethodGet, app, "/", hdr)
		if res.StatusCode != http.StatusOK || body != "served by ap" {
			t.Fatalf("GET via %s = %d %q, want 200 served by ap", via, res.StatusCode, body)
		}
		for _, k := range []string{"Access-Control-Allow-Origin", "Vary", "Access-Control-Expose-Headers"} {
			if got, want := res.Header.Values(k), direct.Header.Values(k); !slices.Equal(got, want) {
				t.Errorf("GET via %s: %s = %q, want %q as from the owner directly", via, k, got, want)
			}
		}
	}
}
