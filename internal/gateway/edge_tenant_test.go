package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gatehouse-dev/gatehouse/internal/auth"
	"github.com/gatehouse-dev/gatehouse/internal/testutil"
)

// TestClaimLimitsPerIssuer: a sub is unique only within its issuer (RFC
// 7519 §4.1.2), so two tenants' issuers may both mint sub "user1". Their
// claim budgets must stay apart, or one tenant exhausts the other's; two
// tokens of the same issuer and sub still share one.
func TestClaimLimitsPerIssuer(t *testing.T) {
	_, keyB, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		limit string
		// exhaust spends A's budget and returns a func that gives back
		// what it holds (nil when it holds nothing).
		exhaust func(t *testing.T, e *edgeEnv, tokA string) (done func())
	}{
		{"rps", func(t *testing.T, e *edgeEnv, tokA string) func() {
			if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tokA)}); res.StatusCode != 200 {
				t.Fatalf("issuer A's first request: %d %s", res.StatusCode, body)
			}
			return nil
		}},
		{"connections", func(t *testing.T, e *edgeEnv, tokA string) func() {
			release := make(chan struct{})
			e.backendOf("shop").h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					<-release
				}
				_, _ = w.Write([]byte("ok"))
			})
			before := e.backendOf("shop").count()
			held := make(chan int, 1)
			go func() {
				res, _ := e.do(edgeReq{app: "shop", path: "/hold", hdr: edgeBearer(tokA)})
				held <- res.StatusCode
			}()
			testutil.WaitFor(t, 5*time.Second, func() bool { return e.backendOf("shop").count() > before }, "issuer A's held request never arrived")
			return func() {
				close(release)
				if code := <-held; code != 200 {
					t.Errorf("issuer A's held request: %d", code)
				}
			}
		}},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			e := newEdgeEnv(t, "apps.test", authApps(), func(o *Options) {
				o.Edge.Auth.Issuers = append(o.Edge.Auth.Issuers, auth.Issuer{Name: "idp-b", Keys: []ed25519.PublicKey{keyB.Public().(ed25519.PublicKey)}})
			})
			claims := func(scope string) func(jwt.MapClaims) {
				return func(c jwt.MapClaims) {
					c["sub"], c["scope"] = "user1", scope // scope only makes the tokens differ
					c["limits"] = map[string]int{tc.limit: 1}
				}
			}
			tokA := e.token(claims("read"))
			tokA2 := e.token(claims("write")) // same issuer, same sub, another token
			tokB := edgeSign(t, keyB, func(c jwt.MapClaims) { claims("read")(c); c["iss"] = "idp-b" })

			if done := tc.exhaust(t, e, tokA); done != nil {
				defer done()
			}
			res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tokA2)})
			edgeProblem(t, res, body, http.StatusTooManyRequests) // same (iss, sub): one budget
			if res, body := e.do(edgeReq{app: "shop", path: "/", hdr: edgeBearer(tokB)}); res.StatusCode != 200 {
				t.Fatalf("issuer B's user1 refused after issuer A's user1 spent its %s: %d %s", tc.limit, res.StatusCode, body)
			}
			if got := edgeCounter(t, e.reg, "gatehouse_rate_limited_total", map[string]string{"app": "shop", "limit": tc.limit}); got != 1 {
				t.Fatalf("rate_limited_total{%s} = %v, want 1", tc.limit, got)
			}
		})
	}
}
