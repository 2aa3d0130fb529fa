package gateway

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/proxy"
)

// TestForwardDeadlineSparesSmallUpload: a write of a known length up to
// 16 KiB is read whole before its forward to the owner, so that it can
// still be served here if the owner proves no host of its saw it (DESIGN
// §5.2). That read is the client's upload, which the cluster deadline does
// not count (docs/config.md, cluster.deadline), as it does not count the
// streamed upload of a larger body (TestForwardDeadlineSparesUpload). A
// POST with Content-Length: 600 whose body takes 1.5 s to arrive, with a
// 1 s deadline, is answered by the owner through any gateway: it used to
// get 504 from a non-owner, no cluster ever tried, and 200 through the
// owner's own gateway.
func TestForwardDeadlineSparesSmallUpload(t *testing.T) {
	const deadline = time.Second
	cs := startClusters(t, clusterSetup{ids: threeIDs, deadline: deadline, edit: func(c *testCluster, o *Options) {
		o.Proxy = proxy.Options{DialTimeout: time.Second, ResponseHeaderTimeout: deadline}
	}})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)
	for _, via := range []string{"ap", "us"} {
		req, err := http.NewRequest(http.MethodPost, cs[via].url+"/upload", &trickle{n: 600, piece: 100, every: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		req.Host = app + "." + testZone
		req.ContentLength = 600 // at most maxKeptBody: read whole before the forward
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("POST via %s: %v", via, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(b) != "served by ap" {
			t.Fatalf("slow 600-byte upload via %s: %d %q, want 200 served by ap", via, res.StatusCode, b)
		}
	}
	seen := cs["ap"].host.requests()
	if len(seen) != 2 || seen[0].Body != 600 || seen[1].Body != 600 {
		t.Fatalf("owner's host saw %+v, want two whole 600-byte bodies", seen)
	}
}
