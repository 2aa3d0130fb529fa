package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// TestClaimRPSRefusesOnlyOverRate: a token's rps claim refuses a request
// only when its subject is over that rate (DESIGN §6: over rps → 429). A
// client that never sends more than rps requests in any second, evenly or
// in a burst at the start of each second, is never refused; one that
// sends more is, and told when to retry.
func TestClaimRPSRefusesOnlyOverRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rps   int
		burst int           // requests sent at once, each step
		every time.Duration // between steps
	}{
		{"rps 2, one every 600ms", 2, 1, 600 * time.Millisecond},
		{"rps 1, one every 1.1s", 1, 1, 1100 * time.Millisecond},
		{"rps 4, four at once every 1.001s", 4, 4, 1001 * time.Millisecond},
		{"rps 20, 20 at once every 1.001s", 20, 20, 1001 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEdgeEnv(t, "apps.test", authApps(), nil)
			tok := e.token(func(c jwt.MapClaims) { c["sub"] = "steady"; c["limits"] = map[string]int{"rps": tc.rps} })
			for step := range 6 {
				for i := range tc.burst {
					if res, body := e.do(edgeReq{app: "shop", path: fmt.Sprintf("/%d/%d", step, i), hdr: edgeBearer(tok)}); res.StatusCode != 200 {
						t.Fatalf("step %d, request %d, at %s: %d %s; never more than %d in a second", step, i, time.Duration(step)*tc.every, res.StatusCode, body, tc.rps)
					}
				}
				e.advance(tc.every)
			}
			// Over the rate: a burst twice the claim is cut at the claim.
			e.advance(10 * time.Second)
			for i := range 2 * tc.rps {
				res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)})
				want := 200
				if i >= tc.rps {
					want = http.StatusTooManyRequests
				}
				if res.StatusCode != want {
					t.Fatalf("burst request %d of a claim of %d: %d %s, want %d", i, tc.rps, res.StatusCode, body, want)
				}
				if want == http.StatusTooManyRequests && res.Header.Get("Retry-After") == "" {
					t.Fatal("429 without Retry-After")
				}
			}
		})
	}
}

// TestClaimRPSRefusalFields: a 429 from the token's own rps claim says
// so in the rate-limit fields, which describe the token's bucket (rps n is
// n requests a second) and when it has room again, not the app's window,
// which still had room: a client that read the app's fields would see
// hundreds of requests left and retry at once. The requests it lets
// through carry the app's fields, as every app response does.
func TestClaimRPSRefusalFields(t *testing.T) {
	for _, tc := range []struct {
		rps     int
		advance time.Duration // after the bucket is spent, before the refused request
	}{
		{rps: 1},
		{rps: 2},
		{rps: 3, advance: 100 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("rps %d", tc.rps), func(t *testing.T) {
			e := newEdgeEnv(t, "apps.test", authApps(), nil)
			tok := e.token(func(c jwt.MapClaims) { c["sub"] = "bursty"; c["limits"] = map[string]int{"rps": tc.rps} })
			for i := range tc.rps {
				res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)})
				if res.StatusCode != 200 {
					t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
				}
				left := strconv.Itoa(599 - i)
				for k, v := range map[string]string{"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": left, "RateLimit-Policy": `"app";q=600;w=60`, "RateLimit": `"app";r=` + left + ";t=0"} {
					if got := res.Header.Values(k); len(got) != 1 || got[0] != v {
						t.Errorf("request %d: %s %q, want the app's %q", i, k, got, v)
					}
				}
			}
			e.advance(tc.advance)
			res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)})
			edgeProblem(t, res, body, http.StatusTooManyRequests)
			n := strconv.Itoa(tc.rps)
			for k, v := range map[string]string{
				"X-RateLimit-Limit": n, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
				"RateLimit-Policy": `"rps";q=` + n + ";w=1", "RateLimit": `"rps";r=0;t=1`, "Retry-After": "1",
			} {
				if got := res.Header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("refused: %s %q, want %q", k, got, v)
				}
			}
			// Once the bucket's wait is over, a request fits again.
			e.advance(time.Second)
			if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)}); res.StatusCode != 200 {
				t.Fatalf("after Retry-After: %d %s", res.StatusCode, body)
			}
		})
	}
}

// TestClaimRPSRefusalWhenTheAppWindowIsSpent: a request the token's rps
// refuses that took the last unit of the app's window is answered with
// whichever budget has room later: here the app's window, which has none
// until its reset, not the token's bucket, which has room in a second. A
// client that waits the Retry-After it gets is served; one told a second
// would be refused again, by the app's window.
func TestClaimRPSRefusalWhenTheAppWindowIsSpent(t *testing.T) {
	apps := authApps()
	apps[0].RateLimit = route.RateLimit{Requests: 2, Window: route.Duration(time.Minute)}
	e := newEdgeEnv(t, "apps.test", apps, nil)
	tok := e.token(func(c jwt.MapClaims) { c["sub"] = "bursty"; c["limits"] = map[string]int{"rps": 1} })
	if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)}); res.StatusCode != 200 {
		t.Fatalf("first: %d %s", res.StatusCode, body)
	}
	res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)})
	edgeProblem(t, res, body, http.StatusTooManyRequests)
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || retry <= 1 {
		t.Fatalf("Retry-After %q, want the app window's wait, over a second", res.Header.Get("Retry-After"))
	}
	r := strconv.Itoa(retry)
	for k, v := range map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": r,
		"RateLimit-Policy": `"app";q=2;w=60`, "RateLimit": `"app";r=0;t=` + r,
	} {
		if got := res.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("refused: %s %q, want %q", k, got, v)
		}
	}
	e.advance(time.Duration(retry) * time.Second)
	if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tok)}); res.StatusCode != 200 {
		t.Fatalf("after Retry-After %d s: %d %s", retry, res.StatusCode, body)
	}
}
