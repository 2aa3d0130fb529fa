package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

func edgeFrom(ip string) http.Header { return http.Header{"X-Forwarded-For": {ip}} }

func TestRateLimitHeadersAndRefusal(t *testing.T) {
	apps := []*route.App{
		{ID: "shop"}, // default 600 / 60 s
		{ID: "tiny", RateLimit: route.RateLimit{Requests: 3, Window: route.Duration(30 * time.Second)}},
	}
	e := newEdgeEnv(t, "apps.test", apps, nil)
	// The limiters' clock sits at a window start, so the numbers are exact.
	e.advance(-time.Duration(e.now.Load() % int64(time.Minute)))

	type step struct {
		app, client string
		advance     time.Duration
		status      int
		limit       string
		remaining   string
		reset       string
		policy      string
		rl          string
		retry       string
	}
	steps := []step{
		{app: "shop", client: "192.0.2.1", status: 200, limit: "600", remaining: "599", reset: "0", policy: `"app";q=600;w=60`, rl: `"app";r=599;t=0`},
		{app: "tiny", client: "192.0.2.1", status: 200, limit: "3", remaining: "2", reset: "0", policy: `"app";q=3;w=30`, rl: `"app";r=2;t=0`},
		{app: "tiny", client: "192.0.2.1", status: 200, limit: "3", remaining: "1", reset: "0", policy: `"app";q=3;w=30`, rl: `"app";r=1;t=0`},
		// the last that fits: one more fits once 3×(1−e/30) ≤ 2 in the next window, 30 + 10 s
		{app: "tiny", client: "192.0.2.1", status: 200, limit: "3", remaining: "0", reset: "40", policy: `"app";q=3;w=30`, rl: `"app";r=0;t=40`},
		{app: "tiny", client: "192.0.2.1", status: 429, limit: "3", remaining: "0", reset: "40", policy: `"app";q=3;w=30`, rl: `"app";r=0;t=40`, retry: "40"},
		// another address has its own budget; so has the same address at another app
		{app: "tiny", client: "192.0.2.2", status: 200, limit: "3", remaining: "2", reset: "0", policy: `"app";q=3;w=30`, rl: `"app";r=2;t=0`},
		{app: "shop", client: "192.0.2.1", status: 200, limit: "600", remaining: "598", reset: "0", policy: `"app";q=600;w=60`, rl: `"app";r=598;t=0`},
		{app: "tiny", client: "192.0.2.1", advance: 25 * time.Second, status: 429, limit: "3", remaining: "0", reset: "15", policy: `"app";q=3;w=30`, rl: `"app";r=0;t=15`, retry: "15"},
		{app: "tiny", client: "192.0.2.1", advance: 15 * time.Second, status: 200, limit: "3", remaining: "0", reset: "10", policy: `"app";q=3;w=30`, rl: `"app";r=0;t=10`},
	}
	for i, s := range steps {
		e.advance(s.advance)
		before := e.backendOf(s.app).count()
		res, body := e.do(edgeReq{app: s.app, path: "/x", hdr: edgeFrom(s.client)})
		if res.StatusCode != s.status {
			t.Fatalf("step %d: status %d, want %d: %s", i, res.StatusCode, s.status, body)
		}
		want := map[string]string{
			"X-RateLimit-Limit": s.limit, "X-RateLimit-Remaining": s.remaining, "X-RateLimit-Reset": s.reset,
			"RateLimit-Policy": s.policy, "RateLimit": s.rl, "Retry-After": s.retry,
		}
		for k, v := range want {
			if got := res.Header.Values(k); (v == "" && len(got) != 0) || (v != "" && (len(got) != 1 || got[0] != v)) {
				t.Errorf("step %d: %s = %q, want %q", i, k, got, v)
			}
		}
		after := e.backendOf(s.app).count()
		if s.status == 429 {
			edgeProblem(t, res, body, 429)
			if after != before {
				t.Errorf("step %d: the backend saw a refused request", i)
			}
		} else if after != before+1 {
			t.Errorf("step %d: backend count %d -> %d", i, before, after)
		}
	}
	if got := edgeCounter(t, e.reg, "gatehouse_rate_limited_total", map[string]string{"app": "tiny", "limit": "app"}); got != 2 {
		t.Errorf("rate_limited_total{tiny} = %v, want 2", got)
	}
}

func TestRateLimitIPv6Slash48AndLiveOverride(t *testing.T) {
	app := &route.App{ID: "shop", RateLimit: route.RateLimit{Requests: 2}}
	e := newEdgeEnv(t, "apps.test", []*route.App{app}, nil)
	codes := func(clients ...string) (out []int) {
		for _, c := range clients {
			res, _ := e.do(edgeReq{app: "shop", path: "/", hdr: edgeFrom(c)})
			out = append(out, res.StatusCode)
		}
		return out
	}
	got := codes("2001:db8:1:1::1", "2001:db8:1:2::9", "2001:db8:1:ffff::1", "2001:db8:2::1")
	if want := []int{200, 200, 429, 200}; !edgeEqualInts(got, want) {
		t.Fatalf("one /48 shares a budget: got %v, want %v", got, want)
	}
	// The app changes: the next request uses the new budget.
	e.b.PutApp(&route.App{ID: "shop", Mode: route.ModeHTTP, Status: route.StatusActive, RateLimit: route.RateLimit{Requests: 5}})
	if got := codes("2001:db8:1::1", "2001:db8:1::1", "2001:db8:1::1", "2001:db8:1::1"); !edgeEqualInts(got, []int{200, 200, 200, 429}) {
		t.Fatalf("after the override: %v", got)
	}
}

func edgeEqualInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRateLimitBurstThroughChain sends 1,000 requests from one client, 64
// at a time, against a budget of 600 with the clock held still: exactly 600
// reach the backend.
func TestRateLimitBurstThroughChain(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", []*route.App{{ID: "shop"}}, nil)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				r, _ := http.NewRequest("GET", e.srv.URL+"/burst", nil)
				r.Host = e.host("shop")
				r.Header.Set("X-Forwarded-For", "198.51.100.7")
				res, err := e.srv.Client().Do(r)
				if err != nil {
					t.Error(err)
					continue
				}
				res.Body.Close()
				switch res.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					refused.Add(1)
				}
			}
		}()
	}
	for range 1000 {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	if ok.Load() != 600 || refused.Load() != 400 || e.backendOf("shop").count() != 600 {
		t.Fatalf("admitted %d, refused %d, backend saw %d; want 600/400/600", ok.Load(), refused.Load(), e.backendOf("shop").count())
	}
}

func TestLimitUnknown(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", nil, func(o *Options) { o.Edge.UnknownRateLimit = 3 })
	for i := 1; i <= 4; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "http://nowhere.example/", nil)
		r.RemoteAddr = "203.0.113.5:4000"
		allowed := e.gw.limitUnknown(w, r)
		if allowed != (i <= 3) {
			t.Fatalf("request %d: allowed %v", i, allowed)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"unknown";q=3;w=60` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if !allowed {
			if w.Code != 429 || w.Header().Get("Retry-After") == "" {
				t.Fatalf("refusal: %d %v", w.Code, w.Header())
			}
		}
	}
	// Through the full chain the route layer charges unknown hosts, per
	// client (read from a trusted proxy's X-Forwarded-For): 404 until the
	// budget is spent, then 429; the limit fields are on both.
	for i := 1; i <= 4; i++ {
		res, body := e.do(edgeReq{app: "ghost", path: "/", hdr: edgeFrom("203.0.113.9")})
		want := 404
		if i == 4 {
			want = 429
		}
		edgeProblem(t, res, body, want)
		if got := res.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(max(3-i, 0)) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q", i, got)
		}
	}
}

func TestEdgeOptionsValidate(t *testing.T) {
	for name, eo := range map[string]EdgeOptions{
		"negative limit":  {RateLimit: -1},
		"negative window": {RateWindow: -time.Second},
		"unknown window":  {UnknownRateWindow: 48 * time.Hour},
		"max keys":        {MaxRateKeys: -1},
	} {
		g := &Gateway{}
		if err := g.initEdge(eo); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRateLimitFieldsSurviveInterimResponses: a host's 1xx (100 Continue
// to an upload with Expect: 100-continue, 103 Early Hints) is passed on,
// and the final response still carries every rate-limit field (DESIGN §2
// step 6), on the fast path (GET) and through ReverseProxy (POST).
func TestRateLimitFieldsSurviveInterimResponses(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", []*route.App{{ID: "shop"}}, nil)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // sends 100 Continue when asked
		if r.URL.Path == "/hints" {
			w.Header().Set("Link", "</app.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		_, _ = io.WriteString(w, "ok")
	})
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	tests := []struct {
		name, method, path string
		expect             bool
	}{
		{"GET, no 1xx", "GET", "/", false},
		{"GET, 103", "GET", "/hints", false},
		{"POST, 103", "POST", "/hints", false},
		{"POST with Expect, 100", "POST", "/upload", true},
		{"POST with Expect, 100 and 103", "POST", "/hints", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader(strings.Repeat("x", 4096))
			}
			req, err := http.NewRequest(tt.method, e.srv.URL+tt.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = e.host("shop")
			req.Header.Set("X-Forwarded-For", "192.0.2.9")
			if tt.expect {
				req.Header.Set("Expect", "100-continue")
			}
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("= %d %q", res.StatusCode, b)
			}
			remaining := strconv.Itoa(600 - 1 - i)
			want := map[string]string{
				"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": remaining, "X-RateLimit-Reset": "0",
				"RateLimit-Policy": `"app";q=600;w=60`, "RateLimit": `"app";r=` + remaining + ";t=0",
			}
			for k, v := range want {
				if got := res.Header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestHostRateFieldsDoNotDoubleTheGateways: a host that sets X-RateLimit-*
// of its own (an API with limits of its own) does not give the client a
// second value of the gateway's fields, over the fast path (GET) and
// ReverseProxy (POST); its own RateLimit-Policy, a list, is kept beside
// the gateway's.
func TestHostRateFieldsDoNotDoubleTheGateways(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", []*route.App{{ID: "shop"}}, nil)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "10")
		w.Header().Set("X-RateLimit-Remaining", "3")
		w.Header().Set("X-RateLimit-Reset", "7")
		w.Header().Set("RateLimit-Policy", `"host";q=10;w=1`)
		_, _ = w.Write([]byte("ok"))
	})
	for _, m := range []string{"GET", "POST"} {
		res, body := e.do(edgeReq{method: m, app: "shop", path: "/", body: strings.NewReader("")})
		if res.StatusCode != 200 || body != "ok" {
			t.Fatalf("%s: %d %q", m, res.StatusCode, body)
		}
		for k, want := range map[string]string{"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": "", "X-RateLimit-Reset": ""} {
			v := res.Header.Values(k)
			if len(v) != 1 || (want != "" && v[0] != want) {
				t.Errorf("%s: %s = %q, want the gateway's one value", m, k, v)
			}
		}
		if v := res.Header.Values("RateLimit-Policy"); len(v) != 2 || !strings.HasPrefix(v[0], `"app"`) || v[1] != `"host";q=10;w=1` {
			t.Errorf("%s: RateLimit-Policy = %q, want the gateway's and the host's", m, v)
		}
	}
}

// TestRateLimitClockStepsBack: the limiters read the wall clock, which an
// NTP step or a restored VM can move back. Until it catches up again a
// client's counter must count as it did when time stood still (at the
// start of its current window), never weigh its last window more than
// its whole count: a client well inside its budget is not refused, and
// the fields it gets still say what fits.
func TestRateLimitClockStepsBack(t *testing.T) {
	app := &route.App{ID: "shop", RateLimit: route.RateLimit{Requests: 10, Window: route.Duration(30 * time.Second)}}
	e := newEdgeEnv(t, "apps.test", []*route.App{app}, nil)
	e.advance(-time.Duration(e.now.Load() % int64(30*time.Second))) // at a window start
	get := func() *http.Response {
		res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeFrom("192.0.2.7")})
		if res.StatusCode != 200 {
			t.Fatalf("status %d with 10 a window and at most 6 used: %s (X-RateLimit-Remaining %q, Retry-After %q)",
				res.StatusCode, body, res.Header.Get("X-RateLimit-Remaining"), res.Header.Get("Retry-After"))
		}
		return res
	}
	for range 4 {
		get()
	}
	e.advance(45 * time.Second) // halfway into the next window: 4 × ½ carried
	get()
	e.advance(-time.Minute) // the clock steps back, before that window began
	// At most the 4 of the last window and the 1 of this one count.
	if got := get().Header.Get("X-RateLimit-Remaining"); got != "4" {
		t.Fatalf("X-RateLimit-Remaining %q after the step back, want 4", got)
	}
}

// TestHostRateFieldsOnInterimResponses: X-RateLimit-* a host sets on its
// 103 Early Hints reach neither that 103 nor, through the fields the
// gateway keeps over a 1xx, the final response: the client reads one
// value of each, the gateway's, on both, over the fast path (GET) and
// ReverseProxy (POST).
func TestHostRateFieldsOnInterimResponses(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", []*route.App{{ID: "shop"}}, nil)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("X-RateLimit-Limit", "10")
		h.Set("X-RateLimit-Remaining", "3")
		h.Set("X-RateLimit-Reset", "7")
		h.Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "ok")
	})
	for i, m := range []string{"GET", "POST"} {
		t.Run(m, func(t *testing.T) {
			var body io.Reader
			if m == "POST" {
				body = strings.NewReader("upload")
			}
			var interim []http.Header
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				interim = append(interim, http.Header(h).Clone())
				return nil
			}}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), m, e.srv.URL+"/", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = e.host("shop")
			res, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != "ok" || len(interim) != 1 {
				t.Fatalf("= %d %q after %d 1xx, want 200 \"ok\" after one", res.StatusCode, b, len(interim))
			}
			remaining := strconv.Itoa(600 - 1 - i)
			want := map[string]string{"X-Ratelimit-Limit": "600", "X-Ratelimit-Remaining": remaining, "X-Ratelimit-Reset": "0"}
			for _, h := range []struct {
				name string
				h    http.Header
			}{{"103", interim[0]}, {"final", res.Header}} {
				for k, v := range want {
					if got := h.h[k]; len(got) != 1 || got[0] != v {
						t.Errorf("%s: %s = %q, want the gateway's %q alone", h.name, k, got, v)
					}
				}
			}
		})
	}
}

// TestHostRateListsAfterInterimResponses: a host with rate limits of its
// own (its RateLimit-Policy and RateLimit, lists) that answers after a
// 1xx — a 100 Continue to an upload with Expect: 100-continue, a 103
// Early Hints — gives the client the gateway's "app" entries first and
// its own after them, as without the 1xx (DESIGN §2 step 6: every
// response carries the gateway's), on the fast path (GET) and through
// ReverseProxy (POST).
func TestHostRateListsAfterInterimResponses(t *testing.T) {
	e := newEdgeEnv(t, "apps.test", []*route.App{{ID: "shop"}}, nil)
	e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // sends 100 Continue when asked
		if r.URL.Path == "/hints" {
			w.Header().Set("Link", "</app.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Set("RateLimit-Policy", `"host";q=10;w=1`)
		w.Header().Set("RateLimit", `"host";r=3;t=1`)
		_, _ = io.WriteString(w, "ok")
	})
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	tests := []struct {
		name, method, path string
		expect             bool
	}{
		{"GET, no 1xx", "GET", "/", false},
		{"GET, 103", "GET", "/hints", false},
		{"POST, 103", "POST", "/hints", false},
		{"POST with Expect, 100", "POST", "/upload", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader(strings.Repeat("x", 4096))
			}
			req, err := http.NewRequest(tt.method, e.srv.URL+tt.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = e.host("shop")
			if tt.expect {
				req.Header.Set("Expect", "100-continue")
			}
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("= %d %q", res.StatusCode, b)
			}
			remaining := strconv.Itoa(600 - 1 - i)
			want := map[string][]string{
				"Ratelimit-Policy": {`"app";q=600;w=60`, `"host";q=10;w=1`},
				"Ratelimit":        {`"app";r=` + remaining + ";t=0", `"host";r=3;t=1`},
			}
			for k, v := range want {
				if got := res.Header[k]; !slices.Equal(got, v) {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
