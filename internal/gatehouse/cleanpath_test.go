package gatehouse

import (
	"net/http"
	"strings"
	"testing"
)

// TestManagementPathNotClean: on the management listener a control path
// with "." or ".." segments reaches the API, which answers 400, instead
// of the listener's mux redirecting it to the path cleaned — another item
// (records/./.. is the zone), which a client that follows redirects, as
// Go's and curl -L do, would then read or delete.
func TestManagementPathNotClean(t *testing.T) {
	t.Parallel()
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/keep.example", `{"gateways":["192.0.2.1"]}`); code != 200 {
		t.Fatalf("put zone: %d %s", code, body)
	}
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/keep.example/records/www/A", `{"values":["192.0.2.9"]}`); code != 200 {
		t.Fatalf("put record: %d %s", code, body)
	}
	for _, c := range []struct{ method, path string }{
		{"DELETE", "/api/v3/dns/zones/keep.example/records/./.."},
		{"DELETE", "/api/v3/dns/zones/x/../keep.example"},
		{"GET", "/api/v3//dns/zones/keep.example"},
	} {
		if code, body := r.control(t, c.method, c.path, ""); code != http.StatusBadRequest || !strings.Contains(body, "not clean") {
			t.Errorf("%s %s: %d %s, want 400 naming the path", c.method, c.path, code, body)
		}
	}
	if code, body := r.control(t, "GET", "/api/v3/dns/zones/keep.example/records/www/A", ""); code != 200 {
		t.Fatalf("the record is gone after the refused requests: %d %s", code, body)
	}
}

// TestAPIHostPathNotClean: the same through api.{zone} on the public
// listener, where the control routes answer too (the API's own check).
func TestAPIHostPathNotClean(t *testing.T) {
	t.Parallel()
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/keep.example", `{"gateways":["192.0.2.1"]}`); code != 200 {
		t.Fatalf("put zone: %d %s", code, body)
	}
	res, body := r.get(t, "api.test.local", "/api/v3/dns/zones/keep.example/./..", map[string]string{"Authorization": "Bearer " + controlToken})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not clean") {
		t.Errorf("GET .../keep.example/./.. on api.test.local: %d %s, want 400 naming the path", res.StatusCode, body)
	}
}
