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

// TestManagementPathNotCleanBeforeAPI: a control path that is not clean
// before its "/api/" (a "//api/…", "/./api/…" or "/x/../api/…") is a
// control path too. Without the credential it answers 401, as every
// control path does, and with it 400, never the listener's mux redirect
// to the path cleaned: that 307 went out unauthenticated and pointed at
// another item (records/./.. is the zone), which a client that follows
// redirects with its token, as Go's does, then deleted.
func TestManagementPathNotCleanBeforeAPI(t *testing.T) {
	t.Parallel()
	r := start(t, testConfig(t))
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/keep.example", `{"gateways":["192.0.2.1"]}`); code != 200 {
		t.Fatalf("put zone: %d %s", code, body)
	}
	if code, body := r.control(t, "PUT", "/api/v3/dns/zones/keep.example/records/www/A", `{"values":["192.0.2.9"]}`); code != 200 {
		t.Fatalf("put record: %d %s", code, body)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path string }{
		{"DELETE", "//api/v3/dns/zones/keep.example/records/./.."},
		{"DELETE", "/./api/v3/dns/zones/keep.example/records/./.."},
		{"DELETE", "/x/../api/v3/dns/zones/keep.example/records/./.."},
		{"GET", "//api/v3/apps"},
		{"GET", "/api"},
	} {
		req, _ := http.NewRequest(c.method, "http://"+r.g.Addrs().Management+c.path, nil)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without a credential: %d (Location %q), want 401", c.method, c.path, res.StatusCode, res.Header.Get("Location"))
		}
		if c.path == "/api" {
			continue // clean, and no control route: 404 with the credential
		}
		// r.control's client follows redirects, as Go's default does
		if code, body := r.control(t, c.method, c.path, ""); code != http.StatusBadRequest || !strings.Contains(body, "not clean") {
			t.Errorf("%s %s: %d %s, want 400 naming the path", c.method, c.path, code, body)
		}
	}
	if code, body := r.control(t, "GET", "/api/v3/dns/zones/keep.example/records/www/A", ""); code != 200 {
		t.Fatalf("the record is gone after the refused requests: %d %s", code, body)
	}
}
