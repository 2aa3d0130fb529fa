package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestForwardKeepsRequestTrailers: a chunked upload's trailer fields (a
// checksum, gRPC-style metadata) reach the owner's host when the upload
// lands on a gateway that forwards it, as they do when it lands on the
// owner's own gateway.
func TestForwardKeepsRequestTrailers(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	cl := clClient(t)
	app := ownedBy(t, "ap", threeIDs)
	for _, via := range []string{"ap", "us"} {
		req, err := http.NewRequest(http.MethodPost, cs[via].url+"/upload", io.NopCloser(strings.NewReader("0123456789")))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = app + "." + testZone
		req.ContentLength = -1 // chunked, so the trailer can follow
		req.Trailer = http.Header{"X-Checksum": {"c0ffee"}}
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("POST via %s: %v", via, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(b) != "served by ap" {
			t.Fatalf("POST via %s = %d %q, want 200 served by ap", via, res.StatusCode, b)
		}
		seen := cs["ap"].host.requests()
		if last := seen[len(seen)-1]; last.Body != 10 || last.Checksum != "c0ffee" {
			t.Errorf("POST via %s: the owner's host read %d bytes and trailer X-Checksum %q, want 10 and %q", via, last.Body, last.Checksum, "c0ffee")
		}
	}
}
