package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

func TestPolicyThroughChain(t *testing.T) {
	app := &route.App{ID: "shop", Policy: []route.PolicyRule{
		{Action: "allow", Path: "/admin/health"},
		{Action: "deny", Path: "/admin/*"},
		{Action: "deny", Methods: []string{"POST", "DELETE"}, Path: "/items/*"},
	}}
	e := newEdgeEnv(t, "apps.test", []*route.App{app, {ID: "open"}}, nil)
	cases := []struct {
		method, path string
		allowed      bool
	}{
		{"GET", "/", true},
		{"GET", "/items/1", true},
		{"GET", "/admin/health", true},
		{"GET", "/administrator", true},
		{"GET", "/admin", false},
		{"GET", "/admin/", false},
		{"GET", "/admin/users", false},
		{"GET", "//admin", false},
		{"GET", "/a/../admin", false},
		{"GET", "/%2e%2e/admin", false},
		{"GET", "/x/%2E%2e/admin/users", false},
		{"GET", "/%2561dmin", false},
		{"GET", "/admin%2fusers", false},
		{"GET", "/public%2f..%2fadmin", false},
		{"GET", "/admin;jsessionid=1", false},
		{"GET", "/admin.", false},
		{"GET", "/admin/health/../users", false},
		{"GET", "/%5cadmin", false},
		{"GET", "/ADMIN/users", false},
		{"GET", "/admin/x%5c..%5c..", false},
		{"GET", "/admin/.../..", false},
		{"POST", "/items/1", false},
		{"DELETE", "/items", false},
		{"PUT", "/items/1", true},
	}
	denied := 0
	for _, c := range cases {
		before := e.backendOf("shop").count()
		res, body := e.do(edgeReq{method: c.method, app: "shop", path: c.path})
		reached := e.backendOf("shop").count() > before
		if c.allowed {
			if res.StatusCode != 200 || !reached {
				t.Errorf("%s %s: status %d, reached %v; want allowed", c.method, c.path, res.StatusCode, reached)
			}
			continue
		}
		denied++
		if reached {
			t.Errorf("%s %s: the host saw a denied request", c.method, c.path)
		}
		edgeProblem(t, res, body, 403)
	}
	if got := edgeCounter(t, e.reg, "gatehouse_policy_denied_total", map[string]string{"app": "shop"}); got != float64(denied) {
		t.Errorf("policy_denied_total{shop} = %v, want %d", got, denied)
	}
	// an app without rules allows everything
	if res, _ := e.do(edgeReq{app: "open", path: "/admin"}); res.StatusCode != 200 {
		t.Errorf("open app: %d", res.StatusCode)
	}
	// rules change live with the app
	e.b.PutApp(&route.App{ID: "open", Mode: route.ModeHTTP, Status: route.StatusActive, Policy: []route.PolicyRule{{Action: "deny", Path: "/*"}}})
	if res, _ := e.do(edgeReq{app: "open", path: "/anything"}); res.StatusCode != 403 {
		t.Errorf("open app after deny-all: %d", res.StatusCode)
	}
}

// TestPolicyDotDotUnderDeniedPrefix: a deny of /admin/* holds against a
// host that routes the path as received, without removing dot segments
// (Express, Werkzeug and most prefix routers): to it /admin/../x is under
// /admin/. Nothing reaches the host.
func TestPolicyDotDotUnderDeniedPrefix(t *testing.T) {
	app := &route.App{ID: "shop", Policy: []route.PolicyRule{{Action: "deny", Path: "/admin/*"}}}
	e := newEdgeEnv(t, "apps.test", []*route.App{app}, nil)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/admin/") { // a prefix router's mount point
			_, _ = w.Write([]byte("ADMIN PANEL"))
			return
		}
		_, _ = w.Write([]byte("public"))
	})
	for _, p := range []string{"/admin/../x", "/admin/users/../../x", "/admin/health/..", "/admin/./../x"} {
		before := e.backendOf("shop").count()
		res, body := e.do(edgeReq{app: "shop", path: p})
		if e.backendOf("shop").count() > before || res.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s: %d %q, host reached: %v; want 403 (deny /admin/*)", p, res.StatusCode, body, e.backendOf("shop").count() > before)
		}
	}
	if res, body := e.do(edgeReq{app: "shop", path: "/x/../y"}); res.StatusCode != 200 || body != "public" {
		t.Errorf("GET /x/../y: %d %q, want the host's 200", res.StatusCode, body)
	}
}
