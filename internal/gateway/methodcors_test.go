package gateway

import (
	"net/http"
	"testing"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestMethodRefusalReadableCrossOrigin: fetch() upper-cases only DELETE,
// GET, HEAD, OPTIONS, POST and PUT, so a page's fetch(url, {method:
// "patch"}) sends "patch". Its preflight asks for "patch" and gets the
// cors layer's 204; the call itself then gets hygiene's 400, which runs
// before that layer. Without Access-Control-Allow-Origin on it the page
// reads only a network error, not the detail that says what to change,
// where before the refusal the same call reached the host. So the
// refusal carries the app's CORS fields, as appClosedCORS gives its 503
// them; an origin off the list still gets none.
func TestMethodRefusalReadableCrossOrigin(t *testing.T) {
	const allowed, other = "https://a.example", "https://b.example"
	e := newEnv(t, nil)
	e.b.Replace(route.State{
		Zones: []*route.Zone{{Name: testZone}},
		Apps:  []*route.App{{ID: "hello", Mode: route.ModeHTTP, Status: route.StatusActive, CORS: route.CORS{Origins: []string{allowed}}}},
	})
	var host seenRequests
	e.backend("h1", "hello", host.handler())
	httpAddr, httpsAddr := e.serve(false)
	H := "Host: hello." + testZone + "\r\n"

	pre := h1Answer(t, httpAddr, false, "OPTIONS /x HTTP/1.1\r\n"+H+"Origin: "+allowed+"\r\nAccess-Control-Request-Method: patch\r\n\r\n")
	if pre.status != http.StatusNoContent || pre.header.Get("Access-Control-Allow-Origin") != allowed {
		t.Fatalf("preflight for patch: %d %q, want the 204 a browser goes on after", pre.status, pre.header)
	}
	for _, tc := range []struct {
		what   string
		method string
		status int
	}{{"patch", "patch", http.StatusBadRequest}, {"TRACE", "TRACE", http.StatusMethodNotAllowed}} {
		for _, tlsOn := range []bool{false, true} {
			addr := httpAddr
			if tlsOn {
				addr = httpsAddr
			}
			a := h1Answer(t, addr, tlsOn, tc.method+" /x HTTP/1.1\r\n"+H+"Origin: "+allowed+"\r\n\r\n")
			wantProblemAnswer(t, tc.what, a, tc.status, "")
			if got := a.header.Get("Access-Control-Allow-Origin"); got != allowed {
				t.Errorf("%s (tls %v) from an allowed origin: Access-Control-Allow-Origin %q, want %q", tc.what, tlsOn, got, allowed)
			}
			if got := a.header.Get("Vary"); got != "Origin" {
				t.Errorf("%s (tls %v): Vary %q, want Origin", tc.what, tlsOn, got)
			}
			a = h1Answer(t, addr, tlsOn, tc.method+" /x HTTP/1.1\r\n"+H+"Origin: "+other+"\r\n\r\n")
			wantProblemAnswer(t, tc.what+" from another origin", a, tc.status, "")
			if got := a.header.Get("Access-Control-Allow-Origin"); got != "" {
				t.Errorf("%s (tls %v) from an origin off the list: Access-Control-Allow-Origin %q", tc.what, tlsOn, got)
			}
		}
	}
	a := h2Answer(t, httpsAddr, "patch", "", [2]string{"origin", allowed})
	wantProblemAnswer(t, "h2 patch", a, http.StatusBadRequest, "")
	if got := a.header.Get("Access-Control-Allow-Origin"); got != allowed {
		t.Errorf("h2 patch from an allowed origin: Access-Control-Allow-Origin %q, want %q", got, allowed)
	}
	if got := host.list(); len(got) != 0 {
		t.Fatalf("the host received %q", got)
	}
}
