package gateway

import (
	"net/http"
	"slices"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/cluster"
)

// TestMethodRefusedBeforeAForward: a request for an app another cluster
// owns meets the method checks at the gateway it reached, before the
// forward (step 4 before step 9): TRACE and a lower-case method are
// answered there and never reach the owner or any host, while extension
// methods (WebDAV's, SSDP's) are forwarded and served by the owner's
// host as sent.
func TestMethodRefusedBeforeAForward(t *testing.T) {
	cs := startClusters(t, clusterSetup{ids: threeIDs})
	cl := clClient(t)
	app := ownedBy(t, "us", threeIDs)
	for _, tc := range []struct {
		method string
		status int
	}{{"TRACE", http.StatusMethodNotAllowed}, {"get", http.StatusBadRequest}} {
		res, body := send(t, cl, cs["ap"], tc.method, app, "/m", nil)
		if res.StatusCode != tc.status || res.Header.Get(cluster.HeaderCluster) != "ap" {
			t.Fatalf("%s via ap: %d from %q (%s), want %d from ap itself", tc.method, res.StatusCode, res.Header.Get(cluster.HeaderCluster), body, tc.status)
		}
	}
	for _, m := range []string{"PROPFIND", "MKCOL", "VERSION-CONTROL", "M-SEARCH"} {
		res, body := send(t, cl, cs["ap"], m, app, "/m", nil)
		if res.StatusCode != http.StatusOK || body != "served by us" {
			t.Fatalf("%s via ap: %d %q, want the owner's host's answer", m, res.StatusCode, body)
		}
	}
	var got []string
	for _, c := range cs {
		for _, r := range c.host.requests() {
			got = append(got, c.id+" "+r.Method)
		}
	}
	if want := []string{"us PROPFIND", "us MKCOL", "us VERSION-CONTROL", "us M-SEARCH"}; !slices.Equal(got, want) {
		t.Fatalf("hosts saw %q, want %q", got, want)
	}
}
